"""Pure helpers shared by the Discovery and Dispersion envs.

Both envs are "point agents and point targets in a square world": the same state layout,
movement, comm graph, egocentric local maps, capture bookkeeping and greedy target
assignment. They live here once; each env composes them with its own reset and rewards.

Conventions: positions are world coordinates in ``[0, world_size]^2``; a local map is
indexed ``maps[i, c, iy, ix]`` with ``iy`` growing with world y and ``ix`` with world x
(the same orientation as :func:`envs.render.draw_swarm`'s background), centred on agent
``i`` and covering ``[-sensor_radius, sensor_radius)^2`` around it.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from envs.base import Obs, SwarmEnv, check_positive_float, check_positive_int
from envs.render import draw_swarm

NUM_MAP_CHANNELS = 3  # (open targets, neighbours within comm radius, outside the world)
VEC_SIZE = 9  # own pos (2), own vel (2), nearest open target (2), nearest neighbour (2), time
OBS_MODES = ("maps", "vec", "both")  # local maps (+ the small vec) / sector vec / both


class SwarmState(eqx.Module):
    """State of a point-swarm episode (Discovery: targets; Dispersion: goals)."""

    pos: jax.Array  # [N, 2] float32 agent positions in [0, world_size]^2
    vel: jax.Array  # [N, 2] float32 displacement of the last step (world units / step)
    targets: jax.Array  # [M, 2] float32 target (goal) positions
    found: jax.Array  # [M] bool, discovered (reached) earlier in this episode
    t: jax.Array  # [] int32, steps taken in this episode


# --- geometry ------------------------------------------------------------------------


def sq_dists(a: jax.Array, b: jax.Array) -> jax.Array:
    """``[N, 2] x [M, 2] -> [N, M]`` squared Euclidean distances (exact, by broadcasting)."""
    return jnp.sum(jnp.square(a[:, None, :] - b[None, :, :]), axis=-1)


def comm_adjacency(pos: jax.Array, radius: float) -> jax.Array:
    """``[N, N]`` float32 0/1: pairs within ``radius`` (inclusive), zero diagonal."""
    n = pos.shape[0]
    near = (sq_dists(pos, pos) <= radius * radius) & ~jnp.eye(n, dtype=bool)
    return near.astype(jnp.float32)


def masked_min_dist(d2: jax.Array, valid: jax.Array) -> jax.Array:
    """Row-wise distance to the nearest valid column of ``d2`` ``[N, M]``; 0 if none is."""
    m = jnp.min(jnp.where(valid, d2, jnp.inf), axis=-1)
    return jnp.sqrt(jnp.where(jnp.isfinite(m), m, 0.0))


def nearest_rel(rel: jax.Array, d2: jax.Array, valid: jax.Array) -> jax.Array:
    """``rel [N, M, 2]`` -> ``[N, 2]`` offset to each row's nearest valid entity (0 if none)."""
    masked = jnp.where(valid, d2, jnp.inf)
    j = jnp.argmin(masked, axis=-1)
    out = jnp.take_along_axis(rel, j[:, None, None], axis=1)[:, 0]
    has = jnp.isfinite(jnp.min(masked, axis=-1))
    return jnp.where(has[:, None], out, 0.0)


def kth_neighbour_dist(pos: jax.Array, k: int) -> jax.Array:
    """``[N]`` distance from each agent to its ``k``-th nearest other agent (needs N > k)."""
    n = pos.shape[0]
    d2 = jnp.where(jnp.eye(n, dtype=bool), jnp.inf, sq_dists(pos, pos))
    if k == 1:
        return jnp.sqrt(jnp.min(d2, axis=-1))
    neg, _ = jax.lax.top_k(-d2, k)
    return jnp.sqrt(-neg[:, k - 1])


# --- dynamics and bookkeeping --------------------------------------------------------


def move(pos: jax.Array, actions: jax.Array, max_speed: float,
         world_size: float) -> tuple[jax.Array, jax.Array]:
    """Single integrator: clip actions to [-1, 1]^2, scale by ``max_speed``, clip to world.

    Returns the new positions and the displacement actually made (the velocity).
    """
    vel = jnp.clip(actions.astype(jnp.float32), -1.0, 1.0) * max_speed
    new = jnp.clip(pos + vel, 0.0, world_size)
    return new, new - pos


