"""Oracles for the Discovery and Dispersion envs (and their greedy reference policies).

Hand-placed states check the semantics (coupling, goals counted once, huddle), plain
numpy loops re-derive the comm graph, local maps and vector observation from their
definitions, and Python side-effect counters check that jit + vmap traces once.
Positions in the oracle states are dyadic (multiples of 1/64), so float32 and float64
agree exactly, including on cell and radius boundaries. Compiled functions are shared
through module-level caches to keep the file to a handful of jit compilations.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import render as render_mod
from envs._swarm import SwarmState
from envs.base import auto_reset_step
from envs.discovery import Discovery
from envs.discovery import greedy_policy as discovery_greedy
from envs.dispersion import Dispersion
from envs.dispersion import greedy_policy as dispersion_greedy

BATCH = 64


def make_state(pos, targets, found=None, t=0) -> SwarmState:
    pos = np.asarray(pos, np.float32)
    targets = np.asarray(targets, np.float32)
    found = np.zeros(len(targets), bool) if found is None else np.asarray(found, bool)
    return SwarmState(pos=jnp.asarray(pos), vel=jnp.zeros_like(jnp.asarray(pos)),
                      targets=jnp.asarray(targets), found=jnp.asarray(found),
                      t=jnp.asarray(t, jnp.int32))


@functools.cache
def jitted_step(env):
    return jax.jit(env.step)


@functools.cache
def jitted_observe(env):
    return jax.jit(lambda s: (env.observe(s), env.comm_graph(s), env.global_state(s)))


# --- coupling semantics (Discovery) --------------------------------------------------

# coupling 3, capture radius 0.1, max speed 0.1; target 0 at (0.25, 0.25), target 1 far.
COUPLED = Discovery(num_agents=4, num_targets=2, coupling=3, capture_radius=0.1,
                    max_speed=0.1, max_steps=10, map_size=8)
T0, T1 = (0.25, 0.25), (0.75, 0.75)


def test_coupling_k_minus_one_agents_discover_nothing():
    # agents 0, 1 within range of target 0; agent 2 just outside; agent 3 on target 1.
    state = make_state([(0.25, 0.3125), (0.1875, 0.25), (0.4375, 0.25), (0.75, 0.75)],
                       [T0, T1])
    _, nxt, out = jitted_step(COUPLED)(jax.random.key(0), state, jnp.zeros((4, 2)))
    assert float(out.team_reward) == 0.0
    assert not np.asarray(nxt.found).any()
    # 3 agents are near *some* target, but never 3 near the same one: still nothing.
    np.testing.assert_array_equal(np.asarray(out.reward), 0.0)


def test_coupling_k_agents_discover_once():
    state = make_state([(0.25, 0.3125), (0.1875, 0.25), (0.4375, 0.25), (0.75, 0.75)],
                       [T0, T1])
    step = jitted_step(COUPLED)
    # agent 2 moves left by max_speed (0.1) to x = 0.3375: 0.0875 from target 0 -> in range.
    act = jnp.array([[0.0, 0.0], [0.0, 0.0], [-1.0, 0.0], [0.0, 0.0]])
    _, s1, out1 = step(jax.random.key(0), state, act)
    assert float(out1.team_reward) == 1.0
    np.testing.assert_array_equal(np.asarray(s1.found), [True, False])
    # participants are credited, the bystander is not; agent 2 also got closer (approach).
    r = np.asarray(out1.reward)
    np.testing.assert_allclose(r[:2], 1.0)
    assert r[2] > 1.0 and r[3] == 0.0
    assert float(out1.metrics["discovered_frac"]) == 0.5
    # staying put: the discovered target is not counted again.
    _, s2, out2 = step(jax.random.key(1), s1, jnp.zeros((4, 2)))
    assert float(out2.team_reward) == 0.0
    np.testing.assert_array_equal(np.asarray(s2.found), [True, False])
    np.testing.assert_array_equal(np.asarray(out2.reward), 0.0)
    assert int(s2.t) == 2 and not bool(out2.done)


def test_discovery_skill_rewards_follow_their_definitions():
    # approach: agent 0 moves 0.1 straight toward target 0 (from 0.5 away) -> +1.
    # regroup (coupling 3 -> 2nd nearest teammate): agent 3 moves toward agents 1, 2.
    state = make_state([(0.25, 0.75), (0.5, 0.5), (0.5625, 0.5), (0.875, 0.5)],
                       [T0, T1], found=[False, True])
    act = jnp.array([[0.0, -1.0], [0.0, 0.0], [0.0, 0.0], [-1.0, 0.0]])
    _, nxt, out = jitted_step(COUPLED)(jax.random.key(0), state, act)
    pos0, pos1 = np.asarray(state.pos, np.float64), np.asarray(nxt.pos, np.float64)
    t0 = np.asarray(T0)

    def kth(p, i, k):
        return np.sort([np.hypot(*(p[i] - p[j])) for j in range(4) if j != i])[k - 1]

    sk = np.asarray(out.skill_rewards)
    for i in range(4):
        d_old = max(np.hypot(*(pos0[i] - t0)), 0.1)
        d_new = max(np.hypot(*(pos1[i] - t0)), 0.1)
        np.testing.assert_allclose(sk[i, 0], (d_old - d_new) / 0.1, atol=1e-5)
        g_old, g_new = max(kth(pos0, i, 2), 0.1), max(kth(pos1, i, 2), 0.1)
        np.testing.assert_allclose(sk[i, 1], (g_old - g_new) / 0.1, atol=1e-5)
    np.testing.assert_allclose(sk[0, 0], 1.0, atol=1e-5)
    assert sk[3, 1] > 0.5


# --- Dispersion semantics ------------------------------------------------------------

DISP = Dispersion()  # defaults: 8 agents, 8 goals
DISC = Discovery()


# 3 agents, 2 goals, max speed 0.0625, goal radius 0.05, spread radius 0.25.
SMALL_DISP = Dispersion(num_agents=3, num_goals=2, goal_radius=0.05, max_speed=0.0625,
                        spread_radius=0.25, map_size=8)


def test_dispersion_goal_counted_once():
    env = SMALL_DISP
    goals = [(0.5, 0.5), (0.25, 0.75)]
    # two agents on goal 0 at once; agent 2 one step (0.0625) below goal 1.
    state = make_state([(0.5, 0.5), (0.515625, 0.5), (0.25, 0.6875)], goals)
    step = jitted_step(env)
    _, s1, out1 = step(jax.random.key(0), state, jnp.zeros((3, 2)))
    assert float(out1.team_reward) == 1.0  # one goal, even though two agents reached it
    np.testing.assert_array_equal(np.asarray(s1.found), [True, False])
    _, s2, out2 = step(jax.random.key(0), s1, jnp.zeros((3, 2)))
    assert float(out2.team_reward) == 0.0
    _, s3, out3 = step(jax.random.key(0), s2, jnp.array([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]]))
    assert float(out3.team_reward) == 1.0
    np.testing.assert_array_equal(np.asarray(s3.found), [True, True])
    # reach skill: agent 2 closed 0.0625 of distance, i.e. one max_speed, floored at radius.
    np.testing.assert_allclose(float(out3.skill_rewards[2, 1]), (0.0625 - 0.05) / 0.0625,
                               atol=1e-5)
    assert float(out3.metrics["reached_frac"]) == 1.0


def test_dispersion_spread_reward():
    step, far_away = jitted_step(SMALL_DISP), (0.0, 0.0)
    state = make_state([(0.5, 0.5), (0.5625, 0.5), far_away], [(1.0, 1.0), (1.0, 0.0)])
    act = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    # agent 1 steps away: nearest-neighbour distance 0.0625 -> 0.125 for agents 0 and 1;
    # agent 2 is beyond spread_radius of everyone before and after: nothing to gain.
    _, _, out = step(jax.random.key(0), state, act)
    np.testing.assert_allclose(np.asarray(out.skill_rewards[:, 0]), [1.0, 1.0, 0.0], atol=1e-5)
    far = make_state([(0.25, 0.5), (0.5625, 0.5), far_away], [(1.0, 1.0), (1.0, 0.0)])
    _, _, out = step(jax.random.key(0), far, act)
    np.testing.assert_allclose(np.asarray(out.skill_rewards[:, 0]), [0.0, 0.0, 0.0], atol=1e-6)


def test_auto_reset_step_matches_step_and_reset():
    """base.auto_reset_step observes the selected state once; same obs as step / reset."""
    env = SMALL_DISP

    @jax.jit
    def both(key, state, actions):
        auto = auto_reset_step(env, key, state, actions)
        key_step, key_reset = jax.random.split(key)
        return auto, env.step(key_step, state, actions), env.reset(key_reset)

    act = jnp.full((3, 2), 0.5)
    for t, done in [(0, False), (env.max_steps - 1, True)]:
        state = make_state([(0.5, 0.5), (0.5625, 0.5), (0.0, 0.0)], [(1.0, 1.0), (1.0, 0.0)],
                           t=t)
        (obs, nxt, out), (obs_s, nxt_s, out_s), (obs_r, nxt_r) = both(jax.random.key(t), state,
                                                                       act)
        assert bool(out.done) == done
        want_obs, want_state = (obs_r, nxt_r) if done else (obs_s, nxt_s)
        for got, want in zip(jax.tree.leaves((obs, nxt)), jax.tree.leaves((want_obs, want_state)),
                             strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)
        np.testing.assert_array_equal(np.asarray(out.reward), np.asarray(out_s.reward))


# --- jit + vmap with one trace each; huddle at reset -----------------------------------


@functools.cache
def batched(env):
    """jit(vmap(reset)) and jit(vmap(step)) over BATCH envs, with trace counters."""
    traces = {"reset": 0, "step": 0}

    def reset(key):
        traces["reset"] += 1
        return env.reset(key)

    def step(key, state, actions):
        traces["step"] += 1
        return env.step(key, state, actions)

    return jax.jit(jax.vmap(reset)), jax.jit(jax.vmap(step)), traces


@pytest.mark.parametrize("env", [DISC, DISP], ids=["discovery", "dispersion"])
def test_jit_vmap_one_trace(env):
    reset, step, traces = batched(env)
    n = env.num_agents
    for seed in range(3):
        keys = jax.random.split(jax.random.key(seed), BATCH)
        obs, state = reset(keys)
        acts = jax.random.uniform(jax.random.key(seed + 7), (BATCH, n, 2), minval=-1, maxval=1)
        obs, state, out = step(keys, state, acts)
        obs, state, out = step(keys, state, acts)
    assert traces == {"reset": 1, "step": 1}
    assert obs["maps"].shape == (BATCH, n, 3, env.map_size, env.map_size)
    assert obs["vec"].shape == (BATCH, n, 9)
    assert obs["maps"].dtype == obs["vec"].dtype == jnp.float32
    assert out.reward.shape == (BATCH, n) and out.team_reward.shape == (BATCH,)
    assert out.skill_rewards.shape == (BATCH, n, len(env.skill_names)) == (BATCH, n, 2)
    assert np.asarray(state.t).tolist() == [2] * BATCH
    for leaf in jax.tree.leaves((obs, out.reward, out.skill_rewards)):
        assert np.isfinite(np.asarray(leaf)).all()
    pos = np.asarray(state.pos)
    assert (pos >= 0).all() and (pos <= env.world_size).all()


def test_dispersion_starts_in_a_huddle():
    reset, _, _ = batched(DISP)
    _, state = reset(jax.random.split(jax.random.key(3), BATCH))
    pos, goals = np.asarray(state.pos, np.float64), np.asarray(state.targets, np.float64)
    spread = np.linalg.norm(pos[:, :, None] - pos[:, None], axis=-1).max(axis=(1, 2))
    assert (spread <= 2 * DISP.huddle_radius + 1e-6).all()
    goal_spread = np.linalg.norm(goals[:, :, None] - goals[:, None], axis=-1).max(axis=(1, 2))
    assert np.median(goal_spread) > 0.5 * DISP.world_size  # goals are scattered
    # different keys -> different huddle centres
    assert np.unique(pos[:, 0, 0].round(4)).size > BATCH // 2
    assert not np.asarray(state.found).any() and (np.asarray(state.t) == 0).all()


# --- comm graph, maps and vec against plain numpy -------------------------------------


def np_observe(env, pos, targets, found, t):
    n, hw = len(pos), env.map_size
    cell = 2 * env.sensor_radius / hw
    adj = np.zeros((n, n), np.float32)
    maps = np.zeros((n, 3, hw, hw), np.float32)
    for i in range(n):
        for j in range(n):
            if i != j and np.hypot(*(pos[j] - pos[i])) <= env.comm_radius:
                adj[i, j] = 1.0
        entities = [(0, targets[j]) for j in range(len(targets)) if not found[j]]
        entities += [(1, pos[j]) for j in range(n) if adj[i, j]]
        for ch, p in entities:
            ix, iy = (int(np.floor((p[k] - pos[i][k]) / cell + hw / 2)) for k in (0, 1))
            if 0 <= ix < hw and 0 <= iy < hw:
                maps[i, ch, iy, ix] += 1.0
        for iy in range(hw):
            for ix in range(hw):
                cx = pos[i][0] - env.sensor_radius + (ix + 0.5) * cell
                cy = pos[i][1] - env.sensor_radius + (iy + 0.5) * cell
                outside = not (0 <= cx <= env.world_size and 0 <= cy <= env.world_size)
                maps[i, 2, iy, ix] = float(outside)
    vec = np.zeros((n, 9), np.float32)
    for i in range(n):
        open_t = [targets[j] for j in range(len(targets)) if not found[j]]
        near_t = min(open_t, key=lambda p: np.hypot(*(p - pos[i]))) - pos[i]
        others = [pos[j] for j in range(n) if j != i]
        near_a = min(others, key=lambda p: np.hypot(*(p - pos[i]))) - pos[i]
        vec[i] = [*(2 * pos[i] / env.world_size - 1), 0.0, 0.0,
                  *(near_t / env.world_size), *(near_a / env.world_size), t / env.max_steps]
    return adj, maps, vec


@pytest.mark.parametrize("env_cls", [Discovery, Dispersion])
def test_comm_graph_maps_vec_match_numpy(env_cls):
    env = env_cls(num_agents=6, num_targets=5, comm_radius=0.25, sensor_radius=0.25,
                  map_size=8, max_steps=10) if env_cls is Discovery else env_cls(
        num_agents=6, num_goals=5, comm_radius=0.25, sensor_radius=0.25, map_size=8,
        max_steps=10)
    # dyadic positions: agents 0/1 exactly comm_radius apart, agent 2 at a corner,
    # target 3 found (must not appear), target 4 outside every window but agent 5's.
    pos = np.array([[0.5, 0.5], [0.75, 0.5], [0.03125, 0.96875], [0.5, 0.625],
                    [0.90625, 0.125], [0.1875, 0.3125]])
    targets = np.array([[0.546875, 0.5625], [0.109375, 0.859375], [0.8125, 0.203125],
                        [0.5, 0.53125], [0.0625, 0.15625]])
    found = np.array([False, False, False, True, False])
    state = make_state(pos, targets, found, t=4)
    obs, adj, gstate = jitted_observe(env)(state)
    adj_np, maps_np, vec_np = np_observe(env, pos, targets, found, 4)
    assert adj_np[0, 1] == 1.0  # inclusive radius
    np.testing.assert_array_equal(np.asarray(adj), adj_np)
    np.testing.assert_array_equal(np.asarray(adj), np.asarray(adj).T)
    np.testing.assert_array_equal(np.asarray(obs["maps"]), maps_np)
    np.testing.assert_allclose(np.asarray(obs["vec"]), vec_np, atol=1e-6)
    assert maps_np[:, 0].sum() > 2 and maps_np[:, 1].sum() > 2 and maps_np[2, 2].sum() > 10
    # global state: positions, velocities, targets, found flags, time.
    want = np.concatenate([pos.ravel(), np.zeros(12), targets.ravel(), found, [0.4]])
    np.testing.assert_allclose(np.asarray(gstate), want, atol=1e-6)
    assert gstate.shape == (env.global_state_size,) == (4 * 6 + 3 * 5 + 1,)


def np_sectors(origin, points, sectors, scale):
    """Sector densities by their definition: each point adds 1 / (1 + d / scale) to the
    sector of its angle, sector k covering [-pi + k * 2pi/S, -pi + (k + 1) * 2pi/S)."""
    out = np.zeros(sectors)
    for p in points:
        dx, dy = p - origin
        k = min(int(np.floor((np.arctan2(dy, dx) + np.pi) / (2 * np.pi / sectors))),
                sectors - 1)
        out[k] += 1.0 / (1.0 + np.hypot(dx, dy) / scale)
    return out


@pytest.mark.parametrize("env_cls", [Discovery, Dispersion])
def test_vector_observation_modes_match_numpy(env_cls):
    """``obs_mode="vec"``: no maps, the maps-mode vec followed by the sector densities of
    the open targets and of the other agents (numpy, by definition); ``"both"``: the
    maps of ``"maps"`` and the long vec. The spaces follow the mode."""
    kw = dict(num_agents=6, comm_radius=0.25, sensor_radius=0.25, map_size=8, max_steps=10,
              sectors=4)
    kw["num_targets" if env_cls is Discovery else "num_goals"] = 5
    pos = np.array([[0.5, 0.5], [0.75, 0.5], [0.03125, 0.96875], [0.5, 0.625],
                    [0.90625, 0.125], [0.1875, 0.3125]])
    targets = np.array([[0.546875, 0.5625], [0.109375, 0.859375], [0.8125, 0.203125],
                        [0.5, 0.53125], [0.0625, 0.15625]])
    found = np.array([False, False, False, True, False])
    state = make_state(pos, targets, found, t=4)
    maps_obs = env_cls(**kw).observe(state)
    vec_env, both_env = env_cls(**kw, obs_mode="vec"), env_cls(**kw, obs_mode="both")
    vec, both = vec_env.observe(state), both_env.observe(state)
    assert set(vec) == {"vec"} and set(both) == {"maps", "vec"}
    want = np.stack([np.concatenate([
        np_sectors(pos[i], targets[~found], 4, 0.25),
        np_sectors(pos[i], np.delete(pos, i, axis=0), 4, 0.25)]) for i in range(6)])
    assert (want[:, :4] > 0).sum() >= 12 and (want[:, 4:] > 0).sum() >= 12  # spread out
    np.testing.assert_allclose(np.asarray(vec["vec"][:, :9]), np.asarray(maps_obs["vec"]),
                               atol=1e-7)
    np.testing.assert_allclose(np.asarray(vec["vec"][:, 9:]), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(both["vec"]), np.asarray(vec["vec"]))
    np.testing.assert_array_equal(np.asarray(both["maps"]), np.asarray(maps_obs["maps"]))
    assert vec_env.observation_space["vec"].shape == (9 + 2 * 4,)
    assert set(vec_env.observation_space.spaces) == {"vec"}
    with pytest.raises(ValueError, match="obs_mode"):
        env_cls(obs_mode="pixels")


# --- reference policies beat random --------------------------------------------------


def team_returns(env, greedy_policy):
    """(greedy, random) team return per episode over BATCH common reset keys.

    Reuses the batched reset/step compiled for the trace-count test (a Python loop over
    time here: only the small policy is compiled anew).
    """
    reset, step, _ = batched(env)
    policy = jax.jit(jax.vmap(lambda k, s: greedy_policy(k, env, s)))
    keys = jax.random.split(jax.random.key(11), BATCH)
    rng = np.random.default_rng(0)
    totals = []
    for use_greedy in (True, False):
        _, state = reset(keys)
        total = np.zeros(BATCH)
        for _ in range(env.max_steps):
            if use_greedy:
                acts = policy(keys, state)
            else:
                acts = rng.uniform(-1, 1, (BATCH, env.num_agents, 2)).astype(np.float32)
            _, state, out = step(keys, state, jnp.asarray(acts))
            total += np.asarray(out.team_reward)
        assert bool(np.asarray(out.done).all())
        totals.append(total)
    return totals[0], totals[1]


@pytest.mark.parametrize("env,policy", [(DISC, discovery_greedy), (DISP, dispersion_greedy)],
                         ids=["discovery", "dispersion"])
def test_greedy_beats_random(env, policy):
    greedy, rand = team_returns(env, policy)
    m = env.num_targets if isinstance(env, Discovery) else env.num_goals
    assert greedy.max() <= m and rand.max() <= m  # each target counts at most once
    assert greedy.mean() >= 0.75 * m
    assert greedy.mean() >= rand.mean() + 0.5 * m
    assert (greedy >= rand).all()


# --- scale, render, validation -------------------------------------------------------


@pytest.mark.parametrize("env_cls", [Discovery, Dispersion])
def test_256_agents_reset_and_step(env_cls):
    env = env_cls(num_agents=256)

    @jax.jit
    def go(key):
        obs, state = env.reset(key)
        acts = jax.random.uniform(key, (256, 2), minval=-1.0, maxval=1.0)
        obs, state, out = env.step(key, state, acts)
        return obs, state, out, env.comm_graph(state), env.global_state(state)

    obs, state, out, adj, gstate = go(jax.random.key(0))
    assert obs["maps"].shape == (256, 3, 16, 16) and obs["vec"].shape == (256, 9)
    assert out.skill_rewards.shape == (256, 2) and adj.shape == (256, 256)
    assert gstate.shape == (4 * 256 + 3 * 256 + 1,) and int(state.t) == 1
    adj = np.asarray(adj)
    np.testing.assert_array_equal(adj, adj.T)
    assert (np.diag(adj) == 0).all()
    for leaf in jax.tree.leaves((obs, out.reward, out.skill_rewards, gstate)):
        assert np.isfinite(np.asarray(leaf)).all()
    # the neighbour channel counts exactly the neighbours that fall inside the window
    assert float(obs["maps"][:, 1].sum()) <= adj.sum()


def test_render_marks_discovered_targets_green():
    state = make_state([(0.25, 0.25), (0.3, 0.25), (0.6, 0.6), (0.75, 0.75)], [T0, T1],
                       found=[True, False])
    img = COUPLED.render(state)
    assert img.shape == (256, 256, 3) and img.dtype == np.uint8
    colours = {tuple(c) for c in img.reshape(-1, 3)}
    assert render_mod.DONE_COLOR in colours and render_mod.TARGET_COLOR in colours
    assert render_mod.AGENT_COLOR in colours and render_mod.LINK_COLOR in colours


@pytest.mark.parametrize(
    "make,arg,exc",
    [
        (lambda: Discovery(num_agents=0), "num_agents", ValueError),
        (lambda: Discovery(num_agents=2.5), "num_agents", TypeError),
        (lambda: Discovery(coupling=9), "coupling", ValueError),
        (lambda: Discovery(coupling=0), "coupling", ValueError),
        (lambda: Discovery(num_targets=True), "num_targets", TypeError),
        (lambda: Discovery(capture_radius=-0.1), "capture_radius", ValueError),
        (lambda: Discovery(max_speed=float("nan")), "max_speed", ValueError),
        (lambda: Discovery(comm_radius="far"), "comm_radius", TypeError),
        (lambda: Dispersion(num_goals=0), "num_goals", ValueError),
        (lambda: Dispersion(map_size=2.0), "map_size", TypeError),
        (lambda: Dispersion(huddle_radius=0.6), "huddle_radius", ValueError),
        (lambda: Dispersion(spread_radius=0.0), "spread_radius", ValueError),
        (lambda: Dispersion(max_steps=0), "max_steps", ValueError),
        (lambda: Dispersion(world_size=-1), "world_size", ValueError),
        (lambda: Dispersion(sensor_radius=0), "sensor_radius", ValueError),
    ],
)
def test_bad_constructor_args_name_the_arg(make, arg, exc):
    with pytest.raises(exc, match=arg):
        make()


def test_static_config_and_spaces():
    assert DISC.skill_names == ("approach", "regroup")
    assert DISP.skill_names == ("spread", "reach")
    assert DISC.num_targets == 8 and DISP.num_goals == 8 and DISC.coupling == 2
    assert DISC.observation_space["maps"].shape == (3, 16, 16)
    assert DISP.observation_space["vec"].shape == (9,)
    assert DISP.action_space.shape == (2,)
