"""Help texts and messages that tell the truth (issue 33), in-process (``cli.main`` and
``build_parser``; no subprocess, so JAX starts once).

- ``eval --help``: selector files are .safetensors, ``RUN_OR_CHECKPOINT`` is explained,
  the default ``--seed`` is stated; ``--selector final`` and a checkpoint file evaluate
  the checkpoint's current selector (and ``render`` plays them).
- ``train --help``: ``--seed`` is explained, ``--env`` / ``--n-outer`` / ``--seed`` state
  what they fall back to (the config's own defaults); ``--list-keys`` prints every
  ``--set`` key with its type, value and doc, generated from the config dataclasses.
- ``pretrain --help`` offers only the options pretrain uses; its ``--out`` is a file.
- ``demo --help`` does not mention ``--resume``, which demo does not take.
- The resume hint of a stopped run names the ``--import`` modules it was started with.
- ``train --resume FILE`` says it is a file and what ``--resume`` takes.
- A run summary says why its episode GIF was not written.
- Install hints name the command that works (the extras of the checkout).
- Output piped into ``head`` ends quietly, not as "a bug in feudal-es".
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from helpers import TINY

from feudal_es import cli, cli_train
from feudal_es.config import NESTED_CONFIGS, TrainerConfig, demo_config


def _help(command: str) -> str:
    """``feudal-es COMMAND --help`` as one line (argparse wraps at the terminal width)."""
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return " ".join(sub.choices[command].format_help().split())


def _options(command: str) -> set[str]:
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return {o for a in sub.choices[command]._actions for o in a.option_strings}


# --- help texts ----------------------------------------------------------------------------
def test_eval_help_names_safetensors_the_positional_and_the_default_seed():
    text = _help("eval")
    assert ".npz" not in text and "best_selector.safetensors" in text
    assert ("RUN_OR_CHECKPOINT a run directory (the executor of its newest checkpoint), "
            "one checkpoint file (ckpt_*.safetensors, the executor it holds) or a zoo entry "
            "(zoo:NAME)" in text)
    assert "seed of the episodes (default: 12345)" in text
    assert "'final' (the current selector of the checkpoint" in text
    assert "seed of the episode (default: 0)" in _help("render")


def test_train_help_states_defaults_and_how_to_list_set_keys():
    text, base = _help("train"), TrainerConfig()
    assert ("--seed SEED seed of the run's random keys (network init, env episodes, ES "
            f"noise), 0 .. 2**32 - 1 (default: the --config file's, else {base.seed})") in text
    assert f"(default: the --config file's, else {base.env})" in text
    assert "it overrides the --config file's env" in text
    assert f"outer MERL rounds (default: the --config file's, else {base.n_outer})" in text
    assert "--list-keys lists every KEY" in text and "--list-keys list every --set KEY" in text


def test_pretrain_offers_only_its_own_options_and_writes_a_file(tmp_path):
    options = _options("pretrain")
    for unused in ("--mode", "--n-outer", "--seeds", "--num-seeds", "--resume"):
        assert unused not in options, unused
    assert {"--env", "--seed", "--set", "--config", "--out", "--list-keys", "--recipe",
            "--no-progress"} <= options  # it shows a progress bar of its own (issue 32)
    text = _help("pretrain")
    assert "run directory" not in text
    assert ("--out OUT where to write the pretrained actor, a .safetensors file (default: "
            "runs/<env>-<expert>-pretrained-<time>.safetensors)") in text
    # --env left out falls back to the --config file's env (it used to replace it)
    (tmp_path / "c.json").write_text(json.dumps({"env": "feudal_es/Rover-v0"}))
    args = cli.build_parser().parse_args(["pretrain", "--config", str(tmp_path / "c.json")])
    assert cli_train.train_config(args).env == "feudal_es/Rover-v0"


def test_demo_help_does_not_offer_resume():
    text = _help("demo")
    assert "--resume" not in text and "--resume" not in _options("demo")
    assert f"(default: {demo_config().env}, from feudal_es.config.demo_config)" in text


# --- --list-keys -----------------------------------------------------------------------------
def _expected_keys() -> list[str]:
    """Every --set key, from TrainerConfig's fields (nested configs one level down)."""
    keys = []
    for f in dataclasses.fields(TrainerConfig):
        if f.name in NESTED_CONFIGS:
            keys += [f"{f.name}.{g.name}" for g in dataclasses.fields(NESTED_CONFIGS[f.name])]
        else:
            keys.append("env_kwargs.NAME" if f.name == "env_kwargs" else f.name)
    return keys