def capture(pos: jax.Array, targets: jax.Array, found: jax.Array, radius: float,
            coupling: int) -> tuple[jax.Array, jax.Array]:
    """Targets newly captured this step, and each agent's share in them.

    A target is captured when at least ``coupling`` agents are within ``radius``
    (inclusive) of it at once and it was not captured before. Returns ``newly [M]`` bool
    and ``credit [N]`` float32 (how many newly captured targets the agent was near).
    """
    near = sq_dists(pos, targets) <= radius * radius  # [N, M]
    newly = (jnp.sum(near, axis=0) >= coupling) & ~found
    credit = jnp.sum(near & newly[None, :], axis=1).astype(jnp.float32)
    return newly, credit


# --- observation ---------------------------------------------------------------------


def cell_index(rel: jax.Array, sensor_radius: float, map_size: int) -> jax.Array:
    """Flat cell ``iy * W + ix`` of each offset ``rel [..., 2]`` in the egocentric window.

    The window is ``[-sensor_radius, sensor_radius)^2``; offsets outside it get
    ``map_size**2`` (one past the last cell), which callers use as "drop".
    """
    cells = jnp.floor(rel * (map_size / (2.0 * sensor_radius)) + map_size / 2).astype(jnp.int32)
    inside = jnp.all((cells >= 0) & (cells < map_size), axis=-1)
    return jnp.where(inside, cells[..., 1] * map_size + cells[..., 0], map_size * map_size)


def boundary_map(pos: jax.Array, sensor_radius: float, map_size: int,
                 world_size: float) -> jax.Array:
    """``[N, H, W]`` float32: 1 where the cell centre lies outside ``[0, world_size]^2``."""
    offs = (jnp.arange(map_size, dtype=jnp.float32) + 0.5) * (2.0 * sensor_radius / map_size)
    offs = offs - sensor_radius
    cx = pos[:, 0:1] + offs  # [N, W]
    cy = pos[:, 1:2] + offs  # [N, H]
    out_x = (cx < 0.0) | (cx > world_size)
    out_y = (cy < 0.0) | (cy > world_size)
    return (out_y[:, :, None] | out_x[:, None, :]).astype(jnp.float32)


def sector_density(rel: jax.Array, valid: jax.Array, sectors: int,
                   scale: float) -> jax.Array:
    """MERL-style sector densities: ``rel [N, M, 2]`` offsets -> ``[N, sectors]``.

    The plane around each agent is cut into ``sectors`` equal angular sectors (sector 0
    starts at angle -pi, counter-clockwise); each valid entity adds its proximity
    ``1 / (1 + d / scale)`` (1 on top of the agent, 1/2 at distance ``scale``) to the
    sector it lies in. Entities at the agent's own position fall in sector
    ``sectors // 2`` (angle 0).
    """
    angle = jnp.arctan2(rel[..., 1], rel[..., 0])  # (-pi, pi]
    sector = jnp.floor((angle + jnp.pi) * (sectors / (2 * jnp.pi))).astype(jnp.int32)
    sector = jnp.clip(sector, 0, sectors - 1)  # angle = pi lands on the last sector
    proximity = 1.0 / (1.0 + jnp.sqrt(jnp.sum(jnp.square(rel), axis=-1)) / scale)
    weight = jnp.where(valid, proximity, 0.0)
    return jnp.sum(jax.nn.one_hot(sector, sectors, dtype=jnp.float32) * weight[..., None],
                   axis=-2)


