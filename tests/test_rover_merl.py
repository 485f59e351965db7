"""RoverMERL against an oracle: MERL's ``RoverDomainVel`` (ShawK91/MERL,
``envs/rover_domain/rover_domain_python.py``, task ``rover_tight``) re-written here in plain
Python, in float64, with MERL's code structure (lists, loops over rovers and POIs,
``math.atan2``, the closest-POI accumulator, the order of ``get_joint_state`` and
``get_local_reward``), fed the env's reset state and the same actions, and compared over
whole episodes. Then the reset regions, the coupling and team reward rules on constructed
states, the argument checks, and the scripted team policy against random actions.

Oracle tolerances (float32 env vs float64 oracle, 50 steps): positions and the heading
accumulator to 1e-4 absolute; the sensor readings ``1 / d^2`` through their distance ``d``,
to 2e-4 absolute (two positions' worth); rewards,
skill rewards and option offsets to 1e-4 absolute; found flags, team reward and the
sensor's empty sectors (-1) exactly. A sensor bracket that the positions' tolerance could
change (an angle within ``1e-3 + degrees(2e-4 / d)`` degrees of a sector boundary) may
differ in float32: those sectors are skipped, and the test asserts they are rare; along an
axis or a diagonal (common between the integer start positions; 45 degrees is a boundary at
``angle_res`` 15) the brackets must agree exactly.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.episode import run_episode, stateless
from envs.rover_merl import RoverMERL, RoverMERLState, poi_ranges, rover_range, team_policy

POS_ATOL = 1e-4
SENSOR_DIST_ATOL = 2 * POS_ATOL  # a reading 1 / d^2 is compared through its d
REWARD_ATOL = 1e-4
ANGLE_EPS = 1e-3  # degrees: float32 angle rounding, on top of the positions' tolerance
DIST_EPS = 1e-4  # a distance this close to act_dist / obs_radius would make the keys bad

DEFAULT = RoverMERL()  # MERL's 8_4
# a smaller, tighter world: 24 sectors, obs_radius cutting some entities off, coupling 2,
# MERL's plain 51-value vector (no option info)
SMALL = RoverMERL(num_agents=4, num_pois=3, coupling=2, max_steps=30, world_size=10,
                  act_dist=2.0, angle_res=15.0, obs_radius=8.0, option_info=False)


# --- the oracle ------------------------------------------------------------------------------
class MerlOracle:
    """MERL's RoverDomainVel for ``env``'s configuration (closest sensor, harvest period 1,
    proximity local reward, ``is_lsg`` off), started from given integer positions."""

    def __init__(self, env: RoverMERL, rover_xy, poi_xy):
        self.n, self.m, self.env = env.num_agents, env.num_pois, env
        self.dim = env.world_size
        self.sectors = int(360 / env.angle_res)
        self.rover_pos = [[float(x), float(y), 0.0] for x, y in rover_xy]
        self.rover_vel = [[0.0, 0.0] for _ in range(self.n)]
        self.poi_pos = [[float(x), float(y)] for x, y in poi_xy]
        self.poi_status = [1 for _ in range(self.m)]  # harvest_period 1
        self.poi_value = [1.0 for _ in range(self.m)]
        self.rover_closest_poi = [self.dim * 2 for _ in range(self.n)]
        self.istep, self.done, self.global_reward = 0, False, None
        self.speed_exceptions = 0  # steps where MERL's speed is not the constant 0.5
        self.skip: list[set] = []  # per observation: (rover, kind, bracket) near a boundary
        self.close_calls: list[float] = []  # |d - act_dist|, |d - obs_radius| seen
        self.angles = self.ambiguous = 0  # bearings computed, of which decided by a hair

    def angle_dist(self, x1, y1, x2, y2):
        v1, v2 = x2 - x1, y2 - y1
        angle = math.degrees(math.atan2(v1, v2))
        if angle < 0:
            angle += 360
        dist = math.sqrt(v1 * v1 + v2 * v2)
        # bookkeeping for the comparison (not MERL): could the env's float32 positions
        # (within POS_ATOL) put this entity in another bracket? Which brackets to skip:
        res, sectors = self.env.angle_res, self.sectors
        r = angle % res
        exact = v1 == 0 or v2 == 0 or abs(v1) == abs(v2)  # axes, diagonals: no rounding
        margin = ANGLE_EPS + math.degrees(2 * POS_ATOL / max(dist, 1e-12))
        bracket = min(int(angle / res), sectors - 1)
        skip = ()
        if not exact and margin >= res / 2:  # two rovers almost on top of each other
            skip = range(sectors)
        elif not exact and min(r, res - r) < margin:
            skip = [(bracket + k) % sectors for k in (-1, 0, 1)]
        self.angles += 1
        self.ambiguous += bool(skip)
        self.close_calls.append(abs(dist - self.env.obs_radius))
        return angle, dist, skip

    def get_joint_state(self):
        res, radius = self.env.angle_res, self.env.obs_radius
        joint, skip = [], set()
        for rover_id in range(self.n):
            sx, sy = self.rover_pos[rover_id][0], self.rover_pos[rover_id][1]
            poi_lists = [[] for _ in range(self.sectors)]
            rover_lists = [[] for _ in range(self.sectors)]
            for loc, status, value in zip(self.poi_pos, self.poi_status, self.poi_value,
                                          strict=True):
                if status == 0:
                    continue
                angle, dist, hair = self.angle_dist(sx, sy, loc[0], loc[1])
                if dist > radius:
                    continue
                bracket = min(int(angle / res), self.sectors - 1)
                skip |= {(rover_id, "poi", k) for k in hair}
                if dist == 0:
                    dist = 0.001
                poi_lists[bracket].append(value / (dist * dist))
                if dist < self.rover_closest_poi[rover_id]:
                    self.rover_closest_poi[rover_id] = dist
            for other, loc in enumerate(self.rover_pos):
                if other == rover_id:
                    continue
                angle, dist, hair = self.angle_dist(sx, sy, loc[0], loc[1])
                if dist > radius:
                    continue
                if dist == 0:
                    dist = 0.001
                bracket = min(int(angle / res), self.sectors - 1)
                skip |= {(rover_id, "rover", k) for k in hair}
                rover_lists[bracket].append(1 / (dist * dist))
            rover_state = [max(b) if b else -1.0 for b in rover_lists]
            poi_state = [max(b) if b else -1.0 for b in poi_lists]
            joint.append([rover_id] + rover_state + poi_state + self.rover_vel[rover_id])
        self.skip.append(skip)
        return joint

    def get_local_reward(self):
        visitors = [[] for _ in range(self.m)]
        for i, loc in enumerate(self.poi_pos):
            if self.poi_status[i] == 0:
                continue
            for rover_id in range(self.n):
                x1 = loc[0] - self.rover_pos[rover_id][0]
                y1 = loc[1] - self.rover_pos[rover_id][1]
                dist = math.sqrt(x1 * x1 + y1 * y1)
                self.close_calls.append(abs(dist - self.env.act_dist))
                if dist <= self.env.act_dist:
                    visitors[i].append(rover_id)
        for poi_id, rovers in enumerate(visitors):
            if len(rovers) >= self.env.coupling:
                self.poi_status[poi_id] -= 1
        rewards = [0.0 for _ in range(self.n)]
        for i in range(self.n):
            rewards[i] += min(1.0, self.env.act_dist / self.rover_closest_poi[i])
        self.rover_closest_poi = [self.dim * 2 for _ in range(self.n)]
        return rewards

    def skill_rewards(self):
        """The env's per-POI channel (not MERL's): proximity while unobserved, else 0."""
        out = [[0.0] * self.m for _ in range(self.n)]
        for i in range(self.n):
            for k, loc in enumerate(self.poi_pos):
                if self.poi_status[k] == 0:
                    continue
                d = math.hypot(loc[0] - self.rover_pos[i][0], loc[1] - self.rover_pos[i][1])
                out[i][k] = min(1.0, self.env.act_dist / (d if d > 0 else 0.001))
        return out

    def option_info(self):
        """The env's option block (not MERL's): per POI offset / dim and observed flag."""
        out = []
        for r in self.rover_pos:
            row = []
            for p, status in zip(self.poi_pos, self.poi_status, strict=True):
                row += [(p[0] - r[0]) / self.dim, (p[1] - r[1]) / self.dim, float(status == 0)]
            out.append(row)
        return out

    def reset(self):
        return self.get_joint_state()

    def step(self, joint_action):
        self.istep += 1
        joint_action = [[min(1.0, max(-1.0, float(v))) for v in a] for a in joint_action]
        for rover_id in range(self.n):
            vel, pos, action = self.rover_vel[rover_id], self.rover_pos[rover_id], \
                joint_action[rover_id]
            vel[0] += 0.5 * (action[0] + 1)
            action[1] /= 2.0
            vel[1] += action[1]
            if vel[0] < 0:
                vel[0] = 0.0
            elif vel[0] > 1:
                vel[0] = 1.0
            if vel[1] < 0.5:
                vel[0] = 0.5
            elif vel[1] > 0.5:
                vel[0] = 0.5
            else:
                self.speed_exceptions += 1
            theta = vel[1] * 180 + pos[2]
            if theta > 360:
                theta -= 360
            elif theta < 0:
                theta += 360
            pos[0] += vel[0] * math.cos(math.radians(theta))
            pos[1] += vel[0] * math.sin(math.radians(theta))
        # MERL's done and global reward, computed before the status update; after an early
        # done MERL answers with dummy transitions, the env (fixed-length episodes) goes
        # on, and so does the oracle, keeping the global reward MERL reported
        done = self.istep >= self.env.max_steps or sum(self.poi_status) == 0
        if done and not self.done:
            self.done = True
            self.global_reward = sum((s == 0) * v for s, v in
                                     zip(self.poi_status, self.poi_value, strict=True)) \
                / sum(self.poi_value)
        skills = self.skill_rewards()
        obs = self.get_joint_state()
        rewards = self.get_local_reward()
        return obs, rewards, skills


def steering_actions(oracle: MerlOracle, rng: np.random.Generator) -> np.ndarray:
    """Teams of ``coupling`` rovers steer for the unobserved POIs (with noise), so that the
    coupling is met now and then. |a[1]| < 1, so the accumulator never hits 0.5 exactly."""
    env, out = oracle.env, []
    open_ = [k for k in range(oracle.m) if oracle.poi_status[k] != 0] or [0]
    for i in range(oracle.n):
        team = min(i // env.coupling, max(env.num_agents // env.coupling, 1) - 1)
        goal = oracle.poi_pos[open_[team % len(open_)]]
        pos, b = oracle.rover_pos[i], oracle.rover_vel[i][1]
        turn = math.degrees(math.atan2(goal[1] - pos[1], goal[0] - pos[0])) - b * 180
        turn = (turn + 180) % 360 - 180
        a1 = min(0.9, max(-0.9, turn / 90)) + rng.uniform(-0.05, 0.05)
        out.append([rng.uniform(-1, 1), a1])
    return np.asarray(out, np.float32)


def oracle_episode(env: RoverMERL, rover_xy, poi_xy, actions=None, seed=0):
    """Run the oracle for a whole episode; ``actions`` None: steering. Returns the actions
    and per step the observations (MERL's + option info), rewards, skills, found, the
    positions and heading accumulators, and the oracle (its global reward, bookkeeping)."""
    oracle, rng = MerlOracle(env, rover_xy, poi_xy), np.random.default_rng(seed)
    rec = {"obs": [], "reward": [], "skills": [], "found": [], "pos": [], "heading": []}

    def obs_of(merl_obs):
        if env.option_info:
            return [o + extra for o, extra in zip(merl_obs, oracle.option_info(), strict=True)]
        return merl_obs

    rec["obs"].append(obs_of(oracle.reset()))
    taken = []
    for t in range(env.max_steps):
        a = steering_actions(oracle, rng) if actions is None else actions[t]
        taken.append(a)
        obs, rewards, skills = oracle.step(a)
        rec["obs"].append(obs_of(obs))
        rec["reward"].append(rewards)
        rec["skills"].append(skills)
        rec["found"].append([s == 0 for s in oracle.poi_status])
        rec["pos"].append([p[:2] for p in oracle.rover_pos])
        rec["heading"].append([v[1] for v in oracle.rover_vel])
    return np.asarray(taken, np.float32), {k: np.asarray(v, np.float64) for k, v in
                                           rec.items()}, oracle


# --- the env's side: one compiled reset and one compiled episode per configuration ----------
@functools.cache
def resets(env: RoverMERL, count: int = 512):
    """``count`` resets (one compiled program per env; the oracle takes the first few)."""
    keys = jax.random.split(jax.random.key(2020), count)
    return jax.device_get(jax.jit(jax.vmap(env.reset))(keys))


@functools.cache
def episode_fn(env: RoverMERL):
    def play(state, actions):
        def body(s, a):
            obs, s, out = env.step(jax.random.key(0), s, a)
            return s, (obs, s, out)
        return jax.lax.scan(body, state, actions)[1]
    return jax.jit(jax.vmap(play))


def compare_sensors(env, got, want, skip, where):
    """MERL's sensor blocks of one episode's observations ``[T + 1, N, D]``: empty sectors
    (-1) exactly, readings ``1 / d^2`` through the distance they encode, ``d`` to
    SENSOR_DIST_ATOL (two rovers 1e-4 apart read 1e8, so a relative tolerance on the
    reading would not do); brackets decided by a hair (``skip[t]``) left out. Reports the
    first step, rover and sector that differ."""
    s = env.sectors
    got, want = got[..., 1:1 + 2 * s], want[..., 1:1 + 2 * s]
    keep = np.ones(got.shape, bool)
    for t, hairs in enumerate(skip):
        for i, kind, k in hairs:
            keep[t, i, k + (s if kind == "poi" else 0)] = False
    dist = [1 / np.sqrt(np.maximum(x, 1e-30)) for x in (np.float64(got), want)]
    ok = ((got == -1.0) == (want == -1.0)) & (np.abs(dist[0] - dist[1]) <= SENSOR_DIST_ATOL)
    bad = np.argwhere(~ok & keep)
    if len(bad):
        t, i, k = bad[0]
        kind, sector = ("rover", k) if k < s else ("poi", k - s)
        raise AssertionError(f"{where}: step {t} rover {i} {kind} sector {sector}: env "
                             f"{got[t, i, k]} vs MERL {want[t, i, k]} ({len(bad)} differ)")


@pytest.mark.parametrize("env, sources", [(DEFAULT, ("random", "random", "steer", "steer")),
                                          (SMALL, ("random", "steer", "steer", "steer"))],
                         ids=["8_4", "small"])
def test_whole_episodes_match_the_merl_oracle(env, sources):
    obs0, state0 = jax.tree.map(lambda x: x[:len(sources)], resets(env))
    rng = np.random.default_rng(7)
    runs = []
    for b, source in enumerate(sources):
        rover_xy, poi_xy = state0.pos[b], state0.targets[b]
        actions = (rng.uniform(-1, 1, (env.max_steps, env.num_agents, 2)).astype(np.float32)
                   if source == "random" else None)
        runs.append(oracle_episode(env, rover_xy, poi_xy, actions, seed=b))
    obs, states, outs = jax.device_get(episode_fn(env)(
        state0, jnp.asarray(np.stack([r[0] for r in runs]))))
    m, d = env.num_pois, 1 + 2 * env.sectors + 2
    assert obs["vec"].shape[-1] == d + (3 * m if env.option_info else 0)
    angles = ambiguous = 0
    for b, (_, want, oracle) in enumerate(runs):
        assert oracle.speed_exceptions == 0
        assert min(oracle.close_calls) > DIST_EPS, "a distance sits on act_dist/obs_radius"
        angles, ambiguous = angles + oracle.angles, ambiguous + oracle.ambiguous
        where = f"{sources[b]} episode {b}"
        np.testing.assert_allclose(states.pos[b], want["pos"], atol=POS_ATOL,
                                   err_msg=f"{where}: positions")
        np.testing.assert_allclose(states.heading[b], want["heading"], atol=POS_ATOL)
        np.testing.assert_array_equal(states.found[b], want["found"], err_msg=f"{where} found")
        np.testing.assert_allclose(outs.reward[b], want["reward"], atol=REWARD_ATOL,
                                   err_msg=f"{where}: local reward")
        np.testing.assert_allclose(outs.skill_rewards[b], want["skills"], atol=REWARD_ATOL,
                                   err_msg=f"{where}: skill rewards")
        team = np.zeros(env.max_steps)
        team[-1] = oracle.global_reward
        np.testing.assert_array_equal(outs.team_reward[b], team.astype(np.float32))
        # the reset's observation, then each step's
        got, ref = np.concatenate([obs0["vec"][b][None], obs["vec"][b]]), want["obs"]
        np.testing.assert_array_equal(got[..., 0], ref[..., 0], err_msg=f"{where}: rover id")
        compare_sensors(env, got, ref, oracle.skip, where)
        np.testing.assert_allclose(got[..., d - 2:d], ref[..., d - 2:d], atol=POS_ATOL,
                                   err_msg=f"{where}: speed, accumulator")
        np.testing.assert_allclose(got[..., d:], ref[..., d:], atol=REWARD_ATOL,
                                   err_msg=f"{where}: option info")
    assert ambiguous <= 0.01 * angles  # skipped brackets are rare (measured: 0.13%)
    if env is SMALL:  # the steering episodes do meet the coupling
        assert states.found[1:, -1].any(), "no POI observed: the oracle checks too little"


# --- reset regions ---------------------------------------------------------------------------
def test_reset_draws_merl_integer_regions():
    obs, s = resets(DEFAULT)
    pos, pois = s.pos, s.targets
    assert np.array_equal(pos, np.round(pos)) and np.array_equal(pois, np.round(pois))
    assert rover_range(20) == (7, 13)
    assert set(np.unique(pos)) == set(range(7, 14))  # every value of the range, no other
    r = poi_ranges(20)
    assert r == {"left": (0, 3), "right": (15, 19), "middle": (4, 14), "lower": (0, 3),
                 "upper": (15, 19)}
    for i, (xs, ys) in enumerate([(range(0, 4), range(0, 20)), (range(15, 20), range(0, 20)),
                                  (range(4, 15), [*range(0, 4), *range(15, 20)]),
                                  (range(0, 4), range(0, 20))]):
        assert set(np.unique(pois[:, i, 0])) == set(xs), f"POI {i} x"
        assert set(np.unique(pois[:, i, 1])) == set(ys), f"POI {i} y"
    lower = np.mean(pois[:, 2, 1] <= 3)
    assert 0.4 < lower < 0.6  # MERL's coin between the bands
    assert not s.found.any() and not s.heading.any() and not s.t.any()
    vec = obs["vec"]
    assert vec.shape == (512, 8, 75 + 12)
    np.testing.assert_array_equal(vec[..., 0], np.broadcast_to(np.arange(8), (512, 8)))
    np.testing.assert_array_equal(vec[..., 73:75], 0.0)  # speed and accumulator start at 0


# --- coupling and team reward on constructed states ------------------------------------------
ENV = RoverMERL(num_agents=4, num_pois=2, coupling=3, max_steps=3)
POIS = np.array([[5.0, 10.0], [15.0, 10.0]], np.float32)
STEP = jax.jit(ENV.step)


def state(pos, found=(False, False), t=0):
    """Rovers that, with heading 0 and no turn, land 0.5 to the right of ``pos``."""
    pos = jnp.asarray(pos, jnp.float32)
    return RoverMERLState(pos=pos, heading=jnp.zeros(4, jnp.float32),
                          targets=jnp.asarray(POIS), found=jnp.asarray(found),
                          sensed_found=jnp.asarray(found), t=jnp.asarray(t, jnp.int32))


STRAIGHT = jnp.zeros((4, 2))
FAR = [10.0, 1.0]


def test_coupling_minus_one_rovers_do_not_observe_coupling_rovers_do():
    """Two rovers (coupling 3) at POI 0: not observed. A third exactly at act_dist after
    its move (7.5 + 0.5 = 8 = 5 + 3): observed, and it stays observed."""
    s = state([[4.5, 10.0], [4.5, 11.0], FAR, FAR])
    _, s, out = STEP(jax.random.key(0), s, STRAIGHT)
    assert not s.found.any() and float(out.team_reward) == 0.0
    s = state([[4.5, 10.0], [4.5, 11.0], [7.5, 10.0], FAR], t=1)
    obs, s, out = STEP(jax.random.key(0), s, STRAIGHT)
    np.testing.assert_array_equal(np.asarray(s.found), [True, False])
    assert float(out.metrics["observed_frac"]) == 0.5
    np.testing.assert_array_equal(np.asarray(ENV.skill_done(s)), [[True, False]] * 4)
    # the step's obs still senses POI 0 (MERL builds it before the status update)...
    assert (obs["vec"][:, 1 + 36:1 + 72] > 0).sum() == 8
    obs, s, out = STEP(jax.random.key(0), s, STRAIGHT)  # last step
    assert bool(out.done) and float(out.team_reward) == 0.5
    assert (obs["vec"][:, 1 + 36:1 + 72] > 0).sum() == 4  # ... and one step later not
    np.testing.assert_array_equal(np.asarray(out.skill_rewards[:, 0]), 0.0)



def test_option_obs_is_each_pois_offset_in_the_rovers_frame():
    """``OPTION_OBS`` [N, M, 3]: per POI, the offset rotated into the rover's heading
    ((ahead, left) / world_size; heading = b * 180 degrees, b reduced to [-1, 1]) and the
    observed flag; with ``option_info=False`` the observation is MERL's vec alone."""
    from envs.base import OPTION_OBS

    pos = np.array([[4.5, 10.0], [10.0, 10.0], [15.0, 13.0], [1.0, 1.0]], np.float32)
    b = np.array([0.0, 0.5, -1.0, 2.25], np.float32)  # east, north, west, 2.25 = 0.25: NE
    s = state(pos, found=(True, False))
    s = RoverMERLState(pos=s.pos, heading=jnp.asarray(b), targets=s.targets, found=s.found,
                       sensed_found=s.sensed_found, t=s.t)
    got = np.asarray(ENV.observe(s)[OPTION_OBS])
    th = np.pi * np.array([0.0, 0.5, -1.0, 0.25])
    rel = POIS[None] - pos[:, None]  # [N, M, 2]
    ahead = rel[..., 0] * np.cos(th)[:, None] + rel[..., 1] * np.sin(th)[:, None]
    left = rel[..., 1] * np.cos(th)[:, None] - rel[..., 0] * np.sin(th)[:, None]
    want = np.concatenate([np.stack([ahead, left], -1) / 20.0,
                           np.broadcast_to([[[1.0], [0.0]]], (4, 2, 1))], -1)
    assert got.shape == (4, 2, 3)
    np.testing.assert_allclose(got, want, atol=1e-6)
    # rover 1 faces north at (10, 10): POI 1 (15, 10) is 5 to its right, none ahead
    np.testing.assert_allclose(got[1, 1, :2], [0.0, -0.25], atol=1e-6)
    bare = RoverMERL(num_agents=4, num_pois=2, coupling=3, max_steps=3, option_info=False)
    assert set(bare.observe(s)) == {"vec"} and set(bare.observation_space.spaces) == {"vec"}
    # selector_info: the selector's own input, the id one-hot then every POI's flag
    from envs.base import SELECTOR_OBS

    sel = RoverMERL(num_agents=4, num_pois=2, coupling=3, max_steps=3, selector_info=True)
    own = np.asarray(sel.observe(s)[SELECTOR_OBS])
    np.testing.assert_array_equal(own, [[1, 0, 0, 0, 1, 0], [0, 1, 0, 0, 1, 0],
                                        [0, 0, 1, 0, 1, 0], [0, 0, 0, 1, 1, 0]])
    assert sel.observation_space[SELECTOR_OBS].shape == (6,)
    assert SELECTOR_OBS not in ENV.observe(s)  # off by default
    with pytest.raises(TypeError, match="selector_info"):
        RoverMERL(selector_info="yes")


def test_a_poi_first_observed_at_the_last_step_does_not_count():
    """MERL computes the global reward before the last step's status update."""
    s = state([[4.5, 10.0], [4.5, 11.0], [4.5, 9.0], FAR], t=2)
    _, s, out = STEP(jax.random.key(0), s, STRAIGHT)
    assert bool(out.done) and bool(s.found[0])
    assert float(out.team_reward) == 0.0 and float(out.metrics["observed_frac"]) == 0.5


def test_first_step_local_reward_remembers_the_reset_distance():
    """Rover 0 starts 4 from POI 0 and moves away to 4.5: MERL's closest-POI accumulator
    still holds 4 (filled by reset), so the reward is 3/4; one step later 3/5."""
    s = state([[9.0, 10.0], FAR, FAR, FAR])
    _, s, out = STEP(jax.random.key(0), s, STRAIGHT)
    assert float(out.reward[0]) == pytest.approx(0.75)
    assert float(out.skill_rewards[0, 0]) == pytest.approx(3 / 4.5)
    _, s, out = STEP(jax.random.key(0), s, STRAIGHT)
    assert float(out.reward[0]) == pytest.approx(0.6)


# --- arguments -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, match", [
    (dict(coupling=9), "coupling must be <= num_agents"), (dict(num_agents=0), "num_agents"),
    (dict(num_pois=0), "num_pois"), (dict(max_steps=0), "max_steps"),
    (dict(world_size=0), "world_size"), (dict(world_size=8), "no room for MERL's POI"),
    (dict(world_size=20.5), "world_size must be an int"), (dict(act_dist=0.0), "act_dist"),
    (dict(angle_res=0), "angle_res"), (dict(angle_res=400), "angle_res must be <= 360"),
    (dict(obs_radius=-1.0), "obs_radius"), (dict(speed=0.0), "speed"),
    (dict(option_info=1), "option_info")])
def test_bad_arguments_name_the_argument(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        RoverMERL(**bad)


# --- reference policy ------------------------------------------------------------------------
def test_scripted_team_policy_observes_pois_random_does_not():
    """32 held-out episodes of MERL's 8_4: the hand-coded team steering observes most POIs,
    uniform random actions none (measured: 0.86 vs 0.00). The random episodes reuse the
    oracle test's compiled program (4 episodes of given actions per call)."""
    keys = jax.random.split(jax.random.key(123_456), 32)
    team = float(jax.jit(jax.vmap(lambda k: run_episode(
        k, DEFAULT, stateless(team_policy, DEFAULT)).team_return))(keys).mean())
    _, state0 = jax.tree.map(lambda x: x[:4], resets(DEFAULT))
    rng, rand = np.random.default_rng(0), []
    for _ in range(8):
        actions = rng.uniform(-1, 1, (4, DEFAULT.max_steps, DEFAULT.num_agents, 2))
        outs = episode_fn(DEFAULT)(state0, jnp.asarray(actions, jnp.float32))[2]
        rand.append(np.asarray(outs.team_reward).sum(-1))
    rand = float(np.mean(rand))
    assert team >= 0.7 and rand <= 0.1, (team, rand)
