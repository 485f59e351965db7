"""Oracles for MAPPO's L2-SP anchor (``MAPPOConfig.anchor_coef``): the loss is the PPO
loss plus ``coef / 2`` times the executor's squared distance from the anchor (a numpy
sum of squares by hand), the anchor is the executor the run started from and only the
executor's leaves, the update pulls toward it, and a train state with an anchor
round-trips through a checkpoint (one without cannot fill its template)."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import numpy as np
import pytest
from helpers import leaves, loss_minibatch

from agents import ActorConfig, CentralCritic, CriticConfig, FeudalActor, executor_filter
from envs.dispersion import Dispersion
from feudal_es import checkpoint, mappo

ACTOR = ActorConfig(cnn_channels=(4,), cnn_strides=(2,), cnn_out=8, vec_hidden=(16,),
                    vec_out=8, gnn_hops=2, gnn_layers=1, gnn_features=16, embed_hidden=(),
                    embed_dim=16, executor_hidden=(16,), selector_period=4)
CFG = mappo.MAPPOConfig(num_envs=4, num_steps=12, epochs=2, minibatches=2, lr=3e-3,
                        critic_lr=3e-3, ent_coef=0.0, update="split")
COEF = 0.7


@pytest.fixture(scope="module")
def start():
    """``(env, train state with an anchor, a batch collected from it)``."""
    env = Dispersion(num_agents=3, max_steps=12, obs_mode="vec")
    actor = FeudalActor.from_env(jax.random.key(1), env, ACTOR)
    critic = CentralCritic.from_env(jax.random.key(2), env, CriticConfig(hidden=(32,)))
    cfg = dataclasses.replace(CFG, anchor_coef=COEF)
    ts = mappo.init_train_state(jax.random.key(3), env, actor, critic, cfg)
    ts, batch, _ = jax.jit(lambda t: mappo.collect(env, t, cfg))(ts)
    return env, ts, batch


def test_config_checks_the_coefficient():
    with pytest.raises(ValueError, match="anchor_coef"):
        mappo.MAPPOConfig(anchor_coef=-0.1)
    assert mappo.MAPPOConfig().anchor_coef == 0.0


def test_the_anchor_is_the_starting_executor_only(start):
    _, ts, _ = start
    params, _ = eqx.partition(ts.actor, executor_filter(ts.actor))
    got, want = jax.tree.leaves(ts.anchor), jax.tree.leaves(params)
    assert len(got) == len(want) > 5
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert jax.tree.leaves(ts.anchor.selector) == []  # ES's leaves are not anchored
    plain = mappo.init_learner(jax.random.key(0), ts.actor, ts.critic, CFG)
    assert plain.anchor is None  # no anchor: nothing more stored or checkpointed


def test_loss_adds_half_coef_times_squared_distance(start):
    """At executor parameters moved off the anchor by a known random step, the loss with
    the anchor minus the loss without it equals ``coef / 2 * sum(delta^2)`` (float64
    numpy); so does the reported ``anchor_distance`` to ``sum(delta^2)``."""
    _, ts, batch = start
    params, rest = eqx.partition(ts.actor, executor_filter(ts.actor))
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(9), len(leaves))
    deltas = [0.05 * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves,
                                                                              strict=True)]
    moved = jax.tree.unflatten(treedef, [x + d for x, d in zip(leaves, deltas, strict=True)])
    critic_params, critic_rest = eqx.partition(ts.critic, eqx.is_inexact_array)
    data = loss_minibatch(batch, jax.random.key(4))
    cfg = dataclasses.replace(CFG, anchor_coef=COEF)
    loss = jax.jit(lambda p, a: mappo.loss((p, critic_params), (rest, critic_rest), data, cfg,
                                           a))
    with_anchor, stats = loss(moved, ts.anchor)
    without, plain_stats = loss(moved, None)
    actual = [np.asarray(x, np.float64) - np.asarray(a, np.float64)
              for x, a in zip(jax.tree.leaves(moved), jax.tree.leaves(ts.anchor), strict=True)]
    sq = sum(float(np.sum(d**2)) for d in actual)
    assert sq > 1.0  # the step is not negligible
    np.testing.assert_allclose(float(stats["anchor_distance"]), sq, rtol=1e-5)
    np.testing.assert_allclose(float(with_anchor) - float(without), 0.5 * COEF * sq,
                               rtol=1e-4)
    assert "anchor_distance" not in plain_stats


@pytest.mark.heavy
def test_update_starts_as_plain_ppo_and_pulls_toward_the_anchor(start):
    """At the anchor itself the term's gradient is zero, so a first Adam step is plain
    PPO's (two programs: a stated tolerance); over repeated updates on one batch a strong
    anchor keeps the executor much nearer to where it started than none, and the
    selector's leaves stay bit-identical either way."""
    _, ts, batch = start
    strong = dataclasses.replace(CFG, anchor_coef=1000.0)
    one = dict(epochs=1, minibatches=1)  # one Adam step from the anchor
    one_plain, _ = mappo.update(ts, batch, dataclasses.replace(CFG, **one))
    one_anchor, metrics = mappo.update(ts, batch, dataclasses.replace(strong, **one))
    assert "anchor_distance" in metrics
    for a, b in zip(leaves(one_anchor.actor), leaves(one_plain.actor), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    far, near = ts, ts
    for _ in range(6):
        far, _ = mappo.update(far, batch, CFG)
        near, _ = mappo.update(near, batch, strong)
    dist = lambda t: float(mappo.anchor_distance(
        eqx.partition(t.actor, executor_filter(t.actor))[0], ts.anchor))
    assert dist(far) > 0
    assert dist(near) < 0.5 * dist(far), (dist(near), dist(far))
    for s in (far, near):
        for a, b in zip(jax.tree.leaves(ts.actor.selector), jax.tree.leaves(s.actor.selector),
                        strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_anchor_round_trips_through_a_checkpoint(start, tmp_path):
    """The anchor is saved with the train state and restored bit-identical; a file saved
    without one cannot fill a template that has one (the first missing leaf named)."""
    _, ts, _ = start
    moved = ts._replace(anchor=jax.tree.map(lambda x: x + 1.0, ts.anchor))
    path = checkpoint.save(tmp_path / "with", moved)
    back, _ = checkpoint.load(path, ts)
    for a, b in zip(jax.tree.leaves(back.anchor), jax.tree.leaves(moved.anchor), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    bare = checkpoint.save(tmp_path / "without", ts._replace(anchor=None))
    with pytest.raises(checkpoint.CheckpointError, match="anchor"):
        checkpoint.load(bare, ts)
    # every restored leaf one above the start: the distance is the executor's size
    size = sum(x.size for x in jax.tree.leaves(ts.anchor))
    assert float(mappo.anchor_distance(back.anchor, ts.anchor)) == pytest.approx(size,
                                                                                 rel=1e-6)