def observe(state: SwarmState, *, world_size: float, max_speed: float, comm_radius: float,
            sensor_radius: float, map_size: int, max_steps: int, obs_mode: str = "maps",
            sectors: int = 8) -> dict[str, jax.Array]:
    """The shared observation, by ``obs_mode``:

    - ``"maps"``: ``{"maps": [N, 3, H, W], "vec": [N, 9]}`` (the LPAC CNN input);
    - ``"vec"``: ``{"vec": [N, 9 + 2 * sectors]}`` (an MLP's input; no map is computed);
    - ``"both"``: ``{"maps": [N, 3, H, W], "vec": [N, 9 + 2 * sectors]}``.

    maps channels: 0 open (not yet found) targets per cell, 1 neighbours within
    ``comm_radius`` per cell, 2 cells outside the world. vec: own position scaled to
    [-1, 1], own velocity / max_speed, offset to the nearest open target / world_size,
    offset to the nearest other agent / world_size, the episode fraction t/max_steps,
    then (``"vec"``/``"both"``) the sector densities (:func:`sector_density`, scale
    ``sensor_radius``) of the open targets and of the other agents.
    """
    pos, n = state.pos, state.pos.shape[0]
    rel_t = state.targets[None, :, :] - pos[:, None, :]  # [N, M, 2]
    d2_t = jnp.sum(jnp.square(rel_t), axis=-1)
    rel_a = pos[None, :, :] - pos[:, None, :]  # [N, N, 2]: agent j relative to agent i
    d2_a = jnp.sum(jnp.square(rel_a), axis=-1)
    other = ~jnp.eye(n, dtype=bool)
    open_t = jnp.broadcast_to(~state.found, d2_t.shape)
    t_frac = jnp.broadcast_to(state.t.astype(jnp.float32) / max_steps, (n, 1))
    parts = [pos * (2.0 / world_size) - 1.0, state.vel / max_speed,
             nearest_rel(rel_t, d2_t, open_t) / world_size,
             nearest_rel(rel_a, d2_a, other) / world_size, t_frac]
    if obs_mode != "maps":
        parts += [sector_density(rel_t, open_t, sectors, sensor_radius),
                  sector_density(rel_a, other, sectors, sensor_radius)]
    obs = {"vec": jnp.concatenate(parts, axis=-1).astype(jnp.float32)}
    if obs_mode == "vec":
        return obs

    # One scatter-add of all entities (targets into channel 0, neighbours into channel 1)
    # on top of the dense boundary channel 2. Measured on CPU under vmap (1024 envs) it is
    # several times faster than a dense one-hot einsum or broadcast-and-sum, on par with
    # unrolled one-hot sums but O(N * (N + M)) work, so it also scales to 256 agents.
    # The maps are memory-bound: writing them costs about as much as computing them.
    neighbour = ((d2_a <= comm_radius * comm_radius) & other).astype(jnp.float32)
    hw = map_size * map_size
    cell_t = cell_index(rel_t, sensor_radius, map_size)
    cell_a = cell_index(rel_a, sensor_radius, map_size)
    index = jnp.concatenate([jnp.where(cell_t < hw, cell_t, 3 * hw),
                             jnp.where(cell_a < hw, cell_a + hw, 3 * hw)], axis=1)
    weight = jnp.concatenate([open_t.astype(jnp.float32), neighbour], axis=1)
    base = jnp.concatenate(
        [jnp.zeros((n, 2 * hw), jnp.float32),
         boundary_map(pos, sensor_radius, map_size, world_size).reshape(n, hw)], axis=1)
    maps = base.at[jnp.arange(n)[:, None], index].add(weight, mode="drop")
    return {"maps": maps.reshape(n, NUM_MAP_CHANNELS, map_size, map_size), **obs}


def global_state(state: SwarmState, *, world_size: float, max_speed: float,
                 max_steps: int) -> jax.Array:
    """Flat ``[4N + 3M + 1]`` float32: positions, velocities, targets, found flags, time."""
    return jnp.concatenate(
        [
            (state.pos / world_size).ravel(),
            (state.vel / max_speed).ravel(),
            (state.targets / world_size).ravel(),
            state.found.astype(jnp.float32),
            (state.t.astype(jnp.float32) / max_steps)[None],
        ]
    ).astype(jnp.float32)


def render(state: SwarmState, *, world_size: float, comm_radius: float,
           target_radius: float, size: int = 256) -> np.ndarray:
    """One unbatched state -> ``uint8 [size, size, 3]`` (found targets drawn green)."""
    pos = np.asarray(state.pos)
    d2 = np.sum((pos[:, None] - pos[None]) ** 2, axis=-1)
    adj = (d2 <= comm_radius**2) & ~np.eye(len(pos), dtype=bool)
    return draw_swarm(world_size, pos, adjacency=adj, targets=np.asarray(state.targets),
                      targets_done=np.asarray(state.found), target_radius=target_radius,
                      size=size)


