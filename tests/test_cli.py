"""The ``feudal-es`` CLI as a user runs it: subprocesses of ``python -m feudal_es.cli``.

``train`` with a tiny JSON config (its history equals the Python API's for the same
config; a slow test SIGKILLs it after its first checkpoint and ``--resume``s it to the
same history); ``eval`` of two saved selectors on identical episodes; ``envs`` listing
an env that an ``--import``ed module registers (``user_envs``); ``render``; the errors a
newcomer meets first (resume with nothing to do or no directory, ``--out`` into a foreign
directory, a selector file of another env). The README's custom-env walk-through runs
in test_readme.py. Once ``train`` has run as a subprocess, the ``eval`` and error cases
go through ``cli.main`` in this process (:func:`main_in`: the same code, without a process
start, import and compilation each; test_cli_errors runs the errors as subprocesses too).
Compilations are shared with the in-process tests through the session's persistent XLA
cache (conftest.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    TINY,
    assert_history_close,
    cli_command,
    cli_env,
    main_in,
    metrics_rows,
    run_cli,
)
from PIL import Image

# --- helpers ----------------------------------------------------------------------------------
cli = run_cli


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    (d / "tiny.json").write_text(json.dumps(TINY.to_dict()))
    return d


@pytest.fixture(scope="module")
def trained(work):
    """``feudal-es train`` with the tiny config (3 rounds, final GIF): (run dir, stdout)."""
    run = work / "run"
    out = cli("train", "--config", "tiny.json", "--out", str(run), "--set", "gif=true",
              cwd=work).stdout
    return run, out


# --- tests ----------------------------------------------------------------------------------
def test_help_on_every_command(work):
    from feudal_es.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {"train", "eval", "envs", "render", "demo", "pretrain",
                                "convert", "zoo"}
    for name, p in sub.choices.items():  # every command that resolves env ids
        assert ("--import" in p.format_help()) == (name != "convert"), name
    proc = cli("train", "--help", cwd=work)
    assert "--resume" in proc.stdout and "--set KEY=VALUE" in proc.stdout


def test_train_writes_the_run_and_matches_the_python_api(work, trained):
    from feudal_es.trainer import ESTrainer

    run, out = trained
    for line in ("run dir:", "learning curve:", "episode GIF:"):
        assert line in out
    assert str(run) in out
    for name in ("episode.gif", "learning_curve.png", "best_selector.safetensors", "config.json",
                 "ckpt_00000003.safetensors"):
        assert (run / name).is_file(), name
    rows = metrics_rows(run)
    assert [r["round"] for r in rows] == [0, 1, 2]
    full = ESTrainer(TINY, work / "in-process")  # same config and seed, same history
    full.run()
    assert_history_close(rows, full.history)


@pytest.mark.heavy
def test_train_sigkilled_then_resumed_equals_uninterrupted_run(work, trained):
    """SIGKILL once the first checkpoint is on disk, then ``train --resume``: the history
    equals the uninterrupted CLI run's."""
    run = work / "killed"
    proc = subprocess.Popen(
        cli_command("train", "--config", "tiny.json", "--out", str(run), "--no-progress"),
        cwd=work, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (run / "ckpt_00000001.safetensors").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "no first checkpoint within 240 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    out = cli("train", "--resume", str(run), "--no-progress", cwd=work).stdout
    assert "from round" in out
    assert_history_close(metrics_rows(run), metrics_rows(trained[0]))


def test_eval_compares_two_selectors_on_identical_episodes(work, trained):
    run, _ = trained
    other = work / "other.safetensors"
    from feudal_es.checkpoint import load_selector, save_selector

    theta, meta = load_selector(run / "best_selector.safetensors")
    save_selector(other, np.asarray(theta) + 0.5, meta)  # a different selector
    best = str(run / "best_selector.safetensors")
    sels = [best, str(other), best]
    status, out, err = main_in(work, "eval", str(run), "--selector", *sels, "--episodes",
                               "4", "--json")
    assert status == 0, err
    res = json.loads(out)
    rows = res["selectors"]
    assert [r["selector"] for r in rows] == sels and res["episodes"] == 4
    assert rows[0]["fitness_mean"] == rows[2]["fitness_mean"]  # same selector, same episodes
    for r in rows:
        lo, hi = r["ci95"]
        assert lo <= r["fitness_mean"] <= hi and "coverage_cost" in r
        assert len(r["returns"]) == 4 and np.mean(r["returns"]) == pytest.approx(
            r["fitness_mean"])
    # rliable's aggregates over the episodes, as feudal_es.aggregate computes them here
    from feudal_es import aggregate

    for r in rows:
        np.testing.assert_allclose(r["iqm"], aggregate.iqm(r["returns"]), rtol=1e-9)
    p = [aggregate.probability_of_improvement(rows[0]["returns"], r["returns"])
         for r in rows[1:]]
    assert [i["b"] for i in res["improvement"]] == sels[1:]
    np.testing.assert_allclose([i["p"] for i in res["improvement"]], p, rtol=1e-9)
    assert res["improvement"][1]["p"][0] == 0.5  # the same selector on the same episodes
    status, table, _ = main_in(work, "eval", str(run), "--selector", *sels, "--episodes", "4")
    assert status == 0
    assert "95% CI" in table and "coverage_cost" in table and "±" in table
    assert "IQM [95% bootstrap CI]" in table and f"P({best} > {other}) = " in table
    line = next(x for x in table.splitlines() if x.startswith(str(other)))
    assert f"{rows[1]['fitness_mean']:.4f} ± {rows[1]['fitness_std']:.4f}" in line


def test_eval_of_two_runs_and_the_marl_eval_export(work, trained):
    """Two runs (here a copy of one: same executor, same selector) on the same episodes;
    the export holds each row's per-episode returns in marl-eval's layout."""
    import shutil

    from feudal_es.marl_eval import RETURN, check_marl_eval

    run, _ = trained
    twin = work / "twin"
    shutil.rmtree(twin, ignore_errors=True)
    shutil.copytree(run, twin)
    status, out, err = main_in(work, "eval", str(run), str(twin), "--episodes", "4", "--json",
                               "--export", "marl-eval", "marl.json")
    assert status == 0, err
    res = json.loads(out)
    a, b = res["selectors"]
    assert res["runs"] == [str(run), str(twin)] and a["run"] == str(run)
    assert a["returns"] == b["returns"] and res["improvement"][0]["p"][0] == 0.5
    data = json.loads((work / "marl.json").read_text())
    check_marl_eval(data)
    algos = data["feudal_es"]["Coverage-v0"]
    assert list(algos) == [a["selector"], b["selector"]]
    one = algos[a["selector"]]["run_0"]
    assert one["absolute_metrics"][RETURN] == a["returns"]
    assert one["step_0"]["step_count"] == a["env_steps"] > 0
    assert one["absolute_metrics"]["coverage_cost"] == a["per_episode"]["coverage_cost"]
    # what cannot be asked, in one line each
    status, _, err = main_in(work, "eval", str(run), str(twin), "--selector", "final")
    assert status == 2 and "selectors of one run" in err
    status, _, err = main_in(work, "eval", str(run), "--export", "csv", "x.csv")
    assert status == 2 and "'csv': unknown format" in err
    status, out, err = main_in(work, "eval", str(run), "--export", "marl-eval", str(twin))
    assert status != 0 and "directory" in err and not out  # refused before any work


def test_render_writes_an_episode_gif(work, trained):
    run, _ = trained
    out = work / "episode.gif"
    cli("render", str(run), "--out", str(out), cwd=work)
    with Image.open(out) as im:  # reset + 12 steps at 100 ms (Pillow merges equal frames)
        total = 0
        for i in range(im.n_frames):
            im.seek(i)
            total += im.info["duration"]
    assert total == 13 * 100


def test_envs_lists_bundled_and_imported_ids(work):
    res = json.loads(cli("envs", "--import", "user_envs", "--json", cwd=work).stdout)
    ids = {r["id"]: (r["source"], r["path"]) for r in res}
    assert ids["feudal_es/Coverage-v0"] == ("bundled", "jax")
    assert ids["feudal_es/Rover-v0"] == ("bundled", "jax")
    assert ids["tests/CliLine-v0"] == ("pettingzoo", "host")
    assert "classic/rps-v2" not in ids  # its extra is not installed: not listed as trainable


def test_unknown_env_is_a_clear_error(work):
    proc = cli("train", "--env", "feudal_es/Coverag-v0", "--no-progress", cwd=work, check=False)
    assert proc.returncode == 2
    assert "unknown env 'feudal_es/Coverag-v0'" in proc.stderr
    assert "feudal_es/Coverage-v0" in proc.stderr and "Traceback" not in proc.stderr


def test_critic_time_input_is_refused_on_the_host_path(work):
    proc = cli("train", "--env", "tests/CliLine-v0", "--import", "user_envs", "--set",
               "critic.time_input=true", "--out", str(work / "timed"), "--no-progress",
               cwd=work, check=False)
    assert proc.returncode == 2 and "critic.time_input needs a fixed episode" in proc.stderr
    assert "Traceback" not in proc.stderr and not (work / "timed").exists()


def test_resume_and_out_errors_come_before_any_work(work, trained):
    run, _ = trained
    status, out, _ = main_in(work, "train", "--resume", str(run))
    assert status == 0 and "nothing to do" in out and "3 of its 3 rounds" in out
    status, _, err = main_in(work, "train", "--resume", str(work / "missing"))
    assert status == 2 and "no such directory" in err
    foreign = work / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    for where, message in ((foreign, "is not empty and is not a run directory"),
                           (run, "already holds a run")):
        status, out, err = main_in(work, "train", "--config", "tiny.json", "--out",
                                   str(where), "--no-progress")
        assert status == 2 and message in err
        assert "training" not in out  # refused before the banner
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_selector_file_of_another_env_is_refused_unless_forced(work, trained):
    from feudal_es.checkpoint import load_selector, save_selector

    run, _ = trained
    theta, meta = load_selector(run / "best_selector.safetensors")
    alien = work / "alien.safetensors"
    save_selector(alien, theta, {**meta, "env": "feudal_es/Discovery-v0"})
    status, _, err = main_in(work, "eval", str(run), "--selector", str(alien), "--episodes",
                             "2")
    assert status == 2 and "not of this run's setup" in err
    assert "feudal_es/Discovery-v0" in err and "--force" in err
    status, out, err = main_in(work, "eval", str(run), "--selector", str(alien),
                               "--episodes", "2", "--force", "--json")
    assert status == 0 and "evaluating it anyway" in err
    assert json.loads(out)["selectors"][0]["selector"] == str(alien)
