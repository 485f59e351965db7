"""The recurrent critic (``CriticConfig.recurrent``): one GRU state per env copy, carried
through the collection and reset at each episode's first step (against a plain loop),
MAPPO's update re-running it over whole sequences and pieces (against the collected
values), the feed-forward critic as it was, the same batch on the host path as on the
JAX path, the data-parallel update, and a run that resumes bit for bit."""

from __future__ import annotations

import dataclasses
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import two_device_result

import feudal_es
from agents import ActorConfig, CentralCritic, CriticConfig, FeudalActor, count_params
from agents.layers import MLP, VALUE_GAIN
from envs import SwarmParallelEnv
from envs.dispersion import Dispersion
from feudal_es import budget, mappo
from feudal_es.config import TrainerConfig
from feudal_es.host import HostCollector, HostEnvSpec

# a feed-forward executor: the critic alone makes the update train on sequences
ACTOR = ActorConfig(vec_hidden=(), vec_out=8, gnn_hops=1, gnn_layers=1, gnn_features=8,
                    embed_hidden=(), embed_dim=8, executor_hidden=(8,), selector_period=3)
CRITIC = CriticConfig(hidden=(16,), recurrent=True, gru_hidden=5)
CFG = mappo.MAPPOConfig(num_envs=4, num_steps=10, epochs=1, minibatches=1, lr=3e-3,
                        critic_lr=3e-3)
HORIZON = 4  # episode length: steps 0, 4, 8 of a collection begin episodes


@pytest.fixture(scope="module")
def env():
    return Dispersion(num_agents=3, max_steps=HORIZON, obs_mode="vec")


@pytest.fixture(scope="module")
def nets(env):
    return (FeudalActor.from_env(jax.random.key(1), env, ACTOR),
            CentralCritic.from_env(jax.random.key(2), env, CRITIC))


@pytest.fixture(scope="module")
def collected(env, nets):
    """``(ts before, ts after, batch, first batch)`` of two collections: the second
    starts mid-episode (t = 2) from the GRU state the first left, and ends where an
    episode begins."""
    ts = mappo.init_train_state(jax.random.key(3), env, *nets, CFG)
    run = jax.jit(lambda t: mappo.collect(env, t, CFG))
    ts, first_batch, _ = run(ts)
    after, batch, _ = run(ts)
    return ts, after, batch, first_batch


def _value_by_hand(critic, h, skill):
    """Each agent's value from the GRU output ``h``: the plain MLP on [h, agent one-hot,
    skill one-hot] (not the critic's shared-first-layer form)."""
    n, k = critic.num_agents, critic.num_skills
    return np.array([float(critic.mlp(jnp.concatenate([
        h, jnp.eye(n)[i], jax.nn.one_hot(skill[i], k)]))[0]) for i in range(n)])


def test_the_critic_gru_state_is_carried_and_zeroed_at_every_episode_start(env, nets,
                                                                          collected):
    """Plain loop over env copies and steps: the GRU state is zeroed where an episode
    begins (t % HORIZON == 0 of the episode clock: this collection starts at t = 10 of
    the run, mid-episode) and else carried from the step before, across collections;
    the stored entering states, the values and the rollout's final state are exactly
    what this recomputes. The bootstrap value reads the state after the last step from
    the state that step left (first collection: mid-episode) or from zero (second: a new
    episode), under options it draws itself: each agent's is one of its skills'."""
    critic = nets[1]
    before, after, batch, first_batch = collected
    for ts, b in ((before, first_batch), (after, batch)):
        gs = jax.vmap(critic.state)(jax.vmap(env.global_state_at)(ts.rollout.env_state,
                                                                   ts.rollout.obs),
                                    ts.rollout.ep_t)
        for env_i in range(b.reward.shape[1]):
            new_episode = int(ts.rollout.ep_t[env_i]) == 0
            assert new_episode == (ts is after)
            h = critic.gru(gs[env_i], jnp.zeros_like(ts.rollout.critic_hidden[env_i])
                           if new_episode else ts.rollout.critic_hidden[env_i])
            every = np.stack([_value_by_hand(critic, h, np.full(critic.num_agents, k))
                              for k in range(critic.num_skills)], -1)  # [N, K]
            assert np.isclose(every, np.asarray(b.last_value[env_i])[:, None], rtol=1e-5,
                              atol=1e-5).any(-1).all()
    t_len, e = batch.reward.shape[:2]
    hsize = critic.gru.hidden_size
    assert batch.critic_hidden.shape == (t_len, e, hsize) and batch.hidden is None
    start = CFG.num_steps  # the second collection's first step of the run
    first = (start + np.arange(t_len))[:, None].repeat(e, 1) % HORIZON == 0
    np.testing.assert_array_equal(np.asarray(batch.first), first)
    carried_mattered = False
    for env_i in range(e):
        h = np.asarray(before.rollout.critic_hidden[env_i])
        for t in range(t_len):
            np.testing.assert_allclose(np.asarray(batch.critic_hidden[t, env_i]), h,
                                       rtol=1e-5, atol=1e-6)
            if first[t, env_i]:
                h = np.zeros_like(h)
            state = batch.global_state[t, env_i]
            fresh = critic.gru(state, jnp.zeros(hsize))
            h = np.asarray(critic.gru(state, jnp.asarray(h)))
            skill = np.asarray(batch.option[t, env_i])
            np.testing.assert_allclose(np.asarray(batch.value[t, env_i]),
                                       _value_by_hand(critic, jnp.asarray(h), skill),
                                       rtol=1e-5, atol=1e-5)
            carried_mattered |= not first[t, env_i] and not np.allclose(h, fresh, atol=1e-3)
        np.testing.assert_allclose(np.asarray(after.rollout.critic_hidden[env_i]), h,
                                   rtol=1e-5, atol=1e-6)
    assert carried_mattered  # the state is not vacuous: mid-episode it changes the value


