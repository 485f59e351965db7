"""The recurrent executor (``ActorConfig.recurrent``): the GRU state carried with the
options, reset at each episode's first step (against a plain loop), MAPPO's update over
whole sequences (against the collection and the split update), the same batch on the
host path as on the JAX path, and a run that resumes bit for bit."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import feudal_es
import feudal_es.pretrain
from agents import (
    ActorConfig,
    CentralCritic,
    CriticConfig,
    FeudalActor,
    RecurrentOption,
    executor_filter,
    selector_filter,
)
from envs import SwarmParallelEnv
from envs.dispersion import Dispersion
from feudal_es import mappo
from feudal_es.config import TrainerConfig
from feudal_es.host import HostCollector, HostEnvSpec

ACTOR = ActorConfig(vec_hidden=(), vec_out=8, gnn_hops=1, gnn_layers=1, gnn_features=8,
                    embed_hidden=(), embed_dim=8, executor_hidden=(8,), selector_period=3,
                    recurrent=True, gru_hidden=6)
CFG = mappo.MAPPOConfig(num_envs=4, num_steps=10, epochs=2, minibatches=2, lr=3e-3,
                        critic_lr=3e-3)
HORIZON = 4  # episode length: steps 0, 4, 8 of a collection begin episodes


@pytest.fixture(scope="module")
def env():
    return Dispersion(num_agents=3, max_steps=HORIZON, obs_mode="vec")


@pytest.fixture(scope="module")
def nets(env):
    return (FeudalActor.from_env(jax.random.key(1), env, ACTOR),
            CentralCritic.from_env(jax.random.key(2), env, CriticConfig(hidden=(16,))))


@pytest.fixture(scope="module")
def collected(env, nets):
    ts = mappo.init_train_state(jax.random.key(3), env, *nets, CFG)
    return (ts, *jax.jit(lambda t: mappo.collect(env, t, CFG))(ts))


def test_the_gru_state_is_carried_and_zeroed_at_every_episode_start(nets, collected):
    """Plain loop over steps and agents: the state entering step t is zero where an
    episode begins (t % HORIZON == 0, the batch's ``first``) and else the previous step's;
    the collection stored exactly the states this recomputes."""
    actor = nets[0]
    _, _, batch, _ = collected
    assert isinstance(batch.option, RecurrentOption)
    t_len, e, n, hsize = batch.option.hidden.shape
    np.testing.assert_array_equal(np.asarray(batch.first),
                                  np.arange(t_len)[:, None].repeat(e, 1) % HORIZON == 0)
    np.testing.assert_array_equal(np.asarray(batch.hidden), np.zeros((e, n, hsize)))
    carried_mattered = False
    for env_i in range(e):
        h = np.zeros((n, hsize), np.float32)
        for t in range(t_len):
            if t % HORIZON == 0:
                h = np.zeros_like(h)
            pick = lambda x, t=t, env_i=env_i: x[t, env_i]
            obs, adj = jax.tree.map(pick, batch.obs), batch.adj[t, env_i]
            x = actor.executor.inputs(actor.embed(obs, adj), batch.option.option[t, env_i],
                                      jnp.zeros((n, 0)))
            fresh = np.stack([np.asarray(actor.executor.gru(x[i], jnp.zeros(hsize)))
                              for i in range(n)])
            h = np.stack([np.asarray(actor.executor.gru(x[i], jnp.asarray(h[i])))
                          for i in range(n)])
            np.testing.assert_allclose(np.asarray(batch.option.hidden[t, env_i]), h,
                                       rtol=1e-5, atol=1e-6)
            carried_mattered |= t % HORIZON != 0 and not np.allclose(h, fresh, atol=1e-3)
    assert carried_mattered  # the state is not vacuous: mid-episode it changes the output


def test_the_update_re_runs_the_collection_over_whole_sequences(env, nets, collected):
    """``evaluate_sequence`` from the stored first state and reset flags gives the log-probs
    the collection sampled with; the fused update (a scan over minibatches of sequences,
    here 5-step pieces) equals the split one; the GRU trains and the selector stays
    bit-identical."""
    actor = nets[0]
    _, ts, batch, _ = collected
    log_prob, _ = jax.jit(jax.vmap(actor.evaluate_sequence, in_axes=(1, 1, 1, 1, 1, 0),
                                   out_axes=1))(batch.obs, batch.adj, batch.option,
                                                batch.action, batch.first, batch.hidden)
    np.testing.assert_allclose(np.asarray(log_prob), np.asarray(batch.log_prob), rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(ValueError, match="evaluate_sequence"):
        actor.evaluate(jax.tree.map(lambda x: x[0, 0], batch.obs), batch.adj[0, 0],
                       jax.tree.map(lambda x: x[0, 0], batch.option), batch.action[0, 0])

    cfg = dataclasses.replace(CFG, sequence_length=5)  # 5-step pieces of the 10 steps
    split, _ = mappo.update(ts, batch, cfg)
    fused, metrics = eqx.filter_jit(lambda t, b: mappo.update_fused(t, b, cfg))(ts, batch)
    for a, b in zip(jax.tree.leaves(eqx.filter(fused, eqx.is_inexact_array)),
                    jax.tree.leaves(eqx.filter(split, eqx.is_inexact_array)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6)
    assert abs(float(metrics["approx_kl"])) < 0.1
    sel = selector_filter(ts.actor)
    for a, b in zip(jax.tree.leaves(eqx.filter(ts.actor, sel)),
                    jax.tree.leaves(eqx.filter(fused.actor, sel)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    gru_before, gru_after = ts.actor.executor.gru, fused.actor.executor.gru
    assert executor_filter(ts.actor).executor.gru.weight_hh  # the GRU is the executor's
    assert not np.array_equal(np.asarray(gru_before.weight_hh),
                              np.asarray(gru_after.weight_hh))


def test_pieces_of_sequences_start_from_the_state_the_collection_had(nets, collected):
    """``mappo.sequence_length`` cuts each copy's 10 steps into pieces of 5 (one starting
    mid-episode, at t = 5): re-run from the state the collection had at each piece's
    start, they give the collected log-probs."""
    from feudal_es.mappo.update import _sequences

    actor = nets[0]
    _, _, batch, _ = collected
    data = {"obs": batch.obs, "adj": batch.adj, "option": batch.option,
            "action": batch.action, "log_prob": batch.log_prob, "first": batch.first}
    pieces, hidden = _sequences(data, batch.hidden, batch.option.hidden, 5)
    e = batch.reward.shape[1]
    assert pieces["log_prob"].shape[:2] == (5, 2 * e) and hidden.shape[0] == 2 * e
    np.testing.assert_array_equal(np.asarray(pieces["log_prob"][:, e + 1]),
                                  np.asarray(batch.log_prob[5:, 1]))  # piece 1 of copy 1
    log_prob, _ = jax.vmap(actor.evaluate_sequence, in_axes=(1, 1, 1, 1, 1, 0),
                           out_axes=1)(pieces["obs"], pieces["adj"], pieces["option"],
                                       pieces["action"], pieces["first"], hidden)
    np.testing.assert_allclose(np.asarray(log_prob), np.asarray(pieces["log_prob"]),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.heavy
def test_the_host_path_collects_the_same_sequences(env, nets):
    """SwarmParallelEnv copies through the host collector (deterministic actions): the
    first episode's steps equal the JAX path's batch, GRU states included (no random
    options: the two paths draw them from other keys; after a reset the two paths' envs
    start from other states). Across the reset, the host batch's flags and stored states
    re-run to the log-probs it sampled with."""
    actor, critic = nets
    cfg = dataclasses.replace(CFG, num_envs=2, num_steps=6, option_exploration=0.0)
    penvs = [SwarmParallelEnv(env) for _ in range(cfg.num_envs)]
    collector = HostCollector(penvs, HostEnvSpec(penvs[0]), cfg, seed=5, deterministic=True)
    env_state = jax.tree.map(lambda *a: jnp.stack(a), *[p.core_state for p in penvs])
    ts = mappo.init_learner(jax.random.key(7), actor, critic, cfg)
    _, batch_h, _ = collector.collect(ts)
    zeros = jnp.zeros(cfg.num_envs)
    option = jax.tree.map(lambda x: jnp.broadcast_to(x, (cfg.num_envs, *x.shape)),
                          actor.initial_option(env.num_agents))
    ro = mappo.RolloutState(env_state, jax.vmap(env.observe)(env_state), option,
                            jnp.zeros(cfg.num_envs, jnp.int32), zeros, zeros)
    _, batch_j, _ = jax.jit(lambda t: mappo.collect(env, t, cfg, deterministic=True))(
        ts._replace(rollout=ro))
    np.testing.assert_array_equal(np.asarray(batch_h.first), np.asarray(batch_j.first))
    np.testing.assert_array_equal(np.asarray(batch_h.hidden), np.asarray(batch_j.hidden))
    for name in ("option", "action", "log_prob", "value", "done"):
        for a, b in zip(jax.tree.leaves(getattr(batch_h, name)),
                        jax.tree.leaves(getattr(batch_j, name)), strict=True):
            np.testing.assert_allclose(np.asarray(a)[:HORIZON], np.asarray(b)[:HORIZON],
                                       rtol=1e-4, atol=1e-5, err_msg=name)
    log_prob, _ = jax.vmap(actor.evaluate_sequence, in_axes=(1, 1, 1, 1, 1, 0), out_axes=1)(
        batch_h.obs, batch_h.adj, batch_h.option, batch_h.action, batch_h.first,
        batch_h.hidden)
    np.testing.assert_allclose(np.asarray(log_prob), np.asarray(batch_h.log_prob),
                               rtol=1e-5, atol=1e-5)


TINY = dict(
    env="feudal_es/Rover-v0",
    env_kwargs=dict(num_agents=3, num_pois=2, coupling=2, max_steps=5),
    grad_steps_per_outer=1, episodes=1,
    es=dict(pop_size=2, sigma=0.1, lr=0.05),
    mappo=dict(num_envs=2, num_steps=6, epochs=1, minibatches=2),
    actor=dict(vec_hidden=[], vec_out=8, gnn_layers=0, embed_hidden=[], embed_dim=8,
               executor_hidden=[8], selector_period=3, recurrent=True, gru_hidden=4),
    critic=dict(hidden=[8]),
)


@pytest.mark.slow  # ~11 s: three trainers' compilations
def test_a_recurrent_run_resumes_bit_for_bit(tmp_path):
    """Two rounds straight equal one round, a checkpoint and one resumed round: the
    networks, the optimizer state and the carried GRU states (one program, one machine)."""
    cfg = TrainerConfig.from_dict({**TINY, "n_outer": 2})
    straight = feudal_es.train(cfg, tmp_path / "a")
    feudal_es.train(dataclasses.replace(cfg, n_outer=1), tmp_path / "b")
    resumed = feudal_es.resume(tmp_path / "b", n_outer=2)
    resumed.run()
    a, b = straight.state, resumed.state
    assert isinstance(a.learner.rollout.option, RecurrentOption)
    for x, y in zip(jax.tree.leaves(eqx.filter(a, eqx.is_array)),
                    jax.tree.leaves(eqx.filter(b, eqx.is_array)), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_what_a_recurrent_executor_cannot_do_is_refused_clearly():
    with pytest.raises(ValueError, match=r"minibatches \(3\) must divide the 2 sequences"):
        TrainerConfig.from_dict({**TINY, "mappo": {**TINY["mappo"], "minibatches": 3}})
    with pytest.raises(ValueError, match=r"sequence_length \(4\) must divide num_steps"):
        mappo.MAPPOConfig(num_steps=6, sequence_length=4)
    from feudal_es.executors import actor_executor

    actor = FeudalActor.from_env(jax.random.key(0), Dispersion(num_agents=2, obs_mode="vec"),
                                 ACTOR)
    with pytest.raises(ValueError, match="recurrent"):
        actor_executor(actor)
    with pytest.raises(ValueError, match="recurrent"):
        feudal_es.pretrain.pretrain(TrainerConfig.from_dict(TINY),
                                    feudal_es.pretrain.PretrainConfig())
