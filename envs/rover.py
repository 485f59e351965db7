"""Rover: the MERL rover domain (Majumdar, Khadka et al., ICML 2020) as a premise test.

Rovers start clustered in the centre of a square world; points of interest (POIs) lie in
the peripheral bands. A POI is *observed* once at least ``coupling`` rovers are within
``observe_radius`` of it at the same time, and the team reward, paid only at the end of
the episode, is the fraction of POIs observed. The dense channels a gradient learner
follows — MERL's local reward (saturating proximity to the nearest POI) and one "go to
POI k" channel per POI — never pay for being *together*, so they do not solve the
coupling by themselves: a team that splits up observes nothing. Choosing which rovers go
to which POI (the coordination variable) is the selector's job: its options are the POIs.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from envs import _swarm
from envs._swarm import SwarmState
from envs.base import (
    OPTION_OBS,
    SELECTOR_OBS,
    EnvOut,
    Obs,
    check_positive_float,
    check_positive_int,
)
from envs.render import AGENT_COLOR, DONE_COLOR, LINK_COLOR, TARGET_COLOR
from envs.validate import check_bool


class Rover(_swarm.TargetSwarmEnv):
    """Tightly coupled multi-rover POI observation (MERL's rover domain), pure JAX.

    State: :class:`envs._swarm.SwarmState` (``targets`` = POIs, ``found`` = observed).
    Reset: rovers uniform in the central square covering ``start_fraction`` of the world;
    POI ``i`` uniform in peripheral band ``i % 4`` (left, right, bottom, top strip of width
    ``band``, inset by 1 from the wall), so the POIs are spread around the start.

    Action (per rover): velocity command in ``[-1, 1]^2``, clipped, times ``max_speed``.

    Observation (per rover), float32, by ``obs_mode`` (default ``"vec"``):
      - ``"vec"``: ``[9 + 2 * sectors + 3 * num_pois (+ num_agents)]``: the shared swarm
        vector (own position, velocity, nearest unobserved POI, nearest rover, t/T; see
        :func:`envs._swarm.observe`), the MERL sector densities of unobserved POIs and of
        rovers, then each POI's offset (/ world_size) and observed flag in index order (so
        "go to POI k" is followable), and the rover's one-hot id when ``agent_ids``;
      - ``"maps"`` / ``"both"``: the local maps as the other swarm envs give them, with the
        short / long vector.

      With ``option_obs`` (default off: the Rover study's observation), also
      ``obs[OPTION_OBS]`` ``[N, num_pois, 3]``: per POI its offset (/ world_size) and
      observed flag, the row the executor holding "go to POI k" reads directly
      (:data:`envs.base.OPTION_OBS`). With ``selector_info`` (default off), also
      ``obs[SELECTOR_OBS]`` ``[N, N + num_pois]``: the rover's id one-hot and every POI's
      observed flag, the selector's own input (who I am, what is left;
      ``ActorConfig.selector_input``), as :class:`envs.rover_merl.RoverMERL` gives it.

    Rewards:
      - ``team_reward``: 0 until the last step, then the fraction of POIs observed.
      - ``skill_rewards[:, k]`` ("poi_k"): saturating proximity to POI k,
        ``min(1, observe_radius / d)``, every step; with ``paid_until_observed`` (default
        off) 0 once POI k is observed, so an option whose goal is met stops paying (with
        ``ActorConfig.option_ends`` the selector re-decides then; :meth:`skill_done`).
      - ``reward``: MERL's local reward, the saturating proximity to the nearest POI.

    Episodes last ``max_steps`` steps; the env never resets itself. ``comm_graph`` links
    rovers within ``comm_radius``.
    """

    num_agents: int = eqx.field(static=True)
    num_pois: int = eqx.field(static=True)
    coupling: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    world_size: float = eqx.field(static=True)
    max_speed: float = eqx.field(static=True)
    observe_radius: float = eqx.field(static=True)
    start_fraction: float = eqx.field(static=True)
    band: float = eqx.field(static=True)
    comm_radius: float = eqx.field(static=True)
    sensor_radius: float = eqx.field(static=True)
    map_size: int = eqx.field(static=True)
    obs_mode: str = eqx.field(static=True)
    sectors: int = eqx.field(static=True)
    agent_ids: bool = eqx.field(static=True)
    option_obs: bool = eqx.field(static=True)
    selector_info: bool = eqx.field(static=True)
    paid_until_observed: bool = eqx.field(static=True)
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
        world_size: float = 20.0,
        max_speed: float = 1.0,
        observe_radius: float = 2.0,
        start_fraction: float = 0.1,
        band: float = 3.0,
        comm_radius: float = 6.0,
        sensor_radius: float = 10.0,
        map_size: int = 16,
        obs_mode: str = "vec",
        sectors: int = 8,
        agent_ids: bool = True,
        option_obs: bool = False,
        selector_info: bool = False,
        paid_until_observed: bool = False,
    ):
        """``coupling`` must be <= ``num_agents``; the bands must fit the world."""
        common = _swarm.check_common(num_agents, max_steps, world_size, max_speed,
                                     comm_radius, sensor_radius, map_size, obs_mode, sectors)
        for name, value in common.items():
            setattr(self, name, value)
        self.num_pois = check_positive_int("num_pois", num_pois)
        self.coupling = check_positive_int("coupling", coupling)
        if self.coupling > self.num_agents:
            raise ValueError(f"coupling must be <= num_agents ({self.num_agents}), got "
                             f"{self.coupling}: no POI could ever be observed")
        self.observe_radius = check_positive_float("observe_radius", observe_radius)
        self.start_fraction = check_positive_float("start_fraction", start_fraction)
        if self.start_fraction > 1:
            raise ValueError(f"start_fraction must be <= 1, got {self.start_fraction}")
        self.band = check_positive_float("band", band)
        if 2 * (self.band + 1) >= self.world_size:
            raise ValueError(f"band must be < world_size / 2 - 1 ({self.world_size / 2 - 1})"
                             f", got {self.band}")
        if not isinstance(agent_ids, bool):
            raise TypeError(f"agent_ids must be a bool, got {agent_ids!r}")
        self.agent_ids = agent_ids
        self.option_obs = check_bool("option_obs", option_obs)
        self.selector_info = check_bool("selector_info", selector_info)
        self.paid_until_observed = check_bool("paid_until_observed", paid_until_observed)
        self.skill_names = tuple(f"poi_{k}" for k in range(self.num_pois))

    # --- core ----------------------------------------------------------------------
    def reset(self, key: jax.Array) -> tuple[Obs, SwarmState]:
        """Rovers in the central square, POI ``i`` in peripheral band ``i % 4``; t = 0."""
        n, m, w = self.num_agents, self.num_pois, self.world_size
        u = jax.random.uniform(key, (n + m, 2), jnp.float32)
        side = w * jnp.sqrt(self.start_fraction)
        pos = (w - side) / 2 + u[:n] * side
        lo, hi = 1.0, w - 1.0
        along = lo + u[n:, 0] * (hi - lo)  # position along the band
        across = lo + u[n:, 1] * self.band  # depth into the band from its wall
        side_ = jnp.arange(m) % 4  # 0 left, 1 right, 2 bottom, 3 top
        x = jnp.select([side_ == 0, side_ == 1], [across, w - across], along)
        y = jnp.select([side_ == 2, side_ == 3], [across, w - across], along)
        state = SwarmState(pos=pos, vel=jnp.zeros((n, 2), jnp.float32),
                           targets=jnp.stack([x, y], axis=-1), found=jnp.zeros(m, bool),
                           t=jnp.zeros((), jnp.int32))
        return self.observe(state), state

    def proximity(self, pos: jax.Array, pois: jax.Array) -> jax.Array:
        """``[N, M]`` saturating proximity ``min(1, observe_radius / d)``."""
        d = jnp.sqrt(_swarm.sq_dists(pos, pois))
        return jnp.minimum(1.0, self.observe_radius / jnp.maximum(d, 1e-6))

    def step(self, key: jax.Array, state: SwarmState,
             actions: jax.Array) -> tuple[Obs, SwarmState, EnvOut]:
        """Move, mark POIs the coupling observes, score. Deterministic (key unused)."""
        del key
        pos, vel = _swarm.move(state.pos, actions, self.max_speed, self.world_size)
        newly, _ = _swarm.capture(pos, state.targets, state.found, self.observe_radius,
                                  self.coupling)
        found = state.found | newly
        next_state = SwarmState(pos=pos, vel=vel, targets=state.targets, found=found,
                                t=state.t + 1)
        done = next_state.t >= self.max_steps
        prox = self.proximity(pos, state.targets)
        observed = jnp.mean(found.astype(jnp.float32))
        out = EnvOut(
            reward=jnp.max(prox, axis=-1),
            skill_rewards=jnp.where(found[None, :], 0.0, prox) if self.paid_until_observed
            else prox,
            team_reward=jnp.where(done, observed, 0.0),
            done=done,
            metrics={"observed_frac": observed},
        )
        return self.observe(next_state), next_state, out

    def observe(self, state: SwarmState) -> Obs:
        obs = super().observe(state)
        n = self.num_agents
        rel = (state.targets[None, :, :] - state.pos[:, None, :]) / self.world_size
        if self.option_obs:  # per POI k: what "go to POI k" reads (see the class doc)
            flag = jnp.broadcast_to(state.found.astype(jnp.float32)[None, :, None],
                                    (n, self.num_pois, 1))
            obs = {**obs, OPTION_OBS: jnp.concatenate([rel, flag], axis=-1)}
        if self.selector_info:  # who I am, what is left (see the class doc)
            obs = {**obs, SELECTOR_OBS: jnp.concatenate(
                [jnp.eye(n, dtype=jnp.float32),
                 jnp.broadcast_to(state.found.astype(jnp.float32), (n, self.num_pois))], -1)}
        if self.obs_mode == "maps":
            return obs
        extra = [rel.reshape(n, -1),
                 jnp.broadcast_to(state.found.astype(jnp.float32), (n, self.num_pois))]
        if self.agent_ids:
            extra.append(jnp.eye(n, dtype=jnp.float32))
        return {**obs, "vec": jnp.concatenate([obs["vec"], *extra], axis=-1)}

    @property
    def target_radius(self) -> float:
        return self.observe_radius

    def skill_done(self, state: SwarmState) -> jax.Array:
        """``[N, K]``: option "poi_k" is done for every rover once POI k is observed."""
        return jnp.broadcast_to(state.found[None, :], (self.num_agents, self.num_pois))


def team_of(env: Rover) -> jax.Array:
    """``[N]`` team of each rover: index blocks of ``coupling`` (leftovers join the last)."""
    num_teams = max(env.num_agents // env.coupling, 1)
    return jnp.minimum(jnp.arange(env.num_agents) // env.coupling, num_teams - 1)


def nearest_poi_policy(key: jax.Array, env: Rover, state: SwarmState) -> jax.Array:
    """Reference: every rover heads for its nearest POI and stays there — what MERL's
    local reward (proximity to the nearest POI) alone asks for."""
    del key
    goal = state.targets[jnp.argmin(_swarm.sq_dists(state.pos, state.targets), axis=-1)]
    return _swarm.head_to(state.pos, goal, env.max_speed)


def team_policy(key: jax.Array, env: Rover, state: SwarmState) -> jax.Array:
    """Reference: hand-coded team assignment. Rovers form ``num_agents // coupling``
    teams of ``coupling`` (by index); team ``g`` heads for the ``g``-th unobserved POI in
    index order (wrapping around when fewer remain), so each team meets the coupling at
    its POI, then moves on to the next unobserved one. Zeros once every POI is observed."""
    del key
    open_ = ~state.found
    count = jnp.maximum(jnp.sum(open_), 1)
    order = jnp.argsort(jnp.where(open_, jnp.arange(env.num_pois), env.num_pois))
    goal = state.targets[order[team_of(env) % count]]
    return jnp.where(jnp.any(open_), _swarm.head_to(state.pos, goal, env.max_speed), 0.0)
