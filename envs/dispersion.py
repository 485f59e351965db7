"""Dispersion: the swarm starts in a huddle and must spread out to reach scattered goals.

This is the huddle failure mode the toolkit targets: a policy trained on a dense "stay
close to your neighbours / go where they go" signal keeps the swarm bunched, and the
sparse team signal (goals reached) only rewards leaving the huddle in different
directions.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from envs import _swarm
from envs._swarm import SwarmState
from envs.base import EnvOut, Obs, check_positive_float, check_positive_int
from envs.render import AGENT_COLOR, DONE_COLOR, LINK_COLOR, TARGET_COLOR


class Dispersion(_swarm.TargetSwarmEnv):
    """Huddle-start dispersion to scattered goals, pure JAX.

    State: :class:`envs._swarm.SwarmState` (``targets``/``found`` = goals / reached).
    At reset all agents lie uniformly in a disc of radius ``huddle_radius`` around a
    random point of the world; goals are uniform over ``[0, world_size]^2``.

    Action (per agent): velocity command in ``[-1, 1]^2``, clipped, times ``max_speed``
    (world units per step); positions are clipped to the world.

    Observation (per agent), float32:
      - ``"maps"`` ``[3, map_size, map_size]`` egocentric window of side
        ``2 * sensor_radius``: 0 unreached goals per cell, 1 neighbours within
        ``comm_radius`` per cell, 2 outside-the-world mask (``maps[c, iy, ix]``, iy up).
      - ``"vec"`` ``[9]``: own position in [-1, 1], velocity / max_speed, offset to the
        nearest unreached goal and to the nearest other agent (/ world_size), t/T.
      - ``obs_mode`` chooses: ``"maps"`` (both entries above, the default), ``"vec"``
        (no maps: ``"vec"`` ``[9 + 2 * sectors]``, the above plus MERL-style sector
        densities of the unreached goals and of the other agents, for an MLP executor) or
        ``"both"`` (maps and the long vec); see :func:`envs._swarm.observe`.

    Rewards:
      - ``team_reward``: number of goals newly reached this step (a goal is reached when
        any agent is within ``goal_radius``; each goal counts once per episode).
      - ``skill_rewards[:, 0]`` "spread": increase of the distance to the nearest other
        agent, capped at ``spread_radius``, divided by ``max_speed`` (leave the huddle;
        no reward for spreading further than needed). 0 when ``num_agents == 1``.
      - ``skill_rewards[:, 1]`` "reach": decrease of the distance to the nearest unreached
        goal (floored at ``goal_radius``), divided by ``max_speed``.
      - ``reward``: reach + the number of goals the agent reached this step.

    Episodes last ``max_steps`` steps (``done`` when ``t >= max_steps``); the env never
    resets itself. ``comm_graph`` links agents within ``comm_radius``.
    """

    num_agents: int = eqx.field(static=True)
    num_goals: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    world_size: float = eqx.field(static=True)
    max_speed: float = eqx.field(static=True)
    goal_radius: float = eqx.field(static=True)
    huddle_radius: float = eqx.field(static=True)
    spread_radius: float = eqx.field(static=True)
    comm_radius: float = eqx.field(static=True)
    sensor_radius: float = eqx.field(static=True)
    map_size: int = eqx.field(static=True)
    obs_mode: str = eqx.field(static=True)
    sectors: int = eqx.field(static=True)
    skill_names: tuple[str, ...] = eqx.field(static=True)
    metric_better: ClassVar[dict[str, str]] = {"reached_frac": "higher"}
    render_legend: ClassVar[tuple[tuple[str, tuple[int, int, int]], ...]] = (
        ("agents", AGENT_COLOR), ("comm links", LINK_COLOR), ("goals", TARGET_COLOR),
        ("reached", DONE_COLOR))

    def __init__(
        self,
        num_agents: int = 8,
        num_goals: int | None = None,
        max_steps: int = 100,
        world_size: float = 1.0,
        max_speed: float = 0.03,
        goal_radius: float = 0.05,
        huddle_radius: float = 0.05,
        spread_radius: float | None = None,
        comm_radius: float = 0.25,
        sensor_radius: float = 0.25,
        map_size: int = 16,
        obs_mode: str = "maps",
        sectors: int = 8,
    ):
        """``num_goals`` defaults to ``num_agents``; ``spread_radius`` to
        ``0.5 * world_size / sqrt(num_agents)``, the mean nearest-neighbour distance of
        ``num_agents`` uniform points (as spread out as random goals are)."""
        common = _swarm.check_common(num_agents, max_steps, world_size, max_speed,
                                     comm_radius, sensor_radius, map_size, obs_mode, sectors)
        for name, value in common.items():
            setattr(self, name, value)
        self.num_goals = check_positive_int(
            "num_goals", self.num_agents if num_goals is None else num_goals)
        self.goal_radius = check_positive_float("goal_radius", goal_radius)
        self.huddle_radius = check_positive_float("huddle_radius", huddle_radius)
        if self.huddle_radius * 2 > self.world_size:
            raise ValueError(f"huddle_radius must be <= world_size / 2 ({self.world_size / 2})"
                             f", got {self.huddle_radius}")
        if spread_radius is None:
            spread_radius = 0.5 * self.world_size / float(np.sqrt(self.num_agents))
        self.spread_radius = check_positive_float("spread_radius", spread_radius)
        self.skill_names = ("spread", "reach")

    # --- core ----------------------------------------------------------------------
    def reset(self, key: jax.Array) -> tuple[Obs, SwarmState]:
        """Huddle: agents uniform in a disc of ``huddle_radius``; goals uniform; t = 0."""
        # one draw for everything: reset runs on every auto-reset step, keep it cheap
        n, m, r = self.num_agents, self.num_goals, self.huddle_radius
        u = jax.random.uniform(key, (2 * n + 2 * m + 2,), jnp.float32)
        centre = r + u[:2] * (self.world_size - 2 * r)
        rad = r * jnp.sqrt(u[2 : 2 + n])
        theta = (2 * jnp.pi) * u[2 + n : 2 + 2 * n]
        pos = centre + rad[:, None] * jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=-1)
        goals = u[2 + 2 * n :].reshape(m, 2) * self.world_size
        state = SwarmState(
            pos=jnp.clip(pos, 0.0, self.world_size),
            vel=jnp.zeros((self.num_agents, 2), jnp.float32),
            targets=goals,
            found=jnp.zeros(self.num_goals, bool),
            t=jnp.zeros((), jnp.int32),
        )
        return self.observe(state), state

    def step(self, key: jax.Array, state: SwarmState,
             actions: jax.Array) -> tuple[Obs, SwarmState, EnvOut]:
        """Move, mark goals reached, score. Deterministic (key unused)."""
        del key
        pos, vel = _swarm.move(state.pos, actions, self.max_speed, self.world_size)
        newly, credit = _swarm.capture(pos, state.targets, state.found, self.goal_radius, 1)
        open_g = ~state.found

        def to_goal(p):
            d = _swarm.masked_min_dist(_swarm.sq_dists(p, state.targets), open_g)
            return jnp.maximum(d, self.goal_radius)

        reach = (to_goal(state.pos) - to_goal(pos)) / self.max_speed
        if self.num_agents > 1:

            def spacing(p):
                return jnp.minimum(_swarm.kth_neighbour_dist(p, 1), self.spread_radius)

            spread = (spacing(pos) - spacing(state.pos)) / self.max_speed
        else:
            spread = jnp.zeros_like(reach)

        found = state.found | newly
        next_state = SwarmState(pos=pos, vel=vel, targets=state.targets, found=found,
                                t=state.t + 1)
        out = EnvOut(
            reward=reach + credit,
            skill_rewards=jnp.stack([spread, reach], axis=-1),
            team_reward=jnp.sum(newly).astype(jnp.float32),
            done=next_state.t >= self.max_steps,
            metrics={"reached_frac": jnp.mean(found.astype(jnp.float32))},
        )
        return self.observe(next_state), next_state, out

    @property
    def target_radius(self) -> float:
        return self.goal_radius


def greedy_policy(key: jax.Array, env: Dispersion, state: SwarmState) -> jax.Array:
    """Reference policy: agents, in index order, claim their nearest unclaimed open goal.

    Each agent heads straight for its claimed goal (falling back to its nearest open goal
    when there are more agents than open goals). Returns ``[N, 2]`` actions; zeros once
    every goal is reached.
    """
    del key
    open_g = ~state.found
    choice = _swarm.greedy_assign(_swarm.sq_dists(state.pos, state.targets), open_g)
    actions = _swarm.head_to(state.pos, state.targets[choice], env.max_speed)
    return jnp.where(jnp.any(open_g), actions, 0.0)
