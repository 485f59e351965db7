"""Oracles for the Rover env (the MERL rover domain): the team reward by hand on
constructed states (coupling met, not met, met only at different times), the dense
channels by their definition, the reset regions, the observation layout, and the
headroom of the two reference policies (the hand-coded team assignment far ahead of
"each to its nearest POI", the local reward's behaviour)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs._swarm import SwarmState
from envs.episode import run_episode, stateless
from envs.rover import Rover, nearest_poi_policy, team_of, team_policy

ENV = Rover(num_agents=4, num_pois=2, coupling=3, max_steps=3, observe_radius=2.0)
POIS = np.array([[2.0, 10.0], [18.0, 10.0]], np.float32)


def state(pos, found=(False, False), t=0):
    pos = jnp.asarray(pos, jnp.float32)
    return SwarmState(pos=pos, vel=jnp.zeros_like(pos), targets=jnp.asarray(POIS),
                      found=jnp.asarray(found), t=jnp.asarray(t, jnp.int32))


STAY = jnp.zeros((4, 2))


def test_team_reward_only_at_the_end_fraction_of_pois_observed():
    """Three rovers within 2.0 of POI 0 (one exactly on the radius): it is observed; the
    team reward is 0 until the last step, then 1/2. Two rovers (coupling 3) at POI 1:
    not observed."""
    s = state([[2.0, 11.0], [3.0, 10.0], [2.0, 8.0], [18.0, 10.0]])
    rewards = []
    for _ in range(3):
        _, s, out = ENV.step(jax.random.key(0), s, STAY)
        rewards.append(float(out.team_reward))
    assert rewards == [0.0, 0.0, 0.5] and bool(out.done)
    np.testing.assert_array_equal(np.asarray(s.found), [True, False])
    assert float(out.metrics["observed_frac"]) == 0.5


def test_coupling_must_be_met_at_the_same_time():
    """Three rovers visit POI 0 one after another (never three at once): not observed.
    The same three, arriving together at the last step: observed."""
    far = [10.0, 2.0]
    s = state([[2.0, 10.0], far, far, [18.0, 10.0]])
    moves = [[[0, 0], [0, 0], [0, 0], [0, 0]]]  # rover 0 there alone
    _, s, out = ENV.step(jax.random.key(0), s, jnp.asarray(moves[0], jnp.float32))
    s = state([far, [2.0, 10.0], [2.5, 10.0], [18.0, 10.0]], t=1)  # two others, later
    _, s, out = ENV.step(jax.random.key(0), s, STAY)
    assert not bool(s.found[0])
    s = state([[2.0, 10.0], [2.0, 11.5], [3.5, 10.0], [18.0, 10.0]], t=2)
    _, s, out = ENV.step(jax.random.key(0), s, STAY)
    assert bool(s.found[0]) and float(out.team_reward) == 0.5


def test_an_observed_poi_counts_once():
    s = state([[2.0, 10.0]] * 3 + [[18.0, 10.0]], found=(True, False), t=2)
    _, s, out = ENV.step(jax.random.key(0), s, STAY)
    assert float(out.team_reward) == 0.5  # 1 of 2, not 2 of 2


def test_dense_channels_are_saturating_proximity():
    """skill k = min(1, observe_radius / d_k); reward = the nearest POI's proximity."""
    pos = np.array([[2.0, 10.0], [6.0, 10.0], [10.0, 10.0], [18.0, 14.0]], np.float32)
    _, _, out = ENV.step(jax.random.key(0), state(pos), STAY)
    d = np.linalg.norm(pos[:, None] - POIS[None], axis=-1)
    want = np.minimum(1.0, 2.0 / np.maximum(d, 1e-6))
    np.testing.assert_allclose(np.asarray(out.skill_rewards), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out.reward), want.max(-1), rtol=1e-6)
    assert ENV.skill_names == ("poi_0", "poi_1")


