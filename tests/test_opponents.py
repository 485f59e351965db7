"""What the groups other than the team play (``TrainerConfig.others``,
:mod:`feudal_es.opponents`), on JaxMARL's simple_tag with the adversaries as the team.

Oracles: a scripted group's actions are its function called by hand on the group's own
observations with the group's key; a group playing a saved run's actor holds that run's
leaves bit for bit, before and after training, and the run resumes without the source;
code a run directory names is called only when the user imported its module."""

from __future__ import annotations

import shutil

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scripted_policies as sp

from agents import ActorConfig, make_actor, selector_filter
from feudal_es import opponents
from feudal_es.config import TrainerConfig
from feudal_es.trainer import ESTrainer

ACTOR = ActorConfig(vec_hidden=(), vec_out=8, gnn_hops=1, gnn_layers=1, gnn_features=8,
                    embed_hidden=(), embed_dim=8, executor_hidden=(8,), selector_period=2)
CONFIG = TrainerConfig(
    env="jaxmarl/MPE_simple_tag_v3", team="adversary", mode="merl", n_outer=1, episodes=1,
    seed=3, es=dict(pop_size=2, sigma=0.1, lr=0.05), actor=dict(
        vec_hidden=[], vec_out=8, gnn_layers=0, embed_hidden=[], embed_dim=8,
        executor_hidden=[8]), critic=dict(hidden=[8]),
    mappo=dict(num_envs=2, num_steps=8, epochs=1, minibatches=2), checkpoint_every=1,
    plot_every=100, gif=False)


def _leaves(tree):
    return [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(
        x.dtype, jax.dtypes.prng_key) else x) for x in jax.tree.leaves(
        eqx.filter(tree, eqx.is_array))]


def _same(a, b) -> None:
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_scripted_policy_plays_the_other_group_as_called_by_hand():
    """The prey's actions are ``by_sign(fold_in(key, 1), its observations)``, log-prob 0;
    it is out of MAPPO's mask and of ES's theta; a function returning the wrong shape is
    named with what the space wants."""
    pytest.importorskip("jaxmarl")
    from envs.jaxmarl_env import make_jaxmarl

    env = make_jaxmarl("MPE_simple_tag_v3").with_team("adversary")
    actor = make_actor(jax.random.key(0), env, ACTOR, team="adversary", others=sp.by_sign)
    assert actor.trains == (True, False)
    np.testing.assert_array_equal(np.asarray(actor.agent_mask), [1, 1, 1, 0])
    assert not any(jax.tree.leaves(selector_filter(actor).actors[1]))
    obs, state = env.reset(jax.random.key(0))
    adj, seen = env.comm_graph(state), obs["obs"][3:, :actor.obs_sizes[1]]
    for t in range(4):
        key = jax.random.key(t)
        _, out = actor.step(key, obs, adj, actor.initial_option(4), jnp.asarray(0))
        want = sp.by_sign(jax.random.fold_in(key, 1), seen)
        np.testing.assert_array_equal(np.asarray(out.action[3:]), np.asarray(want))
        assert float(out.log_prob[3]) == 0.0
    bad = make_actor(jax.random.key(0), env, ACTOR, team="adversary", others=sp.wrong_shape)
    with pytest.raises(ValueError, match=r"wrong_shape returned actions of shape \(\).*\(1,\)"):
        bad.step(jax.random.key(0), obs, adj, bad.initial_option(4), jnp.asarray(0))


def test_others_is_checked_and_stored_code_needs_its_import(tmp_path):
    """Bad settings are named; a stored 'module:function' whose module this process did
    not import is refused, naming the --import to pass."""
    with pytest.raises(ValueError, match=r"name the team too"):
        TrainerConfig(env="x", others="train")
    assert opponents.make_others("random") == "random"
    assert opponents.make_others("scripted_policies:stand_still") is sp.stand_still
    assert opponents.make_others(str(tmp_path)) == "actor"
    with pytest.raises(ValueError, match=r"neither 'random', 'train'"):
        opponents.make_others(str(tmp_path / "gone"))
    with pytest.raises(ValueError, match=r"has no function 'nope'"):
        opponents.make_others("scripted_policies:nope")
    opponents.check_stored("scripted_policies:stand_still", tmp_path)  # imported: fine
    with pytest.raises(ValueError, match=r"never imports code itself: pass --import "
                                         r"no_such_policies_mod"):
        opponents.check_stored("no_such_policies_mod:fn", tmp_path)


@pytest.mark.slow  # ~40 s: four short JAX runs' compilations
def test_a_saved_runs_actor_plays_frozen_and_the_run_resumes_without_it(tmp_path):
    """Run A (the prey at random) trains; run B plays A's prey actor: B's prey leaves are
    A's, bit for bit, before and after B's round (frozen), its adversaries move; B
    resumes with A gone, bit for bit with B run straight; a scripted run trains too."""
    pytest.importorskip("jaxmarl")
    source = ESTrainer(CONFIG, tmp_path / "a")
    source.run()
    prey = source.ts.actor.actors[1]
    cfg = CONFIG.override({"others": str(tmp_path / "a"), "n_outer": 2})
    b = ESTrainer(cfg.override({"n_outer": 1}), tmp_path / "b")
    _same(b.ts.actor.actors[1], prey)
    start = b.ts.actor.actors[0]
    b.run()
    _same(b.ts.actor.actors[1], prey)
    assert any(not np.array_equal(x, y) for x, y in zip(
        _leaves(start.executor), _leaves(b.ts.actor.actors[0].executor), strict=True))
    straight = ESTrainer(cfg, tmp_path / "c")
    straight.run()
    shutil.move(tmp_path / "a", tmp_path / "a_moved")
    resumed = ESTrainer.resume(tmp_path / "b", n_outer=2)
    resumed.run()
    _same(straight.state, resumed.state)
    _same(resumed.ts.actor.actors[1], prey)
    scripted = ESTrainer(CONFIG.override({"others": "scripted_policies:stand_still"}),
                         tmp_path / "d")
    assert [h["round"] for h in scripted.run()] == [0]
    mismatch = CONFIG.override({"env": "jaxmarl/MPE_simple_speaker_listener_v4",
                                "team": "speaker", "others": str(tmp_path / "b")})
    with pytest.raises(ValueError, match=r"not a run of this env's agent groups"):
        ESTrainer(mismatch, tmp_path / "e")
