"""Mode ``merl-actor`` (feudal_es.migration): whole-actor ES with the MAPPO learner
migrated in, and a first stage that is the ``merl`` round; MAPPO's reward kinds.

Oracles: a plain NumPy statement of the elitist rule and of the masked generation; the
masked coordinates and the learner's executor compared leaf by leaf, bit for bit (one
program, one machine); the reward kinds against a hand computation.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import HOST, VEC, host_trainer, leaves

from agents import executor_filter, selector_filter
from envs.base import EnvOut
from feudal_es import es, migration
from feudal_es.evolution.config import ESConfig
from feudal_es.evolution.state import ask
from feudal_es.mappo.collect import agent_reward
from feudal_es.theta import es_theta, set_es_theta
from feudal_es.trainer import ESTrainer

CFG = ESConfig(pop_size=6, sigma=0.3, lr=0.1, optimizer="adam")
D = 7
MASK = jnp.array([1, 1, 0, 0, 1, 0, 0], jnp.float32)


def quadratic(target):
    """A deterministic fitness: minus the squared distance to ``target`` (keys ignored)."""
    return lambda thetas, key: -jnp.sum((thetas - target) ** 2, axis=-1)


def test_masked_noise_is_exactly_zero_and_masked_coordinates_never_move():
    state = es.init(jnp.arange(D, dtype=jnp.float32), CFG)
    pop, noise = ask(jax.random.key(0), state, CFG, MASK)
    off = np.asarray(MASK) == 0
    assert (np.asarray(noise)[:, off] == 0).all() and (np.asarray(noise)[:, ~off] != 0).all()
    np.testing.assert_array_equal(np.asarray(pop)[:, off],
                                  np.broadcast_to(np.asarray(state.mean)[off], (6, off.sum())))
    fit = quadratic(jnp.full(D, 5.0))
    for g in range(3):
        state, _ = es.generation(jax.random.key(g), state, fit, CFG, MASK)
    np.testing.assert_array_equal(np.asarray(state.mean)[off], np.arange(D)[off])
    assert (np.asarray(state.mean)[~off] != np.arange(D)[~off]).all()
    # no mask: the same draw as before (the mask is a pure restriction)
    _, noise_all = ask(jax.random.key(0), es.init(jnp.zeros(D), CFG), CFG)
    np.testing.assert_array_equal(np.asarray(noise)[:, ~off], np.asarray(noise_all)[:, ~off])


class _Actor(eqx.Module):
    """Stands in for a feudal actor in :func:`migration.actor_generation`: its whole-actor
    θ is ``w`` (es_theta with "actor" flattens every array leaf)."""

    w: jax.Array


@pytest.mark.parametrize("stage_rounds", [0, 5])
def test_actor_generation_follows_the_elitist_rule_written_in_numpy(stage_rounds):
    target = jnp.linspace(-1.0, 1.0, D)
    fit = quadratic(target)
    mean = jnp.zeros(D, jnp.float32)
    near, far = target * 0.9, target * 3.0  # a learner better / worse than the mean
    for learner, better in ((near, True), (far, False)):
        state = es.init(mean, CFG)
        got, info = jax.jit(lambda k, s, a: migration.actor_generation(
            k, s, a, fit, CFG, MASK, stage_rounds))(jax.random.key(3), state, _Actor(learner))
        first = stage_rounds > 0
        m, lrn = np.asarray(mean), np.asarray(learner)
        if first:  # merl's inject: the mean's masked coordinates, the learner's others
            start, moving = np.where(np.asarray(MASK) > 0, m, lrn), MASK
        else:
            start, moving = (lrn if better else m), jnp.ones(D)
        want, want_info = es.generation(jax.random.split(jax.random.key(3))[1],
                                        state._replace(mean=jnp.asarray(start)), fit, CFG,
                                        moving)
        np.testing.assert_array_equal(np.asarray(got.mean), np.asarray(want.mean))
        assert float(info["migrated"]) == float(better and not first)
        assert float(info["learner_fitness"]) == pytest.approx(float(fit(learner[None], 0)[0]))
        assert float(info["incumbent_fitness"]) == pytest.approx(float(fit(mean[None], 0)[0]))
        assert float(info["best_fitness"]) == float(want_info["best_fitness"])


def test_selector_mask_and_write_back_on_a_feudal_actor():
    cfg = dataclasses.replace(VEC, mode="merl-actor", seeds=(0,))
    trainer = ESTrainer(cfg, run_dir=None)
    actor = trainer.ts.actor
    mask = migration.selector_mask(actor)
    marked = set_es_theta(actor, mask, "actor")
    sel = eqx.filter(marked, selector_filter(marked))
    exe = eqx.filter(marked, executor_filter(marked))
    assert all((x == 1).all() for x in leaves(sel)) and all((x == 0).all() for x in leaves(exe))
    assert int(mask.sum()) == trainer.selector_size
    # the mean's selector goes in; the learner's executor leaves are the same objects
    mean = es_theta(actor, "actor") + 1.0
    out = migration.with_mean_selector(actor, mean)
    np.testing.assert_array_equal(np.asarray(es_theta(out)),
                                  np.asarray(es_theta(set_es_theta(actor, mean, "actor"))))
    for a, b in zip(jax.tree.leaves(eqx.filter(out, executor_filter(out))),
                    jax.tree.leaves(eqx.filter(actor, executor_filter(actor))), strict=True):
        assert a is b


@pytest.mark.slow  # ~25 s: a merl-actor round (the elitist rule's oracle: default)
def test_merl_actor_round_keeps_the_learner_and_reports_the_mean(tmp_path):
    """Two rounds of two seeds: the learner's executor is exactly what MAPPO alone makes
    of it (ES never overwrites it), its selector is the mean's, and the run's result and
    held-out evaluation are the ES mean's; round 0 of a first stage leaves the mean's
    executor coordinates equal to the learner's (merl's inject)."""
    cfg = dataclasses.replace(VEC, mode="merl-actor", selector_stage_rounds=1)
    trainer = ESTrainer(cfg, run_dir=tmp_path / "run")
    start = trainer.seed_states()
    trainer.run(1)
    after = trainer.seed_states()
    fns = trainer.runtime.fns
    for s0, s1 in zip(start, after, strict=True):
        ts = s0.learner
        for _ in range(cfg.grad_steps_per_outer):
            ts, _, _ = fns.guarded_step(ts)
        got = eqx.filter(s1.learner.actor, executor_filter(s1.learner.actor))
        want = eqx.filter(ts.actor, executor_filter(ts.actor))
        for a, b in zip(leaves(got), leaves(want), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        mean_actor = set_es_theta(s1.learner.actor, s1.es.mean, "actor")
        np.testing.assert_array_equal(np.asarray(es_theta(mean_actor)),
                                      np.asarray(es_theta(s1.learner.actor)))
        # stage 1: the executor coordinates of the mean are the learner's after its steps
        m_exe = eqx.filter(mean_actor, executor_filter(mean_actor))
        for a, b in zip(leaves(m_exe), leaves(got), strict=True):
            np.testing.assert_array_equal(a, b)
    trainer.run(1)
    rows = [h[-1] for h in trainer.histories]
    assert all(r["migration/migrated"] in (0.0, 1.0) for r in rows)
    np.testing.assert_array_equal(np.asarray(trainer.result_theta()),
                                  np.asarray(trainer.state.es.mean))


def test_merl_actor_is_refused_on_the_host_path(tmp_path):
    with pytest.raises(ValueError, match=r"merl-actor.*JAX env"):
        host_trainer(tmp_path, config=dataclasses.replace(HOST, mode="merl-actor"))


def test_reward_kinds_against_a_hand_computation():
    n, k = 3, 2
    local = jnp.array([0.5, -1.0, 2.0])
    skills = jnp.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    eo = EnvOut(reward=local, skill_rewards=skills, team_reward=jnp.float32(0.25),
                done=jnp.bool_(False), metrics={})
    option = jnp.array([1, 0, 1], jnp.int32)
    np.testing.assert_array_equal(agent_reward("option", eo, option), [10.0, 2.0, 30.0])
    np.testing.assert_array_equal(agent_reward("local", eo, option), local)
    np.testing.assert_array_equal(agent_reward("team", eo, option), [0.25] * n)
    np.testing.assert_array_equal(agent_reward("mixed", eo, option), local + 0.25)
    assert skills.shape == (n, k)
    with pytest.raises(ValueError, match="reward"):
        agent_reward("bogus", eo, option)
    from feudal_es.mappo import MAPPOConfig

    with pytest.raises(ValueError, match=r"MAPPOConfig.reward must be one of"):
        MAPPOConfig(reward="global")
