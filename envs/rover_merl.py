"""RoverMERL: MERL's own rover domain (Majumdar, Khadka et al., ICML 2020), step for step.

A re-implementation in pure JAX of ``RoverDomainVel`` (ShawK91/MERL,
``envs/rover_domain/rover_domain_python.py``) with its ``rover_tight`` task, so that numbers
trained here compare with the paper's. The defaults are MERL's ``8_4`` configuration (20 x
20 world, 8 rovers, 4 POIs, coupling 4, ``act_dist`` 3, ``angle_res`` 10 -> 36 sectors,
``obs_radius`` 200 = 10 x ``dim_x``: everything visible, the closest sensor, 50 steps,
random POIs, harvest period 1); ``num_agents=12, coupling=6`` is its ``12_6``.
:class:`envs.rover.Rover` is this project's own variant of the task (walls, a velocity
action, band-shaped POI regions); this one keeps MERL's quirks, listed below, because they
shape what a learner sees.

Why it matters for the feudal split: a POI is *observed* only when ``coupling`` rovers are
within ``act_dist`` of it at once, and the team reward pays only the observed fraction at
the end; the dense local reward (proximity to the nearest unobserved POI) never pays for
being together. Which rovers go to which POI is the selector's choice; its options are the
POIs (skill ``poi_k``, with :meth:`RoverMERL.skill_done` saying when option k's goal is met).
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from envs import _swarm
from envs.base import (
    OPTION_OBS,
    SELECTOR_OBS,
    EnvOut,
    Obs,
    SwarmEnv,
    check_positive_float,
    check_positive_int,
)
from envs.render import AGENT_COLOR, DONE_COLOR, LINK_COLOR, TARGET_COLOR, draw_swarm
from envs.rover import team_of
from envs.validate import check_bool

#: Distance MERL substitutes for an entity exactly on top of the rover (``dist == 0``).
ZERO_DIST = 0.001


class RoverMERLState(eqx.Module):
    """State of a RoverMERL episode. ``pos``, ``targets``, ``found`` and ``t`` mean what they
    mean in :class:`envs._swarm.SwarmState` (the render and metric helpers read them)."""

    pos: jax.Array  # [N, 2] float32 rover positions (may leave the world square)
    heading: jax.Array  # [N] float32 MERL's bearing accumulator b (heading = b * 180 deg)
    targets: jax.Array  # [M, 2] float32 POI positions (integers)
    found: jax.Array  # [M] bool, observed (coupling met) at some step so far
    sensed_found: jax.Array  # [M] bool, ``found`` before the latest step's update: the POI
    # statuses MERL's sensors (and its local reward) used at that step
    t: jax.Array  # [] int32, steps taken in this episode


def poi_ranges(world_size: int) -> dict[str, tuple[int, int]]:
    """MERL's POI regions for a ``world_size`` (``dim_x``) world, as inclusive integer
    ranges ``{"left", "right", "middle", "lower", "upper"}`` (``start = 0``, ``end = dim -
    1``, ``center = int(end / 2)``, ``rad = int(dim / (2 sqrt(10))) + 2``): POI ``i`` with
    ``i % 3 == 0`` has x in ``left = [0, center - rad - 1]`` and y in ``[0, end]``; ``1``: x
    in ``right = [center + rad + 1, end]``, y in ``[0, end]``; ``2``: x in ``middle =
    [center - rad, center + rad]`` and y in ``lower`` (= ``left``) or ``upper`` (= ``right``)
    with probability 1/2 each. For 20: left [0, 3], right [15, 19], middle [4, 14]."""
    start, end = 0, world_size - 1
    rad = int(world_size / (2 * math.sqrt(10))) + 2
    center = int((start + end) / 2.0)
    left, right = (start, center - rad - 1), (center + rad + 1, end)
    return {"left": left, "right": right, "middle": (center - rad, center + rad),
            "lower": left, "upper": right}


def rover_range(world_size: int) -> tuple[int, int]:
    """MERL's rover start square (inclusive integer range per coordinate): the central
    ~10% of the world, ``center +- int(dim / (2 sqrt(10)))`` with ``center = int(dim / 2)``."""
    rad = int(world_size / (2 * math.sqrt(10)))
    center = int((1.0 + world_size - 1.0) / 2.0)
    return center - rad, center + rad


def sector_index(rel: jax.Array, angle_res: float, sectors: int) -> jax.Array:
    """MERL's sensor bracket of each offset ``rel [..., 2]``: ``int(angle / angle_res)``,
    ``angle = degrees(arctan2(dx, dy))`` (x first: 0 = +y, 90 = +x, clockwise) plus 360
    when negative, clipped to ``sectors - 1``; ``(0, 0)`` is angle 0, as ``arctan2(0, 0)``.

    Computed per quadrant (an exact multiple of 90 plus an angle in ``[0, 90]``, exactly 45
    on a diagonal), so that offsets along an axis or a diagonal, common between the integer
    start positions, land exactly on their bracket in float32, as they do in MERL's float64
    arithmetic (with ``angle_res`` 15, 45 degrees is a sector boundary).
    """
    dx, dy = rel[..., 0], rel[..., 1]
    q1 = (dx > 0) & (dy <= 0)
    q2 = (dx <= 0) & (dy < 0)
    q3 = (dx < 0) & (dy >= 0)
    a = jnp.select([q1, q2, q3], [-dy, -dx, dy], dx)  # both >= 0 in every quadrant
    b = jnp.select([q1, q2, q3], [dx, -dy, -dx], dy)
    quadrant = jnp.select([q1, q2, q3], [1.0, 2.0, 3.0], 0.0)
    phi = jnp.where((a == b) & (a > 0), 45.0, jnp.degrees(jnp.arctan2(a, b)))
    angle = 90.0 * quadrant + phi
    bracket = jnp.floor(angle / angle_res).astype(jnp.int32)
    return jnp.clip(bracket, 0, sectors - 1)


def closest_sensor(rel: jax.Array, valid: jax.Array, angle_res: float,
                   sectors: int) -> jax.Array:
    """MERL's ``closest`` sensor: ``rel [N, E, 2]`` offsets -> ``[N, sectors]``, per sector
    the largest ``1 / d^2`` of its valid entities (``d = 0`` counts as ``0.001``), ``-1``
    where the sector holds none (every entity's value is 1: POI values and rovers alike)."""
    d = jnp.sqrt(jnp.sum(jnp.square(rel), axis=-1))
    d = jnp.where(d == 0, ZERO_DIST, d)
    value = 1.0 / (d * d)
    hit = (sector_index(rel, angle_res, sectors)[..., None] == jnp.arange(sectors)) & valid[
        ..., None]
    return jnp.max(jnp.where(hit, value[..., None], -1.0), axis=-2)


class RoverMERL(SwarmEnv):
    """MERL's rover domain (``RoverDomainVel``, task ``rover_tight``), pure JAX.

    State: :class:`RoverMERLState`. Reset: rover coordinates uniform integers in
    :func:`rover_range` (the central ~10%), heading accumulator 0; POI coordinates uniform
    integers in the regions of :func:`poi_ranges` by ``i % 3`` (left, right, top or bottom
    band); nothing observed. MERL's fixed POI layout (``poi_rand=0``) is not offered.

    Action (per rover), ``[-1, 1]^2``, clipped: ``a[1]`` steers, the bearing accumulator
    ``b += a[1] / 2`` (unbounded), heading ``theta = b * 180`` degrees (so at most +-90
    degrees of turn per step), and the rover moves ``speed * (cos theta, sin theta)``.
    ``a[0]`` has no effect: MERL's speed update ends with ``if b < 0.5: v = 0.5 elif b >
    0.5: v = 0.5``, which sets the speed to a constant 0.5 whatever ``a[0]`` asked for, and
    that constant (``speed``) is what is reproduced. (When ``b`` is *exactly* 0.5, e.g.
    after a first step with ``a[1] = +1``, MERL keeps its accumulated speed ``clip(v +
    (a[0] + 1) / 2, 0, 1)`` instead; this env does not.) No walls: rovers may leave the
    world square, as in MERL.

    Observation (per rover), float32 ``obs["vec"]``, MERL's 75 values (for 36 sectors)
    ``[rover_id] + rovers[sectors] + POIs[sectors] + [speed, b]``: the raw index, then the
    closest-sensor readings (:func:`closest_sensor`) of the other rovers and of the
    unobserved POIs within ``obs_radius``, then the rover's speed (0 before its first step,
    as MERL's ``rover_vel`` starts at 0) and bearing accumulator. As in MERL (which builds
    the observation before it updates the POIs' statuses), the POI sensor still shows a POI
    observed at the step just taken; it disappears one step later (``sensed_found``).
    With ``option_info`` (default), ``3 * num_pois`` values follow: per POI ``k`` in index
    order ``(dx_k, dy_k) / world_size`` (the POI's offset from the rover) and its observed
    flag (``found``, up to date), and ``obs[OPTION_OBS]`` ``[N, num_pois, 3]`` gives per POI
    what its option "go to POI k" needs: the offset in the rover's own frame (ahead, left)
    / world_size and the observed flag (the executor holding option k reads row k; a
    steering rover needs the bearing relative to its heading, which the world-frame offsets
    and MERL's unbounded bearing accumulator give only through a periodic function). Without
    ``option_info`` the observation is exactly MERL's ``{"vec": 75 values}``. With
    ``selector_info`` (off by default), ``obs[SELECTOR_OBS]`` ``[N, N + num_pois]`` is the
    selector's own input: the rover's id one-hot and every POI's observed flag (who I am,
    what is left), which no gradient update of the executor's embedding moves
    (``ActorConfig.selector_input``).

    Coupling: POI ``k`` becomes observed, for good, at a step when at least ``coupling``
    rovers are within ``act_dist`` of it (inclusive) after they moved.

    Rewards (``EnvOut``):
      - ``reward[i]``: MERL's proximity local reward ``min(1, act_dist / d_i)``, ``d_i`` the
        distance to rover i's closest POI among those unobserved before this step's
        coupling update and within ``obs_radius``, capped at ``2 * world_size`` (MERL's
        initial value; also what it is when none remains). On the first step MERL's
        running minimum still holds the distances at the reset positions (``reset`` fills
        it, only ``step`` clears it), so there ``d_i`` is the smaller of the two.
      - ``skill_rewards[:, k]`` (``"poi_k"``): ``min(1, act_dist / d_ik)`` while POI k was
        unobserved before this step, 0 once it is (the option's goal is met).
      - ``team_reward``: 0 until the last step, then MERL's global reward, the fraction of
        POIs observed *before* the last step's coupling update (MERL computes it before it
        updates the statuses, so a POI first observed at the very last step does not count;
        ``metrics["observed_frac"]`` does count it).

    Episodes last ``max_steps`` steps; the env never resets itself. MERL ends an episode
    early once every POI is observed (its later transitions are dummies with zero reward);
    the team reward is the same here (1 at the last step), while the local reward goes on
    paying ``act_dist / (2 * world_size)`` per step after the last POI.

    ``comm_graph`` links rovers within ``comm_radius`` (default ``obs_radius``: MERL's
    rovers sense every other rover, so the graph is complete in practice).
    """

    num_agents: int = eqx.field(static=True)
    num_pois: int = eqx.field(static=True)
    coupling: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    world_size: int = eqx.field(static=True)
    act_dist: float = eqx.field(static=True)
    angle_res: float = eqx.field(static=True)
    sectors: int = eqx.field(static=True)
    obs_radius: float = eqx.field(static=True)
    speed: float = eqx.field(static=True)
    comm_radius: float = eqx.field(static=True)
    option_info: bool = eqx.field(static=True)
    selector_info: bool = eqx.field(static=True)
    skill_names: tuple[str, ...] = eqx.field(static=True)
    metric_better: ClassVar[dict[str, str]] = {"observed_frac": "higher"}
    render_legend: ClassVar[tuple[tuple[str, tuple[int, int, int]], ...]] = (
        ("rovers", AGENT_COLOR), ("comm links", LINK_COLOR), ("POIs", TARGET_COLOR),
        ("observed (coupling met)", DONE_COLOR))

    def __init__(
        self,
        num_agents: int = 8,
        num_pois: int = 4,
        coupling: int = 4,
        max_steps: int = 50,
        world_size: int = 20,
        act_dist: float = 3.0,
        angle_res: float = 10.0,
        obs_radius: float | None = None,
        speed: float = 0.5,
        comm_radius: float | None = None,
        option_info: bool = True,
        selector_info: bool = False,
    ):
        """MERL's names: ``num_poi``, ``ep_len`` (``max_steps``), ``dim_x`` (``world_size``,
        an int); ``obs_radius`` defaults to ``10 * world_size`` (MERL's), ``comm_radius``
        to ``obs_radius``. ``coupling`` must be <= ``num_agents``; the world must leave
        room for MERL's POI regions (``world_size >= 9``)."""
        self.num_agents = check_positive_int("num_agents", num_agents)
        self.num_pois = check_positive_int("num_pois", num_pois)
        self.coupling = check_positive_int("coupling", coupling)
        if self.coupling > self.num_agents:
            raise ValueError(f"coupling must be <= num_agents ({self.num_agents}), got "
                             f"{self.coupling}: no POI could ever be observed")
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.world_size = check_positive_int("world_size", world_size)
        left, right = (poi_ranges(self.world_size)[k] for k in ("left", "right"))
        if left[1] < left[0] or right[1] < right[0]:
            raise ValueError(f"world_size {self.world_size} leaves no room for MERL's POI "
                             f"regions (x in {list(left)} or {list(right)}); use >= 9")
        self.act_dist = check_positive_float("act_dist", act_dist)
        self.angle_res = check_positive_float("angle_res", angle_res)
        if self.angle_res > 360:
            raise ValueError(f"angle_res must be <= 360 (degrees per sector), got {angle_res}")
        self.sectors = int(360 / self.angle_res)
        self.obs_radius = check_positive_float(
            "obs_radius", 10.0 * self.world_size if obs_radius is None else obs_radius)
        self.speed = check_positive_float("speed", speed)
        self.comm_radius = check_positive_float(
            "comm_radius", self.obs_radius if comm_radius is None else comm_radius)
        self.option_info = check_bool("option_info", option_info)
        self.selector_info = check_bool("selector_info", selector_info)
        self.skill_names = tuple(f"poi_{k}" for k in range(self.num_pois))

    # --- core ----------------------------------------------------------------------
    def reset(self, key: jax.Array) -> tuple[Obs, RoverMERLState]:
        """Integer rover and POI coordinates in MERL's regions; heading 0; t = 0."""
        n, m = self.num_agents, self.num_pois
        lo, hi = rover_range(self.world_size)
        r, end = poi_ranges(self.world_size), self.world_size - 1
        group = np.arange(m) % 3
        x_lo = np.select([group == 0, group == 1], [r["left"][0], r["right"][0]], r["middle"][0])
        x_hi = np.select([group == 0, group == 1], [r["left"][1], r["right"][1]], r["middle"][1])
        y_lo = np.where(group == 2, r["lower"][0], 0)
        y_hi = np.where(group == 2, r["lower"][1], end)
        ones = np.ones(m, int)
        # one draw (fewer random ops to compile): rover coordinates, POI x, POI y (the
        # lower band for i % 3 == 2), the upper band's y and MERL's coin between the bands
        bounds = np.concatenate([np.full((2, 2 * n), [[lo], [hi]]),
                                 [x_lo, x_hi], [y_lo, y_hi], [r["upper"][0] * ones,
                                                              r["upper"][1] * ones],
                                 [0 * ones, ones]], axis=1)
        draw = jax.random.randint(key, (2 * n + 4 * m,), bounds[0], bounds[1] + 1)
        pos = draw[:2 * n].reshape(n, 2)
        x, y, y_upper, coin = draw[2 * n:].reshape(4, m)
        y = jnp.where((group == 2) & (coin == 1), y_upper, y)  # MERL: random() < 0.5: lower
        none = jnp.zeros(m, bool)
        state = RoverMERLState(pos=pos.astype(jnp.float32),
                               heading=jnp.zeros(n, jnp.float32),
                               targets=jnp.stack([x, y], -1).astype(jnp.float32), found=none,
                               sensed_found=none, t=jnp.zeros((), jnp.int32))
        return self.observe(state), state

    @staticmethod
    def heading_radians(heading: jax.Array) -> jax.Array:
        """``b * pi`` (MERL's ``radians(b * 180)``), with ``b`` first reduced to ``[-1, 1]``
        (exactly, in float32) so that a long-turning rover keeps an accurate heading."""
        return jnp.pi * (heading - 2.0 * jnp.round(heading / 2.0))

    def closest_poi(self, pos: jax.Array, state: RoverMERLState) -> jax.Array:
        """``[N]`` MERL's ``rover_closest_poi`` for rovers at ``pos``: the distance to the
        nearest POI unobserved in ``state`` within ``obs_radius``, capped at ``2 *
        world_size`` (``d = 0`` counts as 0.001)."""
        d = jnp.sqrt(_swarm.sq_dists(pos, state.targets))
        seen = ~state.found[None, :] & (d <= self.obs_radius)
        d = jnp.where(d == 0, ZERO_DIST, d)
        return jnp.minimum(2.0 * self.world_size, jnp.min(jnp.where(seen, d, jnp.inf), -1))

    def step(self, key: jax.Array, state: RoverMERLState,
             actions: jax.Array) -> tuple[Obs, RoverMERLState, EnvOut]:
        """Steer and move every rover, mark the POIs the coupling observes, score.
        Deterministic (the key is unused)."""
        del key
        a = jnp.clip(actions.astype(jnp.float32), -1.0, 1.0)
        heading = state.heading + a[:, 1] / 2.0
        theta = self.heading_radians(heading)
        pos = state.pos + self.speed * jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=-1)

        # local reward: MERL's running closest-POI distance, over the statuses before the
        # coupling update; on the first step it still holds the reset positions' distances
        closest = self.closest_poi(pos, state)
        closest = jnp.where(state.t == 0, jnp.minimum(closest, self.closest_poi(state.pos, state)),
                            closest)
        d = jnp.sqrt(_swarm.sq_dists(pos, state.targets))  # [N, M]
        near = d <= self.act_dist
        newly = (jnp.sum(near, axis=0) >= self.coupling) & ~state.found
        found = state.found | newly
        t = state.t + 1
        done = t >= self.max_steps
        prox = jnp.minimum(1.0, self.act_dist / jnp.where(d == 0, ZERO_DIST, d))
        next_state = RoverMERLState(pos=pos, heading=heading, targets=state.targets,
                                    found=found, sensed_found=state.found, t=t)
        out = EnvOut(
            reward=jnp.minimum(1.0, self.act_dist / closest),
            skill_rewards=jnp.where(state.found[None, :], 0.0, prox),
            team_reward=jnp.where(done, jnp.mean(state.found.astype(jnp.float32)), 0.0),
            done=done,
            metrics={"observed_frac": jnp.mean(found.astype(jnp.float32))},
        )
        return self.observe(next_state), next_state, out

    def observe(self, state: RoverMERLState) -> Obs:
        """``{"vec": [N, 1 + 2 * sectors + 2 (+ 3 * num_pois)]}`` and, with ``option_info``,
        ``OPTION_OBS`` ``[N, num_pois, 3]``, with ``selector_info`` ``SELECTOR_OBS``
        ``[N, N + num_pois]`` (see the class doc)."""
        n, pos = self.num_agents, state.pos
        rel_r = pos[None, :, :] - pos[:, None, :]  # [N, N, 2]: rover j seen from rover i
        rel_p = state.targets[None, :, :] - pos[:, None, :]  # [N, M, 2]
        r2 = self.obs_radius * self.obs_radius
        in_r = (jnp.sum(jnp.square(rel_r), -1) <= r2) & ~jnp.eye(n, dtype=bool)
        in_p = (jnp.sum(jnp.square(rel_p), -1) <= r2) & ~state.sensed_found[None, :]
        speed = jnp.where(state.t > 0, self.speed, 0.0)
        parts = [jnp.arange(n, dtype=jnp.float32)[:, None],
                 closest_sensor(rel_r, in_r, self.angle_res, self.sectors),
                 closest_sensor(rel_p, in_p, self.angle_res, self.sectors),
                 jnp.broadcast_to(speed, (n, 1)), state.heading[:, None]]
        obs = {}
        if self.option_info:
            flag = jnp.broadcast_to(state.found.astype(jnp.float32)[None, :, None],
                                    (n, self.num_pois, 1))
            parts.append(jnp.concatenate([rel_p / self.world_size, flag], -1).reshape(n, -1))
            theta = self.heading_radians(state.heading)[:, None]
            cos, sin = jnp.cos(theta), jnp.sin(theta)
            ahead = rel_p[..., 0] * cos + rel_p[..., 1] * sin
            left = rel_p[..., 1] * cos - rel_p[..., 0] * sin
            obs[OPTION_OBS] = jnp.concatenate(
                [jnp.stack([ahead, left], -1) / self.world_size, flag], -1)
        if self.selector_info:
            obs[SELECTOR_OBS] = jnp.concatenate(
                [jnp.eye(n, dtype=jnp.float32),
                 jnp.broadcast_to(state.found.astype(jnp.float32), (n, self.num_pois))], -1)
        obs["vec"] = jnp.concatenate(parts, axis=-1).astype(jnp.float32)
        return obs

    def skill_done(self, state: RoverMERLState) -> jax.Array:
        """``[N, K]`` bool: True where option ``k`` ("go to POI k") has met its goal for rover
        ``i``, i.e. POI ``k`` is observed (the same for every rover: the coupling is a team
        event). For option termination: an option whose goal is met stops paying
        (``skill_rewards[:, k]`` is 0) and should hand control back to the selector."""
        return jnp.broadcast_to(state.found[None, :], (self.num_agents, self.num_pois))

    def global_state(self, state: RoverMERLState) -> jax.Array:
        """``[4N + 3M + 1]`` float32: positions / world_size, heading (cos, sin) per rover,
        POI positions / world_size, observed flags, t / max_steps."""
        theta = self.heading_radians(state.heading)
        return jnp.concatenate([
            (state.pos / self.world_size).ravel(),
            jnp.stack([jnp.cos(theta), jnp.sin(theta)], -1).ravel(),
            (state.targets / self.world_size).ravel(),
            state.found.astype(jnp.float32),
            (state.t.astype(jnp.float32) / self.max_steps)[None],
        ]).astype(jnp.float32)

    def comm_graph(self, state: RoverMERLState) -> jax.Array:
        return _swarm.comm_adjacency(state.pos, self.comm_radius)

    # --- host ----------------------------------------------------------------------
    def render(self, state: RoverMERLState) -> np.ndarray:
        """Rovers, comm links, POIs as rings of radius ``act_dist`` (green once observed).
        The view is the world square (outlined), widened to keep in frame any rover that
        left it."""
        pos = np.asarray(state.pos, np.float64)
        pois = np.asarray(state.targets, np.float64)
        w = float(self.world_size)
        pts = np.concatenate([pos, pois])
        lo = np.minimum(0.0, pts.min(0) - 1.0)
        side = float(np.max(np.maximum(w, pts.max(0) + 1.0) - lo))
        d2 = np.sum((pos[:, None] - pos[None]) ** 2, axis=-1)
        adj = (d2 <= self.comm_radius ** 2) & ~np.eye(len(pos), dtype=bool)
        return draw_swarm(side, pos - lo, adjacency=adj, targets=pois - lo,
                          targets_done=np.asarray(state.found), target_radius=self.act_dist,
                          arena=(-lo[0], -lo[1], w - lo[0], w - lo[1]))


