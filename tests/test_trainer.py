"""Oracles for ESTrainer: batched population fitness vs the per-member eval_fn (and the ES
update vs the reference es_step on them), the MERL partition after one round (executor
leaves = MAPPO's step exactly, selector leaves = ES's generation exactly), the round
written once (``loop.merl_round`` by hand, and the reference ``es.merl_coexist`` driven by
the trainer's pieces, both bit-identical to ``run``), the es / mappo ablation modes, an
exact checkpoint round trip, stop-and-resume reproducing the uninterrupted history, and
config / env-id errors that name the cause.

All trainers share one tiny Coverage setup (3 robots, 12-step episodes), so the jitted
train step, rollouts and generation compile once per session
(``feudal_es.functions.jax_functions``)."""

from __future__ import annotations

import dataclasses
import json

import equinox as eqx
import jax
import jax.flatten_util
import numpy as np
import pytest
from helpers import TINY, assert_trees_equal, leaves, stable

from agents import executor_filter, selector_filter
from feudal_es import es, loop
from feudal_es.theta import selector_theta
from feudal_es.trainer import ESTrainer, TrainerConfig, chain_key, parse_assignment, resolve_env


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """A trainer whose executor is randomised: a fresh executor's actions are ~0 for any
    skill (small output gain), which would make every selector equally fit."""
    t = ESTrainer(TINY, tmp_path_factory.mktemp("run") / "fixture")
    params, rest = eqx.partition(t.ts.actor, executor_filter(t.ts.actor))
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    noisy = unravel(flat + 0.5 * jax.random.normal(jax.random.key(5), flat.shape))
    t.ts = t.ts._replace(actor=eqx.combine(noisy, rest))
    return t


# --- fitness ------------------------------------------------------------------------------
def test_population_fitness_equals_per_member_eval_fn(trainer):
    key = jax.random.key(7)
    theta = selector_theta(trainer.ts.actor)
    thetas = theta + 5.0 * jax.random.normal(jax.random.key(1), (4, theta.shape[0]))
    thetas = thetas.at[3].set(thetas[0])  # a repeated member
    batched = np.asarray(trainer.population_fitness(thetas, key))
    per_member = np.array([trainer.eval_fn(t, key) for t in thetas], np.float32)
    np.testing.assert_allclose(batched, per_member, rtol=1e-6, atol=1e-6)
    assert len(set(np.round(batched, 6).tolist())) > 1, "members should differ (oracle not vacuous)"
    assert batched[3] == batched[0]  # common random numbers: same theta, same episodes


def test_batched_generation_equals_reference_es_step(trainer):
    """The trainer's jitted generation (what merl_coexist runs) makes the same update as
    the reference per-member ``es_step`` with ``eval_fn`` on the generation's eval key."""
    cfg = dataclasses.replace(trainer.config.es, optimizer="sgd")  # es_step starts fresh
    theta = selector_theta(trainer.ts.actor)
    key = jax.random.key(11)
    _, key_eval = jax.random.split(key)
    ref, info = es.es_step(theta, lambda t: trainer.eval_fn(t, key_eval), cfg, key)
    rollouts = trainer.runtime.fns.rollouts
    actor, eps = trainer.ts.actor, trainer.config.episodes

    def fitness(thetas, k):
        return rollouts(actor, thetas, jax.random.split(k, eps))[0].mean(axis=1)

    state, dev_info = es.generation(key, es.init(theta, cfg), fitness, cfg)
    np.testing.assert_allclose(np.asarray(state.mean), np.asarray(ref), rtol=1e-6, atol=1e-7)
    assert float(dev_info["best_fitness"]) == pytest.approx(info["best_fitness"], abs=1e-6)


