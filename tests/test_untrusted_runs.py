"""A run directory and a checkpoint are data: nothing they name is imported or called.

A real run is copied and its checkpoint metadata and ``config.json`` are rewritten the way
an attacker would (the file re-saved through the public API, so its checksums are valid)
to name ``subprocess:getoutput`` / ``os:system`` with a command that creates a marker
file. ``feudal-es eval``, ``render``, ``train --resume``, ``ESTrainer.from_checkpoint``
and ``ESTrainer.resume`` each refuse it, naming the env and the ``--env`` to pass; the
marker never appears. The payload is live (resolving the same id as the user's own input
runs it), and the intact run evaluates. A run of a trusted ``module:attr`` env is refused
from its files alone and works once the user names the env with ``--env``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from helpers import TINY, TINY_ACTOR

from feudal_es import checkpoint, cli
from feudal_es.trainer import ESTrainer, TrainerConfig, UntrustedEnvError, resolve_env


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real one-round run of the tiny Coverage config: (trainer, run dir)."""
    t = ESTrainer(dataclasses.replace(TINY, mode="es-selector", n_outer=1),
                  tmp_path_factory.mktemp("run") / "real")
    t.run()
    return t, t.run_dir


def hostile_copy(t: ESTrainer, src, dst, env: str, env_kwargs: dict):
    """``src`` copied to ``dst`` with its config naming ``env(**env_kwargs)``: the newest
    checkpoint re-saved with that metadata (valid checksums) and config.json rewritten."""
    shutil.copytree(src, dst)
    mgr = checkpoint.CheckpointManager(dst)
    latest = mgr.latest()
    tree, meta = checkpoint.load(latest, t.checkpoint_tree())
    meta["env"] = env
    meta["config"] = {**meta["config"], "env": env, "env_kwargs": env_kwargs}
    step = meta.pop("step")
    assert mgr.save(step, tree, meta) == latest
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, "env": env, "env_kwargs": env_kwargs}))
    return dst, latest


PAYLOADS = [("subprocess:getoutput", "cmd"), ("os:system", "command")]


@pytest.mark.parametrize("env, arg", PAYLOADS)
def test_run_naming_code_is_refused_by_every_loader(run, tmp_path, capsys, env, arg):
    t, src = run
    marker = tmp_path / "pwned"
    hostile, ckpt = hostile_copy(t, src, tmp_path / "hostile", env, {arg: f"touch {marker}"})
    assert checkpoint.read_metadata(ckpt)["config"]["env"] == env  # a valid file

    for argv in (["eval", str(hostile)], ["eval", str(ckpt)],
                 ["render", str(hostile), "--out", str(tmp_path / "x.gif")],
                 ["train", "--resume", str(hostile), "--no-progress"]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"names the env '{env}'" in err and f"--env {env}" in err, err
        assert "Traceback" not in err
    with pytest.raises(UntrustedEnvError, match="does not import or call what it names"):
        ESTrainer.from_checkpoint(ckpt)
    with pytest.raises(UntrustedEnvError, match=f"--env {env}"):
        ESTrainer.resume(hostile)
    assert not marker.exists()
    assert not (tmp_path / "x.gif").exists()

    # the payload is live: the same id as the user's own input is imported and called
    with pytest.raises((TypeError, ValueError)):
        resolve_env(env, {arg: f"touch {marker}"})
    assert marker.exists()


def test_intact_run_evaluates(run, capsys):
    _, src = run
    assert cli.main(["eval", str(src), "--episodes", "2"]) == 0
    assert "team fitness" in capsys.readouterr().out


def test_resume_may_only_repeat_the_runs_env(run, capsys):
    _, src = run
    assert cli.main(["train", "--resume", str(src), "--env", "feudal_es/Discovery-v0"]) == 2
    assert "resuming continues that env" in capsys.readouterr().err


HOST = TrainerConfig(
    env="line_envs:Line", mode="es-selector", n_outer=1, episodes=2, seed=3, num_skills=2,
    es=dict(pop_size=4, sigma=0.5, lr=0.1), actor={**TINY_ACTOR, "selector_period": 2},
    critic=dict(hidden=[16]), mappo=dict(num_envs=2, num_steps=6, epochs=1, minibatches=1),
    plot_every=100, gif=False,
)


def test_a_trusted_module_env_needs_the_user_to_name_it(tmp_path, capsys):
    """A run of ``line_envs:Line`` (importable here): its run dir alone is refused; with
    ``--env line_envs:Line`` (the user's own choice) eval and resume proceed."""
    t = ESTrainer(HOST, tmp_path / "line")
    t.run()
    assert cli.main(["eval", str(t.run_dir), "--episodes", "2"]) == 2
    assert "--env line_envs:Line" in capsys.readouterr().err
    assert cli.main(["eval", str(t.run_dir), "--episodes", "2", "--env", "line_envs:Line"]) == 0
    assert "team fitness" in capsys.readouterr().out
    resumed = ESTrainer.resume(t.run_dir, n_outer=2, env="line_envs:Line")
    assert resumed.round == 1 and resumed.config.env == "line_envs:Line"
