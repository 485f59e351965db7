"""Coverage: LPAC-style coverage control as a pure-JAX functional env.

Robots spread over a square world to minimise the Voronoi locational cost of an unknown
importance density (Agarwal, Kumar et al., "LPAC: Learnable Perception-Action-Communication
Loops with Applications to Coverage Control"). Each robot only knows the density it has
sensed so far; it perceives a local window of maps centred on itself and talks to
neighbours within a communication radius.

Grid convention (shared with :func:`envs.render.draw_swarm`): the world ``[0, world_size]^2``
is discretised into ``grid_size x grid_size`` cells indexed ``[iy, ix]`` (row 0 = bottom),
with cell centres ``q = ((ix + 0.5) * cell, (iy + 0.5) * cell)``. Every quantity that
integrates over the world (coverage cost, sensed mass) is a sum over these cells times
``cell_area``.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from envs.base import EnvOut, Obs, SwarmEnv, check_positive_float, check_positive_int
from envs.coverage_memory import MEMORY_FRAMES, memory_maps
from envs.coverage_symmetry import ORDER, transform_state
from envs.render import AGENT_COLOR, HEAT_COLOR, LINK_COLOR, draw_swarm

_NEIGHBOUR_MODES = ("count", "xy")


class CoverageState(NamedTuple):
    """State of one Coverage episode (a pytree; batch it with ``vmap``)."""

    pos: jax.Array  # [N, 2] float32 robot positions in world units
    density: jax.Array  # [G, G] float32 true importance density phi, max-normalised to 1
    seen: jax.Array  # [N, G, G] bool cells each robot has sensed (see ``Coverage.sensed``)
    cell_cost: jax.Array  # [N] float32 each robot's own Voronoi-cell cost at ``pos``
    cost0: jax.Array  # [] float32 coverage cost J at reset (normaliser of the metric)
    t: jax.Array  # [] int32 steps taken in this episode
    met: jax.Array  # [N, N] bool robot j has been within robot i's comm radius
    met_pos: jax.Array  # [N, N, 2] float32 where robot i last had robot j in range (0: never)


class Coverage(SwarmEnv):
    """LPAC-style coverage control with a sensed-density memory per robot.

    **Density.** Each reset draws ``num_features`` isotropic Gaussian features (centres
    uniform in the world, standard deviations uniform in ``feature_sigma``, weights uniform
    in [0.5, 1]); their sum evaluated at cell centres, divided by its maximum, is
    ``phi in [0, 1]``. Robots start uniformly at random in the world.

    **Sensing.** Each robot has a square sensor window of half-side ``sensor_radius``: every
    cell whose centre lies within it is copied into that robot's sensed map, at reset and
    after every step (the map only accumulates; it never forgets). Since phi is fixed
    within an episode, the state stores the bool "seen" mask and :meth:`sensed` rebuilds
    the float map ``where(seen, phi, 0)`` (identical to a max-update, 4x less memory
    traffic, which dominates ``step`` at 1024 envs).

    **Observation** (per robot, agent axis first):

    - ``"maps"`` ``[N, C, map_size, map_size]`` float32, a window of
      ``map_size * map_pool`` grid cells centred on the robot's cell (rows = y, upwards),
      average-pooled by ``map_pool`` (``map_pool=1``: one pixel per grid cell). Channels:

      - ``neighbour_map="count"`` (C = 3): ``[sensed density, neighbour count, boundary]``;
      - ``neighbour_map="xy"`` (C = 4, LPAC's layout): ``[sensed density, neighbour dx,
        neighbour dy, boundary]`` where dx/dy put each neighbour's offset from the robot
        divided by ``comm_radius`` at the neighbour's pixel.

      Neighbours are the robots within ``comm_radius`` (those of :meth:`comm_graph`) whose
      cell falls in the window. The boundary channel is the fraction of the pixel that lies
      outside the world (1 outside, 0 inside). With ``seen_map`` a last channel holds
      the share of the pixel's cells the robot has sensed (an unsensed cell and a sensed
      empty one both read 0 on the density channel). ``num_channels`` gives C.
    - ``"memory"`` ``[N, 2 (3), memory_size, memory_size]`` float32, only with
      ``memory_size > 0``: the robot's whole sensed map (what decentralized Lloyd weighs
      its centroid by) and its seen mask, over the whole world (world frame, rows = y),
      averaged over ``memory_size`` near-equal blocks of cells a side (any grid size, so
      an actor transfers to a larger world). LPAC's robots keep such a map; the window
      above shows only its neighbourhood. With ``neighbour_memory`` a third channel holds
      the robots it remembers, each where it last had it within comm range
      (``met_pos``), as a count per cell averaged over the same blocks: what a robot
      knows of its Voronoi cell beyond its current neighbours. With
      ``memory_frame="robot"`` the maps are re-centred on the robot (over ``2 G`` cells a
      side) and a last channel holds the share of each pixel outside the world
      (:mod:`envs.coverage_memory`).
    - ``"vec"`` ``[N, 2]`` float32: position / world_size, in [0, 1]^2; with ``time_obs``
      ``[N, 3]``, the episode's elapsed share ``t / max_steps`` last (a fixed-length
      episode's policy may depend on the time left: Pardo et al., "Time Limits in
      Reinforcement Learning", 2018).

    **Action.** ``[N, 2]`` velocity in [-1, 1]^2 (clipped), times ``max_speed`` world units
    per step; positions are clipped to the world.

    **Coverage cost.** ``J = sum_q phi(q) * min_i ||q - p_i||^2 * cell_area``;
    ``metrics["coverage_cost"]`` is ``J(t) / J(0)``. Robot i's *cell cost* is the part of
    that sum over the cells it is nearest to (near-ties go to the lower index, see
    :meth:`voronoi`).

    **Rewards** (dense, per robot; ``skill_names = ("explore", "cover")``):

    - ``explore``: density mass newly added to the robot's sensed map this step, as a
      fraction of the total mass of phi (sums to at most 1 per robot per episode).
    - ``cover``: the robot's *difference reward* for coverage (Agogino & Tumer): how much
      its own move lowered J, the others held at their new positions, ``N * (J(p_i(t-1),
      p_-i(t)) - J(p(t))) / J(0)``. It is aligned with the team objective (a robot cannot
      earn it by shrinking its own cell at a neighbour's expense, which the robot's own
      cell cost rewarded) and, to first order in the step, sums over robots to ``N`` times
      the team's decrease of ``J / J(0)``. Computed in one pass over the grid from the
      nearest and second-nearest robot of every cell (see :meth:`cover_credit`).
    - ``reward = explore + cover``.

    **Team reward** (sparse, mission level): ``1 - J(T)/J(0)`` on the final step of the
    episode, 0 on every other step.

    ``done`` is true when ``t == max_steps``; the env never resets itself (use
    :func:`envs.base.auto_reset_step`).
    """

    num_agents: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    skill_names: tuple[str, ...] = eqx.field(static=True)
    metric_better: ClassVar[dict[str, str]] = {"coverage_cost": "lower",
                                               "sensed_fraction": "higher"}
    render_legend: ClassVar[tuple[tuple[str, tuple[int, int, int]], ...]] = (
        ("robots", AGENT_COLOR), ("comm links", LINK_COLOR),
        ("importance density (white = 0)", HEAT_COLOR))
    grid_size: int = eqx.field(static=True)
    map_size: int = eqx.field(static=True)
    map_pool: int = eqx.field(static=True)
    num_features: int = eqx.field(static=True)
    world_size: float = eqx.field(static=True)
    max_speed: float = eqx.field(static=True)
    comm_radius: float = eqx.field(static=True)
    sensor_radius: float = eqx.field(static=True)
    feature_sigma: tuple[float, float] = eqx.field(static=True)
    neighbour_map: str = eqx.field(static=True)
    global_map_size: int = eqx.field(static=True)
    memory_size: int = eqx.field(static=True)
    time_obs: bool = eqx.field(static=True)
    seen_map: bool = eqx.field(static=True)
    neighbour_memory: bool = eqx.field(static=True)
    memory_frame: str = eqx.field(static=True)

    def __init__(
        self,
        num_agents: int = 8,
        *,
        grid_size: int = 32,
        map_size: int = 16,
        map_pool: int = 1,
        num_features: int = 8,
        max_steps: int = 100,
        world_size: float = 1.0,
        max_speed: float = 0.02,
        comm_radius: float = 0.25,
        sensor_radius: float = 0.125,
        feature_sigma: tuple[float, float] = (0.04, 0.1),
        neighbour_map: str = "count",
        global_map_size: int = 8,
        memory_size: int = 0,
        time_obs: bool = False,
        seen_map: bool = False,
        neighbour_memory: bool = False,
        memory_frame: str = "world",
    ):
        """Validate and store the configuration (all lengths in world units).

        Args:
          num_agents: robots N.
          grid_size: G, cells per side of the density / cost grid.
          map_size: side of each robot's local observation window, in pixels.
          map_pool: grid cells per observation pixel (the window spans
            ``map_size * map_pool`` cells), for large grids at LPAC's 32 x 32 map size.
          num_features: Gaussian features in the density.
          max_steps: fixed episode length.
          world_size: side of the square world.
          max_speed: distance moved per step at full action.
          comm_radius: robots closer than this (inclusive) communicate.
          sensor_radius: half-side of each robot's square sensor window.
          feature_sigma: (low, high) range of the features' standard deviations.
          neighbour_map: ``"count"`` (3 channels) or ``"xy"`` (4 channels, LPAC-style).
          global_map_size: side of the coarse density maps in :meth:`global_state`.
          memory_size: side of each robot's ``"memory"`` observation (its whole sensed
            map, coarse; at most ``grid_size``); 0 = no such entry.
          time_obs: append ``t / max_steps`` to each robot's ``"vec"``.
          seen_map: add a channel to ``"maps"``: which of the window's cells the robot
            has sensed.
          neighbour_memory: add a channel to ``"memory"`` (needs ``memory_size``): the
            robots the robot remembers, where it last had each within comm range.
          memory_frame: ``"world"`` (the grid as it is) or ``"robot"`` (re-centred on the
            robot over ``2 * grid_size`` cells, with an outside-the-world channel; then
            ``memory_size`` may be up to ``2 * grid_size``): see
            :mod:`envs.coverage_memory`.
        """
        self.num_agents = check_positive_int("num_agents", num_agents)
        self.grid_size = check_positive_int("grid_size", grid_size, minimum=2)
        self.map_size = check_positive_int("map_size", map_size)
        self.map_pool = check_positive_int("map_pool", map_pool)
        self.num_features = check_positive_int("num_features", num_features)
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.global_map_size = check_positive_int("global_map_size", global_map_size)
        if isinstance(memory_size, bool) or not isinstance(memory_size, int) or memory_size < 0:
            raise ValueError(f"memory_size must be an int >= 0, got {memory_size!r}")
        if not isinstance(memory_frame, str) or memory_frame not in MEMORY_FRAMES:
            raise ValueError(f"memory_frame must be one of {MEMORY_FRAMES}, "
                             f"got {memory_frame!r}")
        self.memory_frame = memory_frame
        span = self.grid_size * (2 if memory_frame == "robot" else 1)
        if memory_size > span:
            raise ValueError(f"memory_size ({memory_size}) must be at most "
                             f"{'2 * ' if memory_frame == 'robot' else ''}grid_size ({span})")
        self.memory_size = memory_size
        if not isinstance(time_obs, bool):
            raise TypeError(f"time_obs must be a bool, got {time_obs!r}")
        self.time_obs = time_obs
        if not isinstance(seen_map, bool):
            raise TypeError(f"seen_map must be a bool, got {seen_map!r}")
        self.seen_map = seen_map
        if not isinstance(neighbour_memory, bool):
            raise TypeError(f"neighbour_memory must be a bool, got {neighbour_memory!r}")
        if neighbour_memory and not memory_size:
            raise ValueError("neighbour_memory is a channel of the memory observation: set "
                             "memory_size > 0 too")
        self.neighbour_memory = neighbour_memory
        self.world_size = check_positive_float("world_size", world_size)
        self.max_speed = check_positive_float("max_speed", max_speed)
        self.comm_radius = check_positive_float("comm_radius", comm_radius)
        self.sensor_radius = check_positive_float("sensor_radius", sensor_radius)
        if not isinstance(feature_sigma, (tuple, list)) or len(feature_sigma) != 2:
            raise TypeError(f"feature_sigma must be a (low, high) pair, got {feature_sigma!r}")
        lo = check_positive_float("feature_sigma[0]", feature_sigma[0])
        hi = check_positive_float("feature_sigma[1]", feature_sigma[1])
        if hi < lo:
            raise ValueError(f"feature_sigma must have low <= high, got {feature_sigma!r}")
        self.feature_sigma = (lo, hi)
        if not isinstance(neighbour_map, str):
            raise TypeError(f"neighbour_map must be a str, got {type(neighbour_map).__name__}")
        if neighbour_map not in _NEIGHBOUR_MODES:
            raise ValueError(f"neighbour_map must be one of {_NEIGHBOUR_MODES}, "
                             f"got {neighbour_map!r}")
        self.neighbour_map = neighbour_map
        self.skill_names = ("explore", "cover")

    # --- geometry helpers ------------------------------------------------------------
    @property
    def cell(self) -> float:
        """Side of one grid cell, in world units."""
        return self.world_size / self.grid_size

    @property
    def cell_area(self) -> float:
        return self.cell**2

    @property
    def num_channels(self) -> int:
        """Channels C of ``obs["maps"]``: 3 (``"count"``) or 4 (``"xy"``), one more with
        ``seen_map``."""
        return (3 if self.neighbour_map == "count" else 4) + int(self.seen_map)

    #: the task's symmetries (the square's, :mod:`envs.coverage_symmetry`), which
    #: imitation may augment its data with (``PretrainConfig.augment``)
    symmetries: ClassVar[int] = ORDER

    def transform(self, state: CoverageState, g: jax.Array) -> CoverageState:
        """``state`` in the world moved by symmetry ``g`` (``0 .. symmetries - 1``; 0:
        unchanged), another state of this env's distribution."""
        return transform_state(state, g, self.world_size)

    def cell_centres(self) -> jax.Array:
        """``[G]`` coordinate of the cell centres along either axis."""
        return (jnp.arange(self.grid_size, dtype=jnp.float32) + 0.5) * self.cell

    def cell_index(self, pos: jax.Array) -> jax.Array:
        """``[..., 2]`` integer (ix, iy) of the cell containing each position."""
        idx = jnp.floor(pos / self.cell).astype(jnp.int32)
        return jnp.clip(idx, 0, self.grid_size - 1)

    def sq_dists(self, pos: jax.Array) -> jax.Array:
        """``[N, G, G]`` squared distance from each robot to each cell centre."""
        c = self.cell_centres()
        dx = (c[None, :] - pos[:, 0:1]) ** 2  # [N, G] over ix
        dy = (c[None, :] - pos[:, 1:2]) ** 2  # [N, G] over iy
        return dy[:, :, None] + dx[:, None, :]

    def voronoi(self, pos: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``([N, G, G] bool cell membership, [N, G, G] squared distances)``.

        Each grid cell belongs to its nearest robot. The owner comes from ONE integer min
        over robots of the squared distance's bit pattern (monotone for floats >= 0) with
        its lowest ``ceil(log2 N)`` bits replaced by the robot index, so distances equal
        to within ``N`` ulps go to the lower index. Why not ``argmin``: XLA:CPU's variadic
        argmin made it the most expensive part of ``step``; and why not ``d2 == min(d2)``:
        XLA may recompute ``d2`` with different rounding inside a fusion, so that
        equality can fail for every robot (a cell with no owner).
        """
        d2 = self.sq_dists(pos)
        bits = max(1, (self.num_agents - 1).bit_length())
        iota = jnp.arange(self.num_agents, dtype=jnp.int32)[:, None, None]
        keys = (lax.bitcast_convert_type(d2, jnp.int32) & ~((1 << bits) - 1)) | iota
        owner = jnp.min(keys, axis=0) & ((1 << bits) - 1)
        return owner[None] == iota, d2

    def cell_costs(self, density: jax.Array, pos: jax.Array) -> jax.Array:
        """``[N]`` each robot's share of the Voronoi locational cost (sums to J)."""
        mine, d2 = self.voronoi(pos)
        return jnp.sum(jnp.where(mine, density * d2, 0.0), axis=(1, 2)) * self.cell_area

    def cover_credit(self, density: jax.Array, prev_pos: jax.Array, pos: jax.Array,
                     ) -> tuple[jax.Array, jax.Array]:
        """``([N] difference credit, [N] cell costs)`` at ``pos``.

        Credit ``D_i = J(pos with p_i at prev_pos_i) - J(pos)``: the cost of cell ``q``
        without robot ``i`` is the second-nearest robot's distance where ``i`` owns
        ``q``, the nearest's elsewhere, so every ``D_i`` comes from one pass, O(N G^2).
        """
        mine, d2 = self.voronoi(pos)
        nearest = jnp.min(d2, axis=0)
        second = jnp.min(jnp.where(mine, jnp.inf, d2), axis=0)
        without_i = jnp.where(mine, second[None], nearest[None])  # [N, G, G]
        back = jnp.minimum(without_i, self.sq_dists(prev_pos))
        credit = jnp.sum(density * (back - nearest[None]), axis=(1, 2)) * self.cell_area
        cell_cost = jnp.sum(jnp.where(mine, density * d2, 0.0), axis=(1, 2)) * self.cell_area
        return credit, cell_cost

    def coverage_cost(self, state: CoverageState) -> jax.Array:
        """``[]`` Voronoi locational cost J of the current positions under the true phi."""
        return jnp.sum(self.cell_costs(state.density, state.pos))

    def sensor_mask(self, pos: jax.Array) -> jax.Array:
        """``[N, G, G]`` bool: cells whose centre lies in each robot's sensor window."""
        c = self.cell_centres()
        inx = jnp.abs(c[None, :] - pos[:, 0:1]) <= self.sensor_radius  # [N, G]
        iny = jnp.abs(c[None, :] - pos[:, 1:2]) <= self.sensor_radius
        return iny[:, :, None] & inx[:, None, :]

    def sample_density(self, key: jax.Array) -> jax.Array:
        """``[G, G]`` random Gaussian-mixture importance density, max-normalised to 1."""
        return self._density(jax.random.uniform(key, (self.num_features, 4)))

    def _density(self, u: jax.Array) -> jax.Array:
        """Density from ``u [F, 4]`` uniforms in [0, 1): centre x, centre y, sigma, weight."""
        lo, hi = self.feature_sigma
        centres = u[:, :2] * self.world_size
        sigma = lo + (hi - lo) * u[:, 2]
        weight = 0.5 + 0.5 * u[:, 3]
        c = self.cell_centres()
        inv = 1.0 / (2.0 * sigma[:, None] ** 2)
        ex = jnp.exp(-((c[None, :] - centres[:, 0:1]) ** 2) * inv)  # [F, G] over ix
        ey = jnp.exp(-((c[None, :] - centres[:, 1:2]) ** 2) * inv)  # [F, G] over iy
        phi = jnp.einsum("f,fy,fx->yx", weight, ey, ex)
        return phi / jnp.max(phi)

    # --- functional core -------------------------------------------------------------
    def reset(self, key: jax.Array) -> tuple[Obs, CoverageState]:
        """Draw a density and robot positions; robots sense their windows at once."""
        # One draw for everything: fewer PRNG ops keeps the compiled reset small.
        f, n = self.num_features, self.num_agents
        u = jax.random.uniform(key, (4 * f + 2 * n,))
        density = self._density(u[: 4 * f].reshape(f, 4))
        pos = u[4 * f :].reshape(n, 2) * self.world_size
        cell_cost = self.cell_costs(density, pos)
        met, met_pos = self.meet(jnp.zeros((n, n), bool), jnp.zeros((n, n, 2)), pos)
        state = CoverageState(pos=pos, density=density, seen=self.sensor_mask(pos),
                              cell_cost=cell_cost,
                              cost0=jnp.sum(cell_cost), t=jnp.zeros((), jnp.int32),
                              met=met, met_pos=met_pos)
        return self.observe(state), state

    def step(
        self, key: jax.Array, state: CoverageState, actions: jax.Array
    ) -> tuple[Obs, CoverageState, EnvOut]:
        """Move, sense, and score one step (``key`` is unused: dynamics are deterministic)."""
        del key
        vel = jnp.clip(actions.astype(jnp.float32), -1.0, 1.0) * self.max_speed
        pos = jnp.clip(state.pos + vel, 0.0, self.world_size)
        seen = state.seen | self.sensor_mask(pos)
        credit, cell_cost = self.cover_credit(state.density, state.pos, pos)
        t = state.t + 1
        met, met_pos = self.meet(state.met, state.met_pos, pos)
        next_state = CoverageState(pos=pos, density=state.density, seen=seen,
                                   cell_cost=cell_cost, cost0=state.cost0, t=t, met=met,
                                   met_pos=met_pos)

        total_mass = jnp.sum(state.density)
        new = seen & ~state.seen
        explore = jnp.sum(jnp.where(new, state.density, 0.0), axis=(1, 2)) / total_mass
        cost0 = jnp.maximum(state.cost0, 1e-12)
        cover = self.num_agents * credit / cost0
        skill_rewards = jnp.stack([explore, cover], axis=-1)
        ratio = jnp.sum(cell_cost) / cost0
        done = t >= self.max_steps
        out = EnvOut(
            reward=explore + cover,
            skill_rewards=skill_rewards,
            team_reward=jnp.where(done, 1.0 - ratio, 0.0),
            done=done,
            metrics={
                "coverage_cost": ratio,
                "sensed_fraction": jnp.sum(self._team_sensed(next_state)) / total_mass,
            },
        )
        return self.observe(next_state), next_state, out

    def observe(self, state: CoverageState) -> Obs:
        """Local map windows and normalized positions (see the class docstring)."""
        n, m, p = self.num_agents, self.map_size, self.map_pool
        span = m * p  # window side in grid cells
        half = span // 2
        idx = self.cell_index(state.pos)  # [N, 2] (ix, iy)

        # Sensed density: slice the zero-padded density and each robot's padded seen mask
        # around its cell (vmapped dynamic_slice; padding keeps every slice in bounds).
        pad = lambda x: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(half, half), (half, half)])
        cut = lambda x, ix, iy: lax.dynamic_slice(x, (iy, ix), (span, span))
        seen = jax.vmap(cut)(pad(state.seen), idx[:, 0], idx[:, 1])
        dens = jax.vmap(cut, in_axes=(None, 0, 0))(pad(state.density), idx[:, 0], idx[:, 1])
        window = jnp.where(seen, dens, 0.0)

        # Boundary: window cells outside [0, G) along either axis.
        offs = jnp.arange(span) - half
        out_x = (idx[:, 0:1] + offs < 0) | (idx[:, 0:1] + offs >= self.grid_size)  # [N, S]
        out_y = (idx[:, 1:2] + offs < 0) | (idx[:, 1:2] + offs >= self.grid_size)
        boundary = (out_y[:, :, None] | out_x[:, None, :]).astype(jnp.float32)

        density_px = _pool(window, p, jnp.mean)
        boundary_px = _pool(boundary, p, jnp.mean)
        neighbours = self._neighbour_maps(state.pos, idx)  # [N, K, m, m]
        channels = [density_px[:, None], neighbours, boundary_px[:, None]]
        if self.seen_map:
            channels.append(_pool(seen.astype(jnp.float32), p, jnp.mean)[:, None])
        maps = jnp.concatenate(channels, axis=1).astype(jnp.float32)
        vec = (state.pos / self.world_size).astype(jnp.float32)
        if self.time_obs:
            share = jnp.broadcast_to(state.t / self.max_steps, (n, 1))
            vec = jnp.concatenate([vec, share.astype(jnp.float32)], axis=1)
        assert maps.shape == (n, self.num_channels, m, m)
        if not self.memory_size:
            return {"maps": maps, "vec": vec}
        layers = [self.sensed(state), state.seen]
        if self.neighbour_memory:
            ix = self.cell_index(state.met_pos)  # [N, N, 2]
            onehot = lambda i: jax.nn.one_hot(i, self.grid_size, dtype=jnp.float32)
            layers.append(jnp.einsum("ij,ijy,ijx->iyx", state.met.astype(jnp.float32),
                                     onehot(ix[..., 1]), onehot(ix[..., 0])))
        memory = memory_maps(jnp.stack([x.astype(jnp.float32) for x in layers], axis=1),
                             idx, self.memory_size, self.memory_frame)
        return {"maps": maps, "memory": memory, "vec": vec}

    def meet(self, met: jax.Array, met_pos: jax.Array, pos: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
        """``(met, met_pos)`` after the robots at ``pos``: each pair within comm radius
        meets, and each robot keeps where it last had every other in range."""
        adj = self.comm_graph_from(pos) > 0
        return met | adj, jnp.where(adj[..., None], pos[None, :, :], met_pos)

    def _neighbour_maps(self, pos: jax.Array, idx: jax.Array) -> jax.Array:
        """``[N, K, m, m]`` neighbours within comm radius drawn in each robot's window.

        Built as a batched outer product of one-hot row/column indicators, weighted by the
        adjacency (and by the neighbour's offset in ``"xy"`` mode); no loop over agents.
        """
        m, p = self.map_size, self.map_pool
        half = (m * p) // 2
        rel = idx[None, :, :] - idx[:, None, :] + half  # [N, N, 2] cell offset in window
        inside = jnp.all((rel >= 0) & (rel < m * p), axis=-1)
        px = rel // p  # pixel index of neighbour j in robot i's window
        onehot_x = jax.nn.one_hot(px[..., 0], m, dtype=jnp.float32)  # [N, N, m]
        onehot_y = jax.nn.one_hot(px[..., 1], m, dtype=jnp.float32)
        adj = self.comm_graph_from(pos) * inside
        if self.neighbour_map == "count":
            weights = adj[:, None]  # [N, 1, N]
        else:
            offset = (pos[None, :, :] - pos[:, None, :]) / self.comm_radius  # [N, N, 2]
            weights = jnp.moveaxis(adj[..., None] * offset, -1, 1)  # [N, 2, N]
        return jnp.einsum("ikj,ijh,ijw->ikhw", weights, onehot_y, onehot_x)

    def sensed(self, state: CoverageState) -> jax.Array:
        """``[N, G, G]`` density each robot has sensed so far (0 where unseen)."""
        return jnp.where(state.seen, state.density[None], 0.0)

    def _team_sensed(self, state: CoverageState) -> jax.Array:
        """``[G, G]`` density sensed by at least one robot."""
        return jnp.where(jnp.any(state.seen, axis=0), state.density, 0.0)

    def comm_graph_from(self, pos: jax.Array) -> jax.Array:
        """``[N, N]`` float32 0/1: distance <= comm_radius, zero diagonal."""
        d2 = jnp.sum((pos[:, None, :] - pos[None, :, :]) ** 2, axis=-1)
        adj = (d2 <= self.comm_radius**2) & ~jnp.eye(self.num_agents, dtype=bool)
        return adj.astype(jnp.float32)

    def comm_graph(self, state: CoverageState) -> jax.Array:
        return self.comm_graph_from(state.pos)

    def global_state(self, state: CoverageState) -> jax.Array:
        """Critic input: positions / world_size ``[2N]``, coarse true density and coarse
        team-sensed density ``[g*g]`` each (``g = global_map_size``), and ``t / max_steps``.
        """
        g = self.global_map_size
        coarse = lambda x: jax.image.resize(x, (g, g), method="linear", antialias=True)
        team_sensed = self._team_sensed(state)
        return jnp.concatenate([
            (state.pos / self.world_size).reshape(-1),
            coarse(state.density).reshape(-1),
            coarse(team_sensed).reshape(-1),
            (state.t / self.max_steps)[None],
        ]).astype(jnp.float32)

    # --- host side --------------------------------------------------------------------
    def render(self, state: CoverageState) -> np.ndarray:
        """RGB frame: density heat map, comm links, robots (numpy only: no JAX dispatch)."""
        pos = np.asarray(state.pos, dtype=np.float64)
        d2 = np.sum((pos[:, None] - pos[None]) ** 2, axis=-1)
        adjacency = (d2 <= self.comm_radius**2) & ~np.eye(len(pos), dtype=bool)
        return draw_swarm(self.world_size, pos, adjacency=adjacency,
                          background=np.asarray(state.density))


def _pool(x: jax.Array, p: int, reduce) -> jax.Array:
    """Reduce ``[N, S, S]`` over non-overlapping ``p x p`` blocks -> ``[N, S/p, S/p]``."""
    if p == 1:
        return x
    n, s, _ = x.shape
    return reduce(x.reshape(n, s // p, p, s // p, p), axis=(2, 4))