# --- reference policies ------------------------------------------------------------------
def steer_to(env: RoverMERL, state: RoverMERLState, goal: jax.Array) -> jax.Array:
    """Actions ``[N, 2]`` that turn each rover toward ``goal [N, 2]`` (as far as the +-90
    degree turn allows) while it moves at MERL's constant speed; ``a[0] = 0`` (no effect).
    On its goal a rover circles within about ``speed`` of it."""
    theta = env.heading_radians(state.heading)
    rel = goal - state.pos
    turn = jnp.arctan2(rel[:, 1], rel[:, 0]) - theta
    turn = jnp.mod(turn + jnp.pi, 2 * jnp.pi) - jnp.pi  # [-pi, pi)
    a1 = jnp.clip(turn / (jnp.pi / 2), -1.0, 1.0)
    return jnp.stack([jnp.zeros_like(a1), a1], axis=-1)


def nearest_poi_policy(key: jax.Array, env: RoverMERL, state: RoverMERLState) -> jax.Array:
    """Reference: every rover steers for its nearest unobserved POI — what MERL's local
    reward alone asks for (rovers split up, so the coupling is rarely met)."""
    del key
    d2 = jnp.where(state.found[None, :], jnp.inf, _swarm.sq_dists(state.pos, state.targets))
    return steer_to(env, state, state.targets[jnp.argmin(d2, axis=-1)])


def team_policy(key: jax.Array, env: RoverMERL, state: RoverMERLState) -> jax.Array:
    """Reference: hand-coded team assignment. Rovers form ``num_agents // coupling`` teams
    of ``coupling`` by index (:func:`envs.rover.team_of`); team ``g`` steers for the
    ``g``-th unobserved POI in index order (wrapping around when fewer remain), meets the
    coupling there, then moves on. Straight ahead once every POI is observed."""
    del key
    open_ = ~state.found
    count = jnp.maximum(jnp.sum(open_), 1)
    order = jnp.argsort(jnp.where(open_, jnp.arange(env.num_pois), env.num_pois))
    goal = state.targets[order[team_of(env) % count]]
    return jnp.where(jnp.any(open_), steer_to(env, state, goal), 0.0)