# --- one MERL round: who changes what -----------------------------------------------------------
def test_one_merl_round_partitions_the_leaves(trainer, tmp_path):
    t = ESTrainer(TINY, tmp_path / "merl")
    ts0, es0 = t.ts, t.es_state
    t.run(rounds=1)
    # executor (and critic): exactly one MAPPO train step from the initial state, by the
    # program the trainer runs (its guarded step; that it equals the plain step followed
    # by keep_finite is test_mappo's, to a tolerance: two programs)
    ts1, (_, skipped) = t.fns.step(ts0)
    assert not bool(skipped)
    got_exec = eqx.filter(t.ts.actor, executor_filter(t.ts.actor))
    want_exec = eqx.filter(ts1.actor, executor_filter(ts1.actor))
    assert_trees_equal(got_exec, want_exec)
    assert_trees_equal(eqx.filter(t.ts.critic, eqx.is_array), eqx.filter(ts1.critic, eqx.is_array))
    # MAPPO left the selector bit-identical ...
    np.testing.assert_array_equal(selector_theta(ts1.actor), selector_theta(ts0.actor))
    # ... and the selector is exactly ES's generation on it, with round 0's keys: the ES
    # key is the chain key's documented derivation (merl_coexist's split of the ES key)
    keys = t.round_keys(0)
    _, key_round = jax.random.split(chain_key(t.keys.es, 0))
    assert_trees_equal(keys[0], key_round)
    assert_trees_equal(keys[1], t.round_eval_key(0))
    state = es0._replace(mean=selector_theta(ts1.actor))
    want, _ = t.fns.generation(keys, state, ts1)
    np.testing.assert_array_equal(np.asarray(selector_theta(t.ts.actor)), np.asarray(want.mean))
    assert_trees_equal(t.es_state, want)  # the whole ES state: sigma, Adam moments, count
    # the runtime's generation, called directly, is the same program on the same inputs
    direct, _ = t.runtime.generation(key_round, state, ts1.actor, t.round_eval_key(0))
    assert_trees_equal(direct, want)
    assert not np.array_equal(np.asarray(want.mean), np.asarray(es0.mean))
    assert int(t.es_state.generation) == 1
    row = t.history[0]
    assert row["round"] == 0 and row["fitness_best"] is not None and "mappo/policy_loss" in row


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory) -> ESTrainer:
    """A fresh TINY trainer after ``run(rounds=2)``: what the round, written once, must
    reproduce when driven by hand."""
    t = ESTrainer(TINY, tmp_path_factory.mktemp("two") / "run")
    t.run(rounds=2)
    return t


def test_trainer_round_is_merl_round(two_rounds, tmp_path):
    """The trainer's round is :func:`feudal_es.loop.merl_round` over its own pieces and
    round keys, nothing more: two rounds by hand on a fresh trainer are bit-identical
    (same program, same process) to ``run(rounds=2)``."""
    t = ESTrainer(TINY, tmp_path / "hand")
    state = start = t.state
    for r in range(2):
        state, out = loop.merl_round(t.fns, state, t.round_keys(r))
        assert len(out.steps) == TINY.grad_steps_per_outer and out.info is not None
    assert_trees_equal(state, two_rounds.state)
    assert int(state.es.generation) == 2
    assert not np.array_equal(selector_theta(state.learner.actor),
                              selector_theta(start.learner.actor))  # not vacuous: it moved


def test_a_round_with_its_steps_in_one_call_reports_each_step():
    """``RoundFns.steps`` (a round's gradient steps as one call, outputs stacked) and
    ``RoundFns.step`` called ``grad_steps`` times give the same learner and the same
    per-step outputs, in order; the settle hook runs once either way."""
    import jax.numpy as jnp

    settled = []

    def step(x):
        return x * 2.0 + 1.0, ({"loss": x + 0.5}, x > 5.0)

    def steps(x):  # three steps, the outputs stacked on a leading axis
        outs = []
        for _ in range(3):
            x, aux = step(x)
            outs.append(aux)
        return x, jax.tree.map(lambda *v: jnp.stack(v), *outs)

    base = dict(num_candidates=1, grad_steps=3, step=step, sync_in=None, generation=None,
                sync_out=None, settle=lambda x: settled.append(1) or x)
    start = loop.RoundState(jnp.float32(1.0), None)
    one_by_one, a = loop.merl_round(loop.RoundFns(**base), start, None)
    at_once, b = loop.merl_round(loop.RoundFns(**base, steps=steps), start, None)
    assert float(one_by_one.learner) == float(at_once.learner) == 15.0  # 1 -> 3 -> 7 -> 15
    assert [float(m["loss"]) for m, _ in b.steps] == [1.5, 3.5, 7.5]
    assert [(float(m["loss"]), bool(s)) for m, s in a.steps] == \
        [(float(m["loss"]), bool(s)) for m, s in b.steps]
    assert [bool(s) for _, s in b.steps] == [False, False, True] and settled == [1, 1]