def test_list_keys_prints_every_set_key_with_type_value_and_doc(capsys, tmp_path):
    assert cli.main(["train", "--list-keys"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split(" ", 1)[0]: line for line in lines[1:]}
    assert list(rows) == _expected_keys()
    for key, line in rows.items():  # every key: (type, value): a doc
        assert "): " in line and line.split("): ", 1)[1].strip(), f"{key} has no doc"
    assert rows["es.sigma"] == ("es.sigma (float, 0.05): Gaussian perturbation std (search "
                                "radius around the mean θ).")
    # a key the run fills in for the env (TrainerConfig.auto) says so next to its value
    auto = getattr(TrainerConfig(), "auto", None) or ()
    for key, line in rows.items():
        assert (" or auto): " in line) == (key in auto), line
    steps = f"{NESTED_CONFIGS['mappo']().num_steps}" + (
        " or auto" if "mappo.num_steps" in auto else "")
    assert rows["mappo.num_steps"].startswith(f"mappo.num_steps (int, {steps}): T: steps "
                                              "collected")
    assert rows["actor.cnn_kernel"].startswith(
        f"actor.cnn_kernel (int, {NESTED_CONFIGS['actor']().cnn_kernel}): square kernel size")
    assert rows["seed"].startswith("seed (int, 0): ")
    # the values are those the command would run: the config file's, then --set's
    (tmp_path / "c.json").write_text(json.dumps({"n_outer": 7}))
    assert cli.main(["train", "--config", str(tmp_path / "c.json"), "--set", "es.sigma=0.3",
                     "--list-keys"]) == 0
    out = capsys.readouterr().out
    assert "n_outer (int, 7): " in out and "es.sigma (float, 0.3): " in out
    assert cli.main(["demo", "--list-keys"]) == 0
    assert f'env (str, "{demo_config().env}"): ' in capsys.readouterr().out


# --- messages --------------------------------------------------------------------------------
def test_resume_hint_names_the_runs_imports_and_code_env(tmp_path):
    from feudal_es.write_errors import next_step

    run = tmp_path / "run"
    run.mkdir()
    (run / "ckpt_00000001.safetensors").write_bytes(b"")  # the newest checkpoint, by name
    (run / "config.json").write_text(json.dumps(
        {**TINY.to_dict(), "env": "tests/CliLine-v0", "imports": ["user_envs"]}))
    argv = ["train", "--import", "user_envs", "--env", "tests/CliLine-v0", "--out", str(run)]
    assert next_step(run, argv) == (f"continue with: feudal-es train --resume {run} "
                                    "--import user_envs")
    (run / "config.json").write_text(json.dumps(
        {**TINY.to_dict(), "env": "user_envs:Line", "imports": ["a", "b"]}))
    assert next_step(run, None) == (f"continue with: feudal-es train --resume {run} "
                                    "--import a --import b --env user_envs:Line")
    (run / "config.json").unlink()  # not written (yet): the command line says
    assert next_step(run, argv) == (f"continue with: feudal-es train --resume {run} "
                                    "--import user_envs")


def test_resume_of_a_file_says_what_resume_takes(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    ckpt = run / "ckpt_00000002.safetensors"
    ckpt.write_bytes(b"")
    assert cli.main(["train", "--resume", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert "no such directory" not in err
    assert f"cannot resume {ckpt}: it is a file, not a run directory" in err
    assert f"to continue its run: feudal-es train --resume {run}" in err
    assert f"to evaluate this checkpoint: feudal-es eval {ckpt}" in err


def test_install_hints_name_the_checkout_extras(monkeypatch):
    import sys

    from envs.jaxmarl_env import INSTALL_HINT
    from feudal_es.ray_backend import RayEvaluator

    assert 'pip install -e ".[jaxmarl]"' in INSTALL_HINT and "feudal-es[" not in INSTALL_HINT
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    with pytest.raises(ImportError) as err:
        RayEvaluator(lambda: None, episodes=1)
    assert 'pip install -e ".[ray]"' in str(err.value) and "feudal-es[" not in str(err.value)


# --- a tiny run: the GIF note, eval / render of the final selector ---------------------------
@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, str]:
    """``feudal-es train`` of TINY for 2 rounds with a GIF asked for, on a Coverage that
    cannot draw itself (as SMAX): the run directory and the printed summary."""
    from envs.coverage import Coverage

    work = tmp_path_factory.mktemp("help-run")
    (work / "tiny.json").write_text(json.dumps(TINY.to_dict()))
    run_dir = work / "run"

    def no_picture(self, state):
        raise NotImplementedError("Coverage: no picture of this env's state")

    with pytest.MonkeyPatch.context() as mp, _Capture() as out:
        mp.setattr(Coverage, "render", no_picture)
        assert cli.main(["train", "--config", str(work / "tiny.json"), "--out", str(run_dir),
                         "--set", "gif=true", "--set", "n_outer=2", "--no-progress"]) == 0
    return run_dir, out.text


class _Capture:
    """stdout of the block, as text (a module-scoped fixture cannot use capsys)."""

    def __enter__(self) -> _Capture:
        import contextlib
        import io

        self._buffer = io.StringIO()
        self._redirect = contextlib.redirect_stdout(self._buffer)
        self._redirect.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._redirect.__exit__(*exc)
        self.text = self._buffer.getvalue()


def test_run_summary_says_why_the_gif_was_not_written(run):
    run_dir, out = run
    assert not (run_dir / "episode.gif").exists()
    assert ("episode GIF:    (not written: Coverage: no picture of this env's state)"
            in out), out


def test_eval_of_final_and_of_a_checkpoint_file_is_its_current_selector(run, capsys):
    from feudal_es.checkpoint import save_selector
    from feudal_es.trainer import ESTrainer

    run_dir, _ = run
    old, new = run_dir / "ckpt_00000001.safetensors", run_dir / "ckpt_00000002.safetensors"
    # the oracle: round 1's current selector, saved as a selector file
    first = ESTrainer.from_checkpoint(old)
    saved = run_dir.parent / "round1.safetensors"
    save_selector(saved, first.result_theta(), first.checkpoint_metadata())

    def rows(*argv: str) -> list[dict]:
        assert cli.main(["eval", str(run_dir), "--episodes", "2", "--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)["selectors"]

    # two selectors per call (the batch shape decides the float rounding)
    default = rows()  # the run's best selector, then the checkpoint's current one
    assert [r["selector"] for r in default] == [str(run_dir / "best_selector.safetensors"),
                                                f"{new} (current selector)"]
    given = rows("--selector", "final", str(new))
    assert [r["selector"] for r in given] == [f"{new} (current selector)"] * 2
    assert given[0]["fitness_mean"] == given[1]["fitness_mean"] == default[1]["fitness_mean"]
    given = rows("--selector", str(old), str(saved))  # an older checkpoint, by its oracle
    assert [r["selector"] for r in given] == [f"{old} (current selector)", str(saved)]
    assert given[0]["fitness_mean"] == given[1]["fitness_mean"]
    for spec in ("final", str(old)):  # render plays them too (no longer "a 'tree' file")
        gif = run_dir.parent / f"{Path(spec).stem}.gif"
        assert cli.main(["render", str(run_dir), "--selector", spec, "--out", str(gif)]) == 0
        assert gif.is_file()


def test_output_piped_into_head_ends_quietly(monkeypatch, capsys):
    """``feudal-es train --list-keys | head``: once the reader has closed stdout, the
    broken pipe is no "bug in feudal-es" traceback but a quiet exit 141 (SIGPIPE); a
    broken pipe elsewhere (stdout still read) is still reported."""
    import os

    from feudal_es.errors import EXIT_PIPE, report

    read, write = os.pipe()
    os.close(read)  # the reader went away
    with os.fdopen(write, "w") as gone:
        monkeypatch.setattr("sys.stdout", gone)
        assert report(BrokenPipeError(32, "Broken pipe"), "train") == EXIT_PIPE
        monkeypatch.undo()
    assert capsys.readouterr().err == ""
    read, write = os.pipe()
    with os.fdopen(read) as _, os.fdopen(write, "w") as alive:
        monkeypatch.setattr("sys.stdout", alive)
        assert report(BrokenPipeError(32, "Broken pipe"), "train") != EXIT_PIPE
        monkeypatch.undo()
    assert "Broken pipe" in capsys.readouterr().err
