"""Transfer (issue 32): an actor trained with N robots evaluated and rendered with M robots
(``feudal-es eval / render RUN --set env_kwargs.KEY=VALUE``; ``load_trainer(...,
env_kwargs=...)``), in-process (``cli.main``; JAX starts once).

- A 2-robot Coverage run (one ES round) evaluated with 4 robots equals an oracle: the
  checkpoint's actor rolled out by hand (:func:`feudal_es.rollout.episode`) on a 4-robot
  ``envs.Coverage`` built directly, on the episodes of ``split(key(seed), episodes)``.
- A ``map_size`` change (the CNN's input) is refused in one line naming it (exit 2).
- A ``--set`` key outside ``env_kwargs.*`` is refused, naming the key.
- ``render --set env_kwargs.num_agents=4`` writes a GIF.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from helpers import TINY
from PIL import Image

from feudal_es import cli

EPISODES, SEED = 4, 12345
TRAINED = dict(TINY.env_kwargs, num_agents=2)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A one-round 2-robot Coverage run (ES on the selector: one short compile)."""
    from feudal_es.trainer import ESTrainer

    d = tmp_path_factory.mktemp("transfer") / "run"
    config = TINY.override({"env_kwargs.num_agents": 2, "n_outer": 1, "mode": "es-selector"})
    ESTrainer(config, d).run()
    assert (d / "ckpt_00000001.safetensors").is_file()
    return d


def _oracle(run, num_agents: int) -> tuple[np.ndarray, np.ndarray]:
    """Team returns and final coverage costs ``[E]`` of the checkpoint's actor (its own
    selector) on a ``num_agents``-robot Coverage built directly."""
    import envs
    from feudal_es.checkpoint import load, read_metadata
    from feudal_es.restore import stored_config
    from feudal_es.rollout import episode
    from feudal_es.trainer import ESTrainer

    ckpt = run / "ckpt_00000001.safetensors"
    config, _ = stored_config(ckpt, read_metadata(ckpt))
    template = ESTrainer(config, run.parent / "template").checkpoint_tree()
    actor = load(ckpt, template, None)[0]["train_state"].actor
    core = envs.Coverage(**{**TRAINED, "num_agents": num_agents})
    keys = jax.random.split(jax.random.key(SEED), EPISODES)  # what compare_selectors uses
    one = lambda k: (lambda ep: (ep.team_return, ep.outs["coverage_cost"][-1]))(
        episode(core, actor, k, config.deterministic_eval))
    ret, cost = jax.jit(jax.vmap(one))(keys)
    return np.asarray(ret), np.asarray(cost)


def test_eval_with_more_robots_equals_the_oracle(run, capsys):
    rc = cli.main(["eval", str(run), "--set", "env_kwargs.num_agents=4", "--json",
                   "--episodes", str(EPISODES), "--selector", "final"])
    out = capsys.readouterr().out
    assert rc == 0, out
    res = json.loads(out)
    assert res["env_kwargs"] == {**TRAINED, "num_agents": 4}
    assert res["env_kwargs_overrides"] == {"num_agents": 4}
    (row,) = res["selectors"]
    ret, cost = _oracle(run, 4)
    np.testing.assert_allclose(row["fitness_mean"], ret.mean(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(row["fitness_std"], ret.std(ddof=1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(row["coverage_cost"], cost.mean(), rtol=1e-5)


def test_api_holds_the_checkpoints_actor_on_the_new_env(run):
    from helpers import leaves

    from feudal_es.evaluate import compare_selectors, load_trainer

    trainer, ckpt = load_trainer(run, env_kwargs={"num_agents": 4})
    own, _ = load_trainer(run)
    assert trainer.env.core.num_agents == 4 and own.env.core.num_agents == 2
    assert trainer.env_overrides == {"num_agents": 4}
    for a, b in zip(leaves(trainer.ts.actor), leaves(own.ts.actor), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(trainer.result_theta(), own.result_theta())
    # a checkpoint file as a selector reads through the checkpoint's own setup
    res = compare_selectors(trainer, ckpt, [str(ckpt)], episodes=2)
    assert res["selectors"][0]["selector"].endswith("(current selector)")


def test_a_map_size_change_is_refused_in_one_line(run, capsys):
    rc = cli.main(["eval", str(run), "--set", "env_kwargs.map_size=16"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert "\n" not in err and "Traceback" not in err
    assert "env_kwargs.map_size=16" in err and "the actor was built for map_size=8" in err


def test_a_key_outside_env_kwargs_is_refused(run, capsys):
    for command in (["eval", str(run)], ["render", str(run), "--out", str(run / "x.gif")]):
        rc = cli.main([*command, "--set", "es.sigma=0.1"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "\n" not in err, err
        assert "es.sigma" in err and "only env_kwargs.*" in err
    assert not (run / "x.gif").exists()


def test_render_with_more_robots_writes_a_gif(run, capsys):
    out = run.parent / "four.gif"
    rc = cli.main(["render", str(run), "--set", "env_kwargs.num_agents=4", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    with Image.open(out) as im:
        assert im.format == "GIF" and im.n_frames > 1


def test_help_states_the_set_option():
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    for command in ("eval", "render"):
        text = " ".join(sub.choices[command].format_help().split())
        assert "--set env_kwargs.KEY=VALUE" in text and "num_agents=8" in text, command