def test_merl_coexist_with_the_trainer_pieces_is_the_trainer(two_rounds, tmp_path):
    """The reference loop :func:`feudal_es.es.merl_coexist`, given the trainer's gradient
    step, sync hooks and generation and started from the trainer's ES key, reproduces the
    trainer exactly: merl_coexist splits ``key, key_round = split(key)`` per round, the
    trainer's round ``r`` uses ``split(chain_key(keys.es, r))[1]``, so from ``keys.es``
    the two key sequences coincide."""
    t = ESTrainer(TINY, tmp_path / "coexist")
    rounds, es_states = [], []

    def generation_fn(key, es_state, ts):
        r = len(rounds)
        rounds.append(key)
        return t.fns.generation((key, t.round_eval_key(r)), es_state, ts)

    theta, ts, history = es.merl_coexist(
        theta0=t.theta_of(t.ts.actor), eval_fn=None,
        gradient_step_fn=lambda ts: t.fns.step(ts)[0], sync_in=t.fns.sync_in,
        sync_out=t.fns.sync_out, n_outer=2, grad_steps_per_outer=TINY.grad_steps_per_outer,
        es_cfg=TINY.es, key=t.keys.es, gstate0=t.ts, generation_fn=generation_fn,
        on_round=lambda outer, gstate, es_state, info: es_states.append(es_state))
    assert [h[0] for h in history] == [0, 1] and len(es_states) == 2
    for r, key in enumerate(rounds):  # the coinciding key sequences
        assert_trees_equal(key, jax.random.split(chain_key(t.keys.es, r))[1])
    np.testing.assert_array_equal(np.asarray(theta), selector_theta(two_rounds.ts.actor))
    assert_trees_equal(es_states[-1], two_rounds.es_state)
    assert_trees_equal(ts, two_rounds.ts)
    for h, row in zip(history, two_rounds.history, strict=True):
        assert float(h[1]["best_fitness"]) == row["fitness_best"]


def test_whole_actor_es_moves_executor_leaves_and_selector_es_does_not(tmp_path):
    """``--mode es`` (MERL's EA-only ablation) evolves every actor leaf; ``es-selector``
    only the selector's. Neither takes a MAPPO step."""
    t = ESTrainer(dataclasses.replace(TINY, mode="es"), tmp_path / "whole")
    before = t.ts
    assert t.theta_size > 10 * t.selector_size and t.es_state.mean.size == t.theta_size
    t.run(rounds=1)
    for filt in (executor_filter, selector_filter):
        moved = [not np.array_equal(a, b) for a, b in zip(
            leaves(eqx.filter(t.ts.actor, filt(t.ts.actor))),
            leaves(eqx.filter(before.actor, filt(before.actor))), strict=True)]
        assert all(moved), filt.__name__
    np.testing.assert_array_equal(t.theta_of(t.ts.actor), t.es_state.mean)  # written back
    assert int(t.ts.update_step) == 0