@pytest.mark.heavy
def test_the_update_re_runs_the_collected_values(env, nets, collected):
    """``CentralCritic.sequence`` from the stored entering states and reset flags gives
    the collected values, over whole sequences and over 5-step pieces as the update cuts
    them (one piece starting mid-episode); the update trains the GRU; the update of two
    shards of the batch (data-parallel, simulated by vmap) equals the one-device one."""
    from feudal_es.mappo.update import _prepare_jit

    critic = nets[1]
    _, ts, batch, _ = collected  # the update reads ts's key and value norm only
    rerun = jax.jit(jax.vmap(lambda c, h, s, k, f: c.sequence(h, s, k, f),
                             in_axes=(None, 0, 1, 1, 1), out_axes=1))
    whole = rerun(critic, batch.critic_hidden[0], batch.global_state,
                  mappo.option_skills(batch.option), batch.first)
    np.testing.assert_allclose(np.asarray(whole), np.asarray(batch.value), rtol=1e-5,
                               atol=1e-5)

    cfg = dataclasses.replace(CFG, sequence_length=5)
    _, data, perms, _ = _prepare_jit(ts, batch, cfg)
    e = batch.reward.shape[1]
    assert data["critic_hidden"].shape == (2 * e, critic.gru.hidden_size)
    assert perms.shape == (1, 2 * e)  # minibatches of sequences
    np.testing.assert_array_equal(np.asarray(data["value"][:, e + 1]),
                                  np.asarray(batch.value[5:, 1]))  # piece 1 of copy 1
    pieces = rerun(critic, data["critic_hidden"], data["global_state"],
                   mappo.option_skills(data["option"]), data["first"])
    np.testing.assert_allclose(np.asarray(pieces), np.asarray(data["value"]), rtol=1e-5,
                               atol=1e-5)

    whole_ts, metrics = jax.jit(lambda t, b: mappo.update_fused(t, b, cfg))(ts, batch)
    assert np.isfinite(float(metrics["value_loss"])) and abs(float(metrics["approx_kl"])) < 0.1
    assert not np.array_equal(np.asarray(ts.critic.gru.weight_hh),
                              np.asarray(whole_ts.critic.gru.weight_hh))

    d = 2  # each shard: 2 env copies, their 4 pieces
    shard = lambda x, axis: jnp.moveaxis(
        x.reshape(*x.shape[:axis], d, x.shape[axis] // d, *x.shape[axis + 1:]), axis, 0)
    split = jax.tree.map(lambda x: shard(x, 1), batch._replace(last_value=None))
    split = split._replace(last_value=shard(batch.last_value, 0))
    both, _ = jax.jit(jax.vmap(lambda b: mappo.update_fused(ts, b, cfg, "data"),
                               axis_name="data"))(split)
    for a, b in zip(jax.tree.leaves(eqx.filter(mappo.learned(whole_ts), eqx.is_inexact_array)),
                    jax.tree.leaves(eqx.filter(mappo.learned(both), eqx.is_inexact_array)),
                    strict=True):
        np.testing.assert_allclose(np.asarray(b)[0], np.asarray(a), rtol=1e-4, atol=2e-5)


def test_a_feed_forward_critic_is_unchanged(env):
    """Without the option the critic is the MLP it always was: the same leaves (drawn
    from the same key), the same values, no GRU state in the rollout or the batch."""
    cfg = CriticConfig(hidden=(16,))
    critic = CentralCritic.from_env(jax.random.key(2), env, cfg)
    in_size = env.global_state_size + env.num_agents + len(env.skill_names)
    mlp = MLP(jax.random.key(2), in_size, cfg.hidden, 1, out_gain=VALUE_GAIN,
              layer_norm=cfg.layer_norm)
    assert critic.gru is None and not critic.recurrent
    leaves = jax.tree.leaves(critic)
    assert len(leaves) == len(jax.tree.leaves(mlp))
    for a, b in zip(leaves, jax.tree.leaves(mlp), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    gs = jax.random.normal(jax.random.key(4), (env.global_state_size,))
    skill = jnp.array([0, 1, 0])
    np.testing.assert_allclose(np.asarray(critic(gs, skill)),
                               np.asarray(jax.vmap(mlp)(critic.inputs(gs, skill))[:, 0]),
                               rtol=1e-5, atol=1e-6)
    ro = mappo.init_rollout(jax.random.key(5), env, FeudalActor.from_env(
        jax.random.key(1), env, ACTOR), 2, critic)
    assert ro.critic_hidden is None
    assert mappo.Batch._field_defaults["critic_hidden"] is None
    with pytest.raises(ValueError, match="no GRU state"):
        critic.initial_hidden()


@pytest.mark.heavy
def test_the_host_path_collects_the_same_critic_states(env, nets):
    """SwarmParallelEnv copies through the host collector (deterministic actions, no
    random options): the first episode's steps equal the JAX path's batch, the critic's
    entering GRU states and values included (after a reset the two paths' envs start
    from other states). Across the reset, the host batch's flags and stored states
    re-run to the values it collected."""
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
                            jnp.zeros(cfg.num_envs, jnp.int32), zeros, zeros,
                            jnp.zeros((cfg.num_envs, critic.gru.hidden_size)))
    _, batch_j, _ = jax.jit(lambda t: mappo.collect(env, t, cfg, deterministic=True))(
        ts._replace(rollout=ro))
    np.testing.assert_array_equal(np.asarray(batch_h.first), np.asarray(batch_j.first))
    assert batch_h.hidden is None and batch_h.critic_hidden.shape == batch_j.critic_hidden.shape
    for name in ("critic_hidden", "value", "option", "action", "log_prob", "done"):
        for a, b in zip(jax.tree.leaves(getattr(batch_h, name)),
                        jax.tree.leaves(getattr(batch_j, name)), strict=True):
            np.testing.assert_allclose(np.asarray(a)[:HORIZON], np.asarray(b)[:HORIZON],
                                       rtol=1e-4, atol=1e-5, err_msg=name)
    value = jax.vmap(critic.sequence, in_axes=(0, 1, 1, 1), out_axes=1)(
        batch_h.critic_hidden[0], batch_h.global_state, mappo.option_skills(batch_h.option),
        batch_h.first)
    np.testing.assert_allclose(np.asarray(value), np.asarray(batch_h.value), rtol=1e-5,
                               atol=1e-5)
    collector.close()


TWO_DEVICES = textwrap.dedent("""
    import json
    import equinox as eqx, jax, numpy as np
    from agents import CentralCritic, FeudalActor
    from envs.dispersion import Dispersion
    from feudal_es import mappo
    from test_recurrent_critic import ACTOR, CRITIC, CFG

    env = Dispersion(num_agents=3, max_steps=4, obs_mode="vec")
    cfg = mappo.MAPPOConfig(**{**CFG.__dict__, "sequence_length": 5, "update": "fused"})
    actor = FeudalActor.from_env(jax.random.key(1), env, ACTOR)
    critic = CentralCritic.from_env(jax.random.key(2), env, CRITIC)
    ts = mappo.init_train_state(jax.random.key(3), env, actor, critic, cfg)
    step, settle = mappo.data_parallel_step(env, cfg, jax.devices())
    plain = mappo.make_guarded_train_step(env, cfg, True)
    a = b = ts
    for _ in range(2):
        a, _, _ = step(a)
        b, _, _ = plain(b)
    a = settle(a)
    diff = lambda x, y: max(float(np.max(np.abs(np.asarray(p) - np.asarray(q))))
                            for p, q in zip(*(jax.tree.leaves(eqx.filter(t, eqx.is_inexact_array))
                                              for t in (x, y)), strict=True))
    print("RESULT " + json.dumps({
        "devices": len(jax.devices()),
        "hidden_on": sorted(d.id for d in a.rollout.critic_hidden.sharding.device_set),
        "rollout": diff(a.rollout, b.rollout), "learner": diff(mappo.learned(a),
                                                               mappo.learned(b)),
        "moved": diff(b.critic, ts.critic)}))
""")


@pytest.mark.slow  # ~40-60 s on 2 busy cores: a 2-device subprocess
def test_two_devices_split_the_critic_states_and_equal_one_device():
    """The real ``shard_map`` step on two CPU devices: the critic's GRU states split with
    the env copies, and (one epoch, one minibatch: no shuffle to differ) two steps equal
    the one-device steps."""
    out = two_device_result(TWO_DEVICES)
    assert out["devices"] == 2 and out["hidden_on"] == [0, 1]
    assert out["rollout"] < 2e-5 and out["learner"] < 2e-5 and out["moved"] > 1e-4


TINY = dict(
    env="feudal_es/Rover-v0",
    env_kwargs=dict(num_agents=3, num_pois=2, coupling=2, max_steps=5),
    grad_steps_per_outer=1, episodes=1,
    es=dict(pop_size=2, sigma=0.1, lr=0.05),
    mappo=dict(num_envs=2, num_steps=6, epochs=1, minibatches=2, sequence_length=3),
    actor=dict(vec_hidden=[], vec_out=8, gnn_layers=0, embed_hidden=[], embed_dim=8,
               executor_hidden=[8], selector_period=3, recurrent=True, gru_hidden=4),
    critic=dict(hidden=[8], recurrent=True, gru_hidden=4),
)


@pytest.mark.slow  # three trainers' compilations
def test_a_run_with_a_recurrent_critic_resumes_bit_for_bit(tmp_path):
    """A recurrent executor and critic, 3-step pieces: two rounds straight equal one
    round, a checkpoint and one resumed round, the critic's carried GRU states included
    (one program, one machine)."""
    cfg = TrainerConfig.from_dict({**TINY, "n_outer": 2})
    straight = feudal_es.train(cfg, tmp_path / "a")
    feudal_es.train(dataclasses.replace(cfg, n_outer=1), tmp_path / "b")
    resumed = feudal_es.resume(tmp_path / "b", n_outer=2)
    resumed.run()
    a, b = straight.state, resumed.state
    assert a.learner.rollout.critic_hidden.shape == (2, 4)
    assert np.abs(np.asarray(a.learner.rollout.critic_hidden)).max() > 0
    for x, y in zip(jax.tree.leaves(eqx.filter(a, eqx.is_array)),
                    jax.tree.leaves(eqx.filter(b, eqx.is_array)), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_the_config_surface_and_what_is_refused_clearly(env, nets):
    """``critic.recurrent`` / ``critic.gru_hidden`` through TrainerConfig (the CLI's
    ``--set``), its parameter count in the memory budget, and clear errors for bad values,
    minibatches that do not divide the sequences, and a critic used without its state."""
    from feudal_es.cli_args import config_keys

    cfg = TrainerConfig.from_dict({**TINY, "actor": {**TINY["actor"], "recurrent": False}})
    assert cfg.critic.recurrent and cfg.critic.gru_hidden == 4
    keys = {k: doc for k, _, _, doc in config_keys(cfg)}
    assert "GRU" in keys["critic.recurrent"] and "GRU" in keys["critic.gru_hidden"]
    with pytest.raises(TypeError, match=r"CriticConfig\.recurrent"):
        CriticConfig(recurrent=1)
    with pytest.raises(ValueError, match=r"CriticConfig\.gru_hidden must be >= 1"):
        CriticConfig(recurrent=True, gru_hidden=0)
    with pytest.raises(ValueError, match=r"minibatches \(3\) must divide the 4 sequences"):
        TrainerConfig.from_dict({**TINY, "actor": {**TINY["actor"], "recurrent": False},
                                 "mappo": {**TINY["mappo"], "minibatches": 3}})
    for critic_cfg in (CRITIC, dataclasses.replace(CRITIC, time_input=True)):
        sizes = budget.network_sizes(env.observation_space, env.action_space,
                                     len(env.skill_names), env.global_state_size,
                                     env.num_agents, ACTOR, critic_cfg)
        built = CentralCritic.from_env(jax.random.key(0), env, critic_cfg)
        assert sizes.critic == count_params(built)
    actor, critic = nets
    with pytest.raises(ValueError, match=r"CentralCritic\.step"):
        critic(jnp.zeros(env.global_state_size), jnp.zeros(env.num_agents, jnp.int32))
    ts = mappo.init_train_state(jax.random.key(3), env, actor, critic, CFG)
    with pytest.raises(ValueError, match="critic_hidden"):
        mappo.collect(env, ts._replace(rollout=ts.rollout._replace(critic_hidden=None)), CFG)