def test_paid_until_observed_and_the_selectors_own_input():
    """``paid_until_observed``: skill k is 0 from the step POI k is observed on (the other
    channels, the reward and the team reward as without it); ``selector_info``: the id
    one-hot then every POI's flag, the rest of the observation unchanged."""
    env = Rover(num_agents=4, num_pois=2, coupling=3, max_steps=3, observe_radius=2.0,
                paid_until_observed=True, selector_info=True)
    pos = np.array([[2.0, 10.0]] * 3 + [[17.0, 10.0]], np.float32)  # POI 0 observed now
    obs, s, out = env.step(jax.random.key(0), state(pos), STAY)
    base_obs, _, base = ENV.step(jax.random.key(0), state(pos), STAY)
    want = np.asarray(base.skill_rewards).copy()
    want[:, 0] = 0.0
    np.testing.assert_array_equal(np.asarray(out.skill_rewards), want)
    assert np.asarray(base.skill_rewards)[:, 0].min() > 0  # it did pay without
    np.testing.assert_array_equal(np.asarray(out.reward), np.asarray(base.reward))
    assert bool(s.found[0]) and not bool(s.found[1])
    np.testing.assert_array_equal(
        np.asarray(obs["selector_obs"]),
        np.concatenate([np.eye(4), np.tile([[1.0, 0.0]], (4, 1))], -1))
    assert set(obs) == set(base_obs) | {"selector_obs"}
    for k in base_obs:
        np.testing.assert_array_equal(np.asarray(obs[k]), np.asarray(base_obs[k]))
    for bad in ("selector_info", "paid_until_observed"):
        with pytest.raises(TypeError, match=bad):
            Rover(**{bad: 1})


def test_reset_regions_and_observation_layout():
    env = Rover()  # 8 rovers, 4 POIs, coupling 4, world 20
    obs, s = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(0), 256))
    pos, pois = np.asarray(s.pos), np.asarray(s.targets)
    side = 20 * np.sqrt(0.1)
    assert np.all(np.abs(pos - 10) <= side / 2 + 1e-5)  # the central 10% of the world
    band = [pois[:, i % 4, 0] if i % 4 < 2 else pois[:, i % 4, 1] for i in range(4)]
    assert np.all((band[0] >= 1) & (band[0] <= 4)) and np.all((band[1] >= 16) & (band[1] <= 19))
    assert np.all((band[2] >= 1) & (band[2] <= 4)) and np.all((band[3] >= 16) & (band[3] <= 19))
    vec = np.asarray(obs["vec"])
    assert vec.shape == (256, 8, 9 + 2 * 8 + 3 * 4 + 8)
    rel = (pois[:, None] - pos[:, :, None]) / 20  # per-POI offsets, in index order
    np.testing.assert_allclose(vec[..., 25:33], rel.reshape(256, 8, 8), atol=1e-6)
    np.testing.assert_array_equal(vec[..., 37:], np.broadcast_to(np.eye(8), (256, 8, 8)))
    assert set(Rover(obs_mode="both").observation_space.spaces) == {"maps", "vec"}
    # option_obs: per POI the same offsets and the observed flag, as an [N, M, 3] entry
    from envs.base import OPTION_OBS

    both = Rover(option_obs=True, obs_mode="both")
    o, _ = jax.jit(jax.vmap(both.reset))(jax.random.split(jax.random.key(0), 256))
    np.testing.assert_allclose(np.asarray(o[OPTION_OBS])[..., :2], rel, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(o[OPTION_OBS])[..., 2], 0.0)
    assert set(both.observation_space.spaces) == {"maps", "vec", OPTION_OBS}
    assert both.observation_space[OPTION_OBS].shape == (4, 3)
    st = state([[2.0, 10.0]] * 3 + [[10.0, 10.0]], found=(True, False))
    flags = np.asarray(ENV.__class__(num_agents=4, num_pois=2, coupling=3, option_obs=True
                                     ).observe(st)[OPTION_OBS])[..., 2]
    np.testing.assert_array_equal(flags, [[1.0, 0.0]] * 4)
    np.testing.assert_array_equal(np.asarray(team_of(env)), [0, 0, 0, 0, 1, 1, 1, 1])


@pytest.mark.parametrize("bad, match", [
    (dict(coupling=9), "coupling must be <= num_agents"),
    (dict(band=9.5), "band must be"), (dict(start_fraction=1.5), "start_fraction"),
    (dict(obs_mode="pixels"), "obs_mode"), (dict(agent_ids=1), "agent_ids"),
    (dict(option_obs="yes"), "option_obs")])
def test_bad_arguments_name_the_argument(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        Rover(**bad)


def test_headroom_team_assignment_far_ahead_of_nearest_poi():
    """64 held-out episodes, default sizes: the hand-coded team assignment observes every
    POI; every rover heading for its nearest POI (the local reward's behaviour) observes
    about one of four (measured: 1.00 vs 0.25)."""
    env = Rover()
    keys = jax.random.split(jax.random.key(123_456), 64)
    mean = {name: float(jax.jit(jax.vmap(lambda k, p=policy: run_episode(
        k, env, stateless(p, env)).team_return))(keys).mean())
        for name, policy in (("team", team_policy), ("nearest", nearest_poi_policy))}
    assert mean["team"] >= 0.95 and mean["nearest"] <= 0.35, mean
    assert mean["team"] - mean["nearest"] >= 0.5
