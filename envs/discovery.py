"""Coupled discovery: the rover domain of MERL (Majumdar, Khadka et al., ICML 2020).

Targets (points of interest) are scattered over a square world; a target counts as
discovered, once per episode, only when at least ``coupling`` agents are within
``capture_radius`` of it *at the same time*. The team signal is sparse (discoveries), so
a lone agent that greedily approaches targets earns nothing: agents must regroup. That
is the coordination problem the feudal selector is meant to solve.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from envs import _swarm
from envs._swarm import SwarmState
from envs.base import EnvOut, Obs, check_positive_float, check_positive_int
from envs.render import AGENT_COLOR, DONE_COLOR, LINK_COLOR, TARGET_COLOR


class Discovery(_swarm.TargetSwarmEnv):
    """Coupled multi-agent target discovery (MERL rover domain), pure JAX.

    State: :class:`envs._swarm.SwarmState` (``targets``/``found`` = targets / discovered).
    Agents and targets start uniform in ``[0, world_size]^2``; targets do not move.

    Action (per agent): velocity command in ``[-1, 1]^2``, clipped, times ``max_speed``
    (world units per step); positions are clipped to the world.

    Observation (per agent), float32:
      - ``"maps"`` ``[3, map_size, map_size]`` egocentric window of side
        ``2 * sensor_radius``: 0 undiscovered targets per cell, 1 neighbours within
        ``comm_radius`` per cell, 2 outside-the-world mask (``maps[c, iy, ix]``, iy up).
      - ``"vec"`` ``[9]``: own position in [-1, 1], velocity / max_speed, offset to the
        nearest undiscovered target and to the nearest other agent (/ world_size), t/T.
      - ``obs_mode`` chooses: ``"maps"`` (both entries above, the default), ``"vec"``
        (no maps: ``"vec"`` ``[9 + 2 * sectors]``, the above plus MERL-style sector
        densities of the undiscovered targets and of the other agents, for an MLP executor) or
        ``"both"`` (maps and the long vec); see :func:`envs._swarm.observe`.

    Rewards:
      - ``team_reward``: number of targets newly discovered this step (sparse).
      - ``skill_rewards[:, 0]`` "approach": decrease of the distance to the nearest
        undiscovered target (floored at ``capture_radius``), divided by ``max_speed``.
      - ``skill_rewards[:, 1]`` "regroup": decrease of the distance to the
        ``(coupling-1)``-th nearest teammate (floored at ``capture_radius``) / max_speed,
        i.e. forming a group big enough to meet the coupling; 0 when ``num_agents == 1``.
      - ``reward``: approach + the number of targets the agent helped discover this step.

    Episodes last ``max_steps`` steps (``done`` when ``t >= max_steps``); the env never
    resets itself. ``comm_graph`` links agents within ``comm_radius``.
    """

    num_agents: int = eqx.field(static=True)
    num_targets: int = eqx.field(static=True)
    coupling: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    world_size: float = eqx.field(static=True)
    max_speed: float = eqx.field(static=True)
    capture_radius: float = eqx.field(static=True)
    comm_radius: float = eqx.field(static=True)
    sensor_radius: float = eqx.field(static=True)
    map_size: int = eqx.field(static=True)
    obs_mode: str = eqx.field(static=True)
    sectors: int = eqx.field(static=True)
    skill_names: tuple[str, ...] = eqx.field(static=True)
    metric_better: ClassVar[dict[str, str]] = {"discovered_frac": "higher"}
    render_legend: ClassVar[tuple[tuple[str, tuple[int, int, int]], ...]] = (
        ("agents", AGENT_COLOR), ("comm links", LINK_COLOR), ("targets", TARGET_COLOR),
        ("discovered", DONE_COLOR))

    def __init__(
        self,
        num_agents: int = 8,
        num_targets: int | None = None,
        coupling: int = 2,
        max_steps: int = 100,
        world_size: float = 1.0,
        max_speed: float = 0.03,
        capture_radius: float = 0.05,
        comm_radius: float = 0.25,
        sensor_radius: float = 0.25,
        map_size: int = 16,
        obs_mode: str = "maps",
        sectors: int = 8,
    ):
        """``num_targets`` defaults to ``num_agents``; ``coupling`` must be <= ``num_agents``."""
        common = _swarm.check_common(num_agents, max_steps, world_size, max_speed,
                                     comm_radius, sensor_radius, map_size, obs_mode, sectors)
        for name, value in common.items():
            setattr(self, name, value)
        self.num_targets = check_positive_int(
            "num_targets", self.num_agents if num_targets is None else num_targets)
        self.coupling = check_positive_int("coupling", coupling)
        if self.coupling > self.num_agents:
            raise ValueError(f"coupling must be <= num_agents ({self.num_agents}), "
                             f"got {self.coupling}: no target could ever be discovered")
        self.capture_radius = check_positive_float("capture_radius", capture_radius)
        self.skill_names = ("approach", "regroup")

    # --- core ----------------------------------------------------------------------
    def reset(self, key: jax.Array) -> tuple[Obs, SwarmState]:
        """Agents and targets uniform over the world; nothing discovered; t = 0."""
        # one draw for everything: reset runs on every auto-reset step, keep it cheap
        u = jax.random.uniform(key, (self.num_agents + self.num_targets, 2), jnp.float32)
        points = u * self.world_size
        state = SwarmState(
            pos=points[: self.num_agents],
            vel=jnp.zeros((self.num_agents, 2), jnp.float32),
            targets=points[self.num_agents :],
            found=jnp.zeros(self.num_targets, bool),
            t=jnp.zeros((), jnp.int32),
        )
        return self.observe(state), state

    def step(self, key: jax.Array, state: SwarmState,
             actions: jax.Array) -> tuple[Obs, SwarmState, EnvOut]:
        """Move, discover targets that meet the coupling, score. Deterministic (key unused)."""
        del key
        pos, vel = _swarm.move(state.pos, actions, self.max_speed, self.world_size)
        newly, credit = _swarm.capture(pos, state.targets, state.found, self.capture_radius,
                                       self.coupling)
        open_t = ~state.found

        def to_target(p):
            d = _swarm.masked_min_dist(_swarm.sq_dists(p, state.targets), open_t)
            return jnp.maximum(d, self.capture_radius)

        approach = (to_target(state.pos) - to_target(pos)) / self.max_speed
        if self.num_agents > 1:
            k = min(max(self.coupling - 1, 1), self.num_agents - 1)

            def to_group(p):
                return jnp.maximum(_swarm.kth_neighbour_dist(p, k), self.capture_radius)

            regroup = (to_group(state.pos) - to_group(pos)) / self.max_speed
        else:
            regroup = jnp.zeros_like(approach)

        found = state.found | newly
        next_state = SwarmState(pos=pos, vel=vel, targets=state.targets, found=found,
                                t=state.t + 1)
        out = EnvOut(
            reward=approach + credit,
            skill_rewards=jnp.stack([approach, regroup], axis=-1),
            team_reward=jnp.sum(newly).astype(jnp.float32),
            done=next_state.t >= self.max_steps,
            metrics={"discovered_frac": jnp.mean(found.astype(jnp.float32))},
        )
        return self.observe(next_state), next_state, out

    @property
    def target_radius(self) -> float:
        return self.capture_radius


def greedy_policy(key: jax.Array, env: Discovery, state: SwarmState) -> jax.Array:
    """Reference policy: teams of ``coupling`` agents, each team to its own target.

    Agents are split by index into ``num_agents // coupling`` teams (leftovers join the
    last team). Teams, in order, greedily claim the undiscovered target nearest to their
    centroid; every member heads straight for its team's target and waits there, so the
    coupling is met on arrival. Returns ``[N, 2]`` actions; zeros once all are discovered.
    """
    del key
    n, c = env.num_agents, env.coupling
    num_teams = max(n // c, 1)
    team = jnp.minimum(jnp.arange(n) // c, num_teams - 1)
    size = jax.ops.segment_sum(jnp.ones(n, jnp.float32), team, num_teams)
    centroid = jax.ops.segment_sum(state.pos, team, num_teams) / size[:, None]
    open_t = ~state.found
    choice = _swarm.greedy_assign(_swarm.sq_dists(centroid, state.targets), open_t)
    goal = state.targets[choice[team]]
    actions = _swarm.head_to(state.pos, goal, env.max_speed)
    return jnp.where(jnp.any(open_t), actions, 0.0)
