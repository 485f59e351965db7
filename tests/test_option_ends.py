"""Options that end when done (``ActorConfig.option_ends``): an agent whose option's goal
is met has the selector re-decide for it at that step; the fixed period stays the longest
an option is held. Oracles: the selector's argmax by hand, and a plain Python loop of
eager steps against the jitted episode and MAPPO's collection."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import VEC

from agents import ActorConfig, CentralCritic, FeudalActor
from envs.rover_merl import RoverMERL
from feudal_es import mappo
from feudal_es.resolve import resolve_env
from feudal_es.rollout import episode
from feudal_es.runtime import make_runtime

PERIOD = 25
ACTOR = ActorConfig(vec_hidden=(16,), vec_out=16, gnn_layers=0, embed_hidden=(),
                    embed_dim=16, executor_hidden=(16,), selector_period=PERIOD,
                    option_ends=True)
# 4 rovers, coupling 1, a 9 x 9 world: random-weight rovers observe POIs within an episode
ENV = RoverMERL(num_agents=4, coupling=1, num_pois=3, world_size=9, max_steps=30)


def actor(option_ends: bool = True, key: int = 0) -> FeudalActor:
    return FeudalActor.from_env(jax.random.key(key), ENV,
                                dataclasses.replace(ACTOR, option_ends=option_ends))


def test_only_agents_whose_option_is_done_redecide_between_periods():
    a = actor()
    obs, state = ENV.reset(jax.random.key(1))
    adj = ENV.comm_graph(state)
    prev = jnp.array([0, 1, 2, 0], jnp.int32)
    found = jnp.array([True, False, False])
    done = jnp.broadcast_to(found, (4, 3))
    argmax = np.argmax(np.asarray(a.skill_logits(obs, adj)), axis=-1)
    want = np.where(np.asarray(found)[np.asarray(prev)], argmax, np.asarray(prev))
    assert (want != np.asarray(prev)).any() or (argmax[[0, 3]] == 0).all()
    got = a.select_option(obs, adj, prev, jnp.int32(3), done=done)
    np.testing.assert_array_equal(np.asarray(got), want)
    # at a period boundary every agent re-decides, done or not
    np.testing.assert_array_equal(
        np.asarray(a.select_option(obs, adj, prev, jnp.int32(PERIOD), done=done)), argmax)
    # no done flags, or an actor without option_ends: the option is held
    np.testing.assert_array_equal(np.asarray(a.select_option(obs, adj, prev, jnp.int32(3))),
                                  np.asarray(prev))
    held = actor(option_ends=False).select_option(obs, adj, prev, jnp.int32(3), done=done)
    np.testing.assert_array_equal(np.asarray(held), np.asarray(prev))


def test_jitted_episode_equals_a_plain_loop_that_ends_options_by_hand():
    """The episode the ES fitness runs (``rollout.episode``, scanned and jitted) against
    eager steps whose decisions are written out: decide at ``t % PERIOD == 0`` or where
    the held option's POI is observed."""
    a = actor()
    key = jax.random.key(2)  # an episode where held options' POIs get observed (8 times)
    ep = jax.jit(lambda k: episode(ENV, a, k, deterministic=True, keep_states=True))(key)
    obs, state = ENV.reset(jax.random.split(key)[0])  # run_episode's reset key
    np.testing.assert_array_equal(np.asarray(ep.states.pos[0]), np.asarray(state.pos))
    logits = jax.jit(lambda obs, state: a.skill_logits(obs, ENV.comm_graph(state)))
    advance = jax.jit(lambda obs, state, option: ENV.step(jax.random.key(0), state, a.act(
        jax.random.key(0), obs, ENV.comm_graph(state), option, deterministic=True).env_action))
    option = np.zeros(ENV.num_agents, np.int32)
    early = 0
    for t in range(ENV.max_steps):  # the decisions by hand, in Python
        argmax = np.argmax(np.asarray(logits(obs, state)), axis=-1)
        found = np.asarray(state.found)
        decide = (t % PERIOD == 0) | found[option]
        early += int((decide & (t % PERIOD != 0)).sum())
        option = np.where(decide, argmax, option).astype(np.int32)
        obs, state, _ = advance(obs, state, jnp.asarray(option))
        np.testing.assert_allclose(np.asarray(ep.states.pos[t + 1]), np.asarray(state.pos),
                                   rtol=1e-5, atol=1e-5, err_msg=f"step {t}")
    assert early > 0, "no option ended between periods: the test would not test it"


@pytest.mark.heavy
def test_mappo_collection_holds_options_until_a_period_or_their_goal():
    """Every transition of a MAPPO batch: the option changes only at a period boundary or
    where the previous option's POI was observed (the obs' option block carries the
    flags); and some options end between boundaries."""
    cfg = mappo.MAPPOConfig(num_envs=4, num_steps=40, epochs=1, minibatches=1,
                            option_exploration=0.0)
    a = actor()
    critic = CentralCritic.from_env(jax.random.key(1), ENV, VEC.critic)
    ts = mappo.init_train_state(jax.random.key(2), ENV, a, critic, cfg)
    _, batch, _ = jax.jit(lambda ts: mappo.collect(ENV, ts, cfg))(ts)
    option = np.asarray(batch.option)  # [T, E, N]
    vec = np.asarray(batch.obs["vec"])  # [T, E, N, D]; per POI k: dx, dy, flag at the end
    m = ENV.num_pois
    flags = vec[..., -3 * m:].reshape(*vec.shape[:-1], m, 3)[..., 2] > 0.5  # [T, E, N, M]
    ep_t = np.zeros(option.shape[1], int)
    early = 0
    for t in range(1, option.shape[0]):
        ep_t = ep_t + 1
        restart = np.asarray(batch.done[t - 1, :, 0]) > 0
        ep_t[restart] = 0
        prev = option[t - 1]
        prev_done = np.take_along_axis(flags[t], prev[..., None], axis=-1)[..., 0]
        boundary = (ep_t % PERIOD == 0)[:, None]
        changed = option[t] != prev
        assert not (changed & ~boundary & ~prev_done).any(), f"step {t}: option changed early"
        early += int((prev_done & ~boundary).sum())
    assert early > 0


def test_option_ends_is_refused_where_options_have_no_goal():
    cfg = dataclasses.replace(VEC, seeds=(0,),
                              actor=dataclasses.replace(VEC.actor, option_ends=True))
    with pytest.raises(ValueError, match=r"option_ends.*no goal"):
        make_runtime(cfg, resolve_env(cfg.env, cfg.env_kwargs))