def test_es_mode_freezes_executor_and_mappo_mode_freezes_selector(tmp_path):
    t_es = ESTrainer(dataclasses.replace(TINY, mode="es-selector"), tmp_path / "es")
    before = t_es.ts
    t_es.run(rounds=1)
    assert_trees_equal(eqx.filter(t_es.ts.actor, executor_filter(t_es.ts.actor)),
                       eqx.filter(before.actor, executor_filter(before.actor)))
    assert not np.array_equal(selector_theta(t_es.ts.actor), selector_theta(before.actor))
    assert int(t_es.ts.update_step) == 0

    t_pp = ESTrainer(dataclasses.replace(TINY, mode="mappo"), tmp_path / "mappo")
    before = t_pp.ts
    t_pp.run(rounds=1)
    assert_trees_equal(eqx.filter(t_pp.ts.actor, selector_filter(t_pp.ts.actor)),
                       eqx.filter(before.actor, selector_filter(before.actor)))
    assert int(t_pp.ts.update_step) == 1
    row = t_pp.history[0]
    assert row["fitness_best"] is None and isinstance(row["selector_fitness"], float)


# --- run directory, checkpoints, resume ----------------------------------------------------------
def test_run_dir_checkpoint_round_trip_and_resume(tmp_path):
    full = ESTrainer(TINY, tmp_path / "full")
    full.run()
    d = full.run_dir
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert json.loads((d / "config.json").read_text()) == TINY.to_dict()
    assert (d / "learning_curve.png").stat().st_size > 0
    assert (d / "best_selector.safetensors").is_file()
    assert sorted(p.name for p in d.glob("ckpt_*")) == [
        "ckpt_00000001.safetensors", "ckpt_00000002.safetensors", "ckpt_00000003.safetensors"]

    # exact round trip of the newest checkpoint
    back = ESTrainer.from_checkpoint(d / "ckpt_00000003.safetensors")
    assert_trees_equal(back.ts, full.ts)
    assert_trees_equal(back.es_state, full.es_state)
    assert back.round == 3 and back.best_fitness == full.best_fitness
    assert back.history == json.loads(json.dumps(full.history))

    # stop after one round, resume in a "new process" (fresh trainer from the run dir)
    part = ESTrainer(TINY, tmp_path / "part")
    part.run(rounds=1)
    resumed = ESTrainer.resume(tmp_path / "part")
    assert resumed.round == 1
    resumed.run()
    assert stable(resumed.history) == stable(full.history)
    assert_trees_equal(resumed.ts, full.ts)
    assert_trees_equal(resumed.es_state, full.es_state)
    rows = [json.loads(line) for line in (tmp_path / "part" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]


def test_resume_refuses_another_architecture(tmp_path):
    from feudal_es.checkpoint import CheckpointError, CheckpointManager

    t = ESTrainer(TINY, tmp_path / "a")
    t.save_checkpoint()
    other = ESTrainer(TINY.override({"critic.hidden": [16]}), tmp_path / "b")
    with pytest.raises(CheckpointError, match="critic"):
        CheckpointManager(tmp_path / "a").load_latest(other.checkpoint_tree(),
                                                      other.checkpoint_expect())


# --- config and env errors ----------------------------------------------------------------------
def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="mode"):
        TrainerConfig(mode="both")
    with pytest.raises(ValueError, match=r"TrainerConfig.es: .*sigma"):
        TrainerConfig(es=dict(sigma=-1.0))
    with pytest.raises(ValueError, match=r"did you mean.*pop_size"):
        TrainerConfig(es=dict(pop_sise=8))
    with pytest.raises(ValueError, match=r"did you mean.*n_outer"):
        TrainerConfig.from_dict({"n_outr": 3})
    with pytest.raises(TypeError, match="episodes"):
        TrainerConfig(episodes=2.5)
    assert TrainerConfig.from_dict(TINY.to_dict()) == TINY
    assert TINY.override({"es.sigma": 0.2, "n_outer": 5}).es.sigma == 0.2
    assert parse_assignment("env_kwargs.num_agents=4") == ("env_kwargs.num_agents", 4)
    assert parse_assignment("mode=es") == ("mode", "es")


def test_unknown_env_id_suggests_close_ids():
    with pytest.raises(ValueError, match=r"did you mean \['feudal_es/Coverage-v0'"):
        resolve_env("feudal_es/Coverag-v0")
    with pytest.raises(TypeError, match="num_agentz"):
        resolve_env("feudal_es/Coverage-v0", {"num_agentz": 3})