# --- reference-policy pieces ---------------------------------------------------------


def greedy_assign(cost: jax.Array, valid: jax.Array) -> jax.Array:
    """Sequential greedy assignment: row a (in order) takes its cheapest unclaimed valid column.

    ``cost [A, M]``, ``valid [M]`` -> ``[A]`` int32 column per row. Once every valid column
    is claimed, later rows fall back to their cheapest valid column; if no column is
    valid the result is meaningless (callers mask it out).
    """
    num_rows = cost.shape[0]

    def body(a, carry):
        claimed, out = carry
        row = cost[a]
        free = jnp.where(valid & ~claimed, row, jnp.inf)
        any_free = jnp.isfinite(jnp.min(free))
        j = jnp.where(any_free, jnp.argmin(free), jnp.argmin(jnp.where(valid, row, jnp.inf)))
        claimed = claimed.at[j].set(claimed[j] | any_free)
        return claimed, out.at[a].set(j.astype(jnp.int32))

    init = (jnp.zeros(cost.shape[1], bool), jnp.zeros(num_rows, jnp.int32))
    return jax.lax.fori_loop(0, num_rows, body, init)[1]


def head_to(pos: jax.Array, goal: jax.Array, max_speed: float) -> jax.Array:
    """Action ``[N, 2]`` in [-1, 1]^2 that moves straight toward ``goal``, stopping on it."""
    v = (goal - pos) / max_speed
    return v / jnp.maximum(1.0, jnp.max(jnp.abs(v), axis=-1, keepdims=True))


# --- constructor validation ----------------------------------------------------------


def check_common(num_agents: int, max_steps: int, world_size: float, max_speed: float,
                 comm_radius: float, sensor_radius: float, map_size: int,
                 obs_mode: str = "maps", sectors: int = 8) -> dict[str, Any]:
    """Validate the arguments both envs share; returns them as clean Python values."""
    if obs_mode not in OBS_MODES:
        raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
    return dict(
        num_agents=check_positive_int("num_agents", num_agents),
        max_steps=check_positive_int("max_steps", max_steps),
        world_size=check_positive_float("world_size", world_size),
        max_speed=check_positive_float("max_speed", max_speed),
        comm_radius=check_positive_float("comm_radius", comm_radius),
        sensor_radius=check_positive_float("sensor_radius", sensor_radius),
        map_size=check_positive_int("map_size", map_size),
        obs_mode=obs_mode,
        sectors=check_positive_int("sectors", sectors),
    )


class TargetSwarmEnv(SwarmEnv):
    """What Discovery and Dispersion share: agents, targets (goals) and the views of a
    :class:`SwarmState` built from the helpers above. Subclasses declare the fields read
    here and name the ring radius drawn around each target (``target_radius``)."""

    world_size: eqx.AbstractVar[float]
    max_speed: eqx.AbstractVar[float]
    comm_radius: eqx.AbstractVar[float]
    sensor_radius: eqx.AbstractVar[float]
    map_size: eqx.AbstractVar[int]
    obs_mode: eqx.AbstractVar[str]
    sectors: eqx.AbstractVar[int]

    @property
    def target_radius(self) -> float:
        raise NotImplementedError

    def observe(self, state: SwarmState) -> Obs:
        return observe(state, world_size=self.world_size, max_speed=self.max_speed,
                       comm_radius=self.comm_radius, sensor_radius=self.sensor_radius,
                       map_size=self.map_size, max_steps=self.max_steps,
                       obs_mode=self.obs_mode, sectors=self.sectors)

    def global_state(self, state: SwarmState) -> jax.Array:
        """``[4N + 3M + 1]``: positions, velocities, targets, found flags, t/T."""
        return global_state(state, world_size=self.world_size, max_speed=self.max_speed,
                            max_steps=self.max_steps)

    def comm_graph(self, state: SwarmState) -> jax.Array:
        return comm_adjacency(state.pos, self.comm_radius)

    def render(self, state: SwarmState) -> np.ndarray:
        """Agents, comm links, targets as rings of ``target_radius`` (green = found)."""
        return render(state, world_size=self.world_size, comm_radius=self.comm_radius,
                      target_radius=self.target_radius)
