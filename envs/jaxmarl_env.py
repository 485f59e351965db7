"""JaxMARL environments on feudal-es's pure-JAX path, and the bundled envs as JaxMARL ones.

:class:`JaxMARLSwarm` wraps any ``jaxmarl`` ``MultiAgentEnv`` with flat vector
observations (MPE, SMAX, ...) as a :class:`~envs.base.SwarmEnv`, so its users train at
full JAX speed (``feudal-es train --env jaxmarl/MPE_simple_spread_v3``):

- observations: the per-agent dict stacked to ``{"obs": [N, D]}``;
- actions: ``[N]`` (Discrete) or ``[N, A]`` (Box) back to the per-agent dict;
- agents with different spaces (``MPE_simple_speaker_listener_v4``, ``MPE_simple_tag_v3``)
  come in groups (``agent_groups``, :mod:`envs.groups`: one actor per group): each
  observation zero-padded to the largest, each agent reading its own part of the
  stacked actions; or, ``pad=True`` (``TrainerConfig.pad_agents``), behind one shared
  actor as SuperSuit pads a PettingZoo env: observations zero-padded with a one-hot of
  the agent appended, one action space of the largest (a ``Discrete`` action outside an
  agent's own space is its action 0, a ``Box`` one is cut to its length);
- ``step`` runs the env's ``step_env`` (no auto-reset: feudal-es resets); ``done`` is
  ``dones["__all__"]`` or the horizon; after ``done`` the state is frozen and rewards are
  0, so a fixed-length fitness episode never counts a finished episode twice;
- ``team_reward`` is the mean agent reward (of the team's agents, ``with_team``;
  ``group_teams``: every group is its own team for MAPPO's team rewards,
  :func:`feudal_es.group_fitness.agent_team_reward`), ``skill_rewards`` the agent's own
  reward
  (one skill, ``"reward"``), ``comm_graph`` all-to-all, ``global_state`` the env's
  ``world_state``/``get_world_state`` if it has one, else the concatenated observations.

:class:`AsJaxMARL` goes the other way: a bundled env as a ``jaxmarl`` ``MultiAgentEnv``
(reset / step_env / spaces per agent), for JaxMARL's own baselines.

``jaxmarl`` is an optional dependency (:data:`INSTALL_HINT`): this module
imports it only when an env is made.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from envs.base import EnvOut, Obs, SwarmEnv
from envs.groups import AgentGroup, group_agents, padded_action_space, team_agents
from envs.render import AGENT_COLOR, TARGET_COLOR, draw_swarm

__all__ = ["INSTALL_HINT", "AsJaxMARL", "JaxMARLSwarm", "available", "jaxmarl_ids",
           "make_jaxmarl"]

# feudal-es is installed from its checkout (it is not on PyPI), so is its extra
INSTALL_HINT = 'from the feudal-es checkout, pip install -e ".[jaxmarl]" (or: pip install jaxmarl)'


def available() -> bool:
    """Whether ``jaxmarl`` is installed (nothing is imported)."""
    return importlib.util.find_spec("jaxmarl") is not None


def _jaxmarl() -> Any:
    """``import jaxmarl``, without the lines it prints about its optional submodules (one
    of its imports rebinds ``sys.stdout``, so the file descriptor itself is silenced)."""
    if "jaxmarl" in sys.modules:
        return sys.modules["jaxmarl"]
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            import jaxmarl
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    return jaxmarl


_NEEDS = {"brax": ("ant_4x2", "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8", "walker2d_2x3"),
          "jaxrobotarium": ("JaxRobotarium_",)}  # optional packages of JaxMARL's envs


def jaxmarl_ids() -> list[str]:
    """JaxMARL's registered env names whose own optional packages are installed (empty
    when jaxmarl is not). Whether an env's agents can be grouped shows when it is made."""
    if not available():
        return []
    missing = tuple(p for pkg, prefixes in _NEEDS.items()
                    if importlib.util.find_spec(pkg) is None for p in prefixes)
    return [n for n in _jaxmarl().registered_envs if not n.startswith(missing)]


class JaxMARLState(NamedTuple):
    """The wrapped env's state, the step count and whether the episode is over."""

    inner: Any
    t: jax.Array  # [] int32 steps taken
    over: jax.Array  # [] bool: the episode ended (done latched)


def _space(space: Any, what: str) -> gym.Space:
    """A jaxmarl space as the Gymnasium space the actor reads."""
    if hasattr(space, "n"):  # jaxmarl.environments.spaces.Discrete
        return gym.spaces.Discrete(int(space.n))
    if hasattr(space, "low") and hasattr(space, "shape"):
        shape = tuple(int(d) for d in space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
        return gym.spaces.Box(low, high, shape, np.float32)
    raise ValueError(f"{what} space {type(space).__name__} is not supported (Discrete or Box)")


class _Groups(tuple):
    """The env's agent groups as a static field: compared and hashed by what they hold
    (Gymnasium spaces are not hashable)."""

    def _key(self) -> tuple:
        return tuple((g.name, g.agents, str(g.observation_space), str(g.action_space))
                     for g in self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Groups) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class JaxMARLSwarm(SwarmEnv):
    """A ``jaxmarl`` ``MultiAgentEnv`` behind the SwarmEnv interface, its agents in groups
    by their spaces (or the user's, ``regrouped``) or padded to one (see the
    module docstring). ``max_steps`` is the horizon: the env's ``max_steps + 1`` when it
    has one (MPE's episodes are 26 steps for ``max_steps=25``), which may overshoot the
    env's own end (the steps after ``done`` are frozen and score 0)."""

    env: Any = eqx.field(static=True)
    name: str = eqx.field(static=True)
    agents: tuple[str, ...] = eqx.field(static=True)
    num_agents: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    skill_names: tuple[str, ...] = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)  # the largest agent's (the others padded)
    # ("discrete", n) or ("box", shape, low, high): hashable, unlike Gymnasium spaces; of
    # the stacked (padded) actions
    action: tuple = eqx.field(static=True)
    obs_sizes: tuple[int, ...] = eqx.field(static=True)  # each agent's own
    action_sizes: tuple[int, ...] = eqx.field(static=True)  # each agent's Box length (0)
    action_ns: tuple[int, ...] = eqx.field(static=True)  # each agent's Discrete n (0)
    groups: tuple[AgentGroup, ...] = eqx.field(static=True)  # one: homogeneous
    pad: bool = eqx.field(static=True)  # one shared actor over padded spaces
    team: tuple[int, ...] = eqx.field(static=True)  # with_team's agents (): every agent
    team_name: str = eqx.field(static=True)  # their group's name ("": none named)
    # every group trains on its own team reward (TrainerConfig.others="train"): MAPPO's
    # team part of an agent's reward is its group's (feudal_es.group_fitness)
    group_teams: bool = eqx.field(static=True)
    # the user's groups (TrainerConfig.groups: group name -> agent names), hashable
    user_groups: tuple[tuple[str, tuple[str, ...]], ...] = eqx.field(static=True)
    render_legend: ClassVar[tuple[tuple[str, tuple[int, int, int]], ...]] = (
        ("agents", AGENT_COLOR), ("landmarks (MPE)", TARGET_COLOR))

    def __init__(self, env: Any, name: str = "jaxmarl", max_steps: int | None = None,
                 pad: bool = False, team: str = "", group_teams: bool = False,
                 groups: Mapping[str, Sequence[str]] | None = None):
        self.env, self.name, self.pad = env, name, bool(pad)
        self.group_teams = bool(group_teams)
        self.user_groups = tuple((str(k), tuple(v)) for k, v in (groups or {}).items())
        self.agents = tuple(env.agents)
        self.num_agents = len(self.agents)
        if not self.agents:
            raise ValueError(f"{name}: the env has no agents")
        obs = [_space(env.observation_space(a), "observation") for a in self.agents]
        act = [_space(env.action_space(a), "action") for a in self.agents]
        for agent, o in zip(self.agents, obs, strict=True):
            if not isinstance(o, gym.spaces.Box) or len(o.shape) != 1:
                raise ValueError(f"{name}: observations must be flat vectors, got {o} for "
                                 f"agent {agent!r}")
        groups = group_agents(self.agents, obs, act, name, dict(self.user_groups))
        self.team, self.team_name = team_agents(groups, team), team
        self.obs_sizes = tuple(int(o.shape[0]) for o in obs)
        self.obs_size = max(self.obs_sizes) + (self.num_agents if self.pad else 0)
        self.action_sizes = tuple(0 if isinstance(a, gym.spaces.Discrete) else
                                  int(a.shape[0]) for a in act)
        self.action_ns = tuple(int(a.n) if isinstance(a, gym.spaces.Discrete) else 0
                               for a in act)
        a = act[0] if len(groups) == 1 else padded_action_space(groups)
        if self.pad:  # one group: every agent, in the padded spaces
            groups = (AgentGroup("agent", tuple(range(self.num_agents)), gym.spaces.Box(
                -np.inf, np.inf, (self.obs_size,), np.float32), a),)
        self.groups = _Groups(groups)
        self.action = (("discrete", int(a.n)) if isinstance(a, gym.spaces.Discrete) else
                       ("box", a.shape, tuple(a.low.ravel().tolist()),
                        tuple(a.high.ravel().tolist())))
        horizon = max_steps if max_steps is not None else getattr(env, "max_steps", None)
        if horizon is None:
            raise ValueError(f"{name}: the env has no max_steps; pass max_steps (the "
                             "longest episode) to JaxMARLSwarm")
        self.max_steps = int(horizon) + (max_steps is None)
        self.skill_names = ("reward",)

    @property
    def agent_groups(self) -> tuple[AgentGroup, ...]:
        """The agents by their spaces (:mod:`envs.groups`); one group: homogeneous."""
        return tuple(self.groups)

    # --- core ------------------------------------------------------------------------
    def padded(self) -> JaxMARLSwarm:
        """This env with ``pad=True`` (see the module docstring), same horizon."""
        return self._with(pad=True)

    def with_team(self, name: str, group_teams: bool = False) -> JaxMARLSwarm:
        """This env with group ``name``'s agents as the team (``TrainerConfig.team``): the
        team reward is their mean reward. ``""``: every agent's. ``group_teams``: every
        group is its own team for MAPPO (``TrainerConfig.others="train"``)."""
        return self._with(team=name, group_teams=group_teams)

    def regrouped(self, groups: Mapping[str, Sequence[str]]) -> JaxMARLSwarm:
        """This env with the agents ``groups`` names (group name -> agent names,
        ``TrainerConfig.groups``) in those groups, the rest by their spaces
        (:func:`envs.groups.group_agents`)."""
        return self._with(groups=groups)

    def _with(self, **changes: Any) -> JaxMARLSwarm:
        settings = dict(pad=self.pad, team=self.team_name, group_teams=self.group_teams,
                        groups=dict(self.user_groups))
        return JaxMARLSwarm(self.env, self.name, self.max_steps, **{**settings, **changes})

    def _stack(self, obs: dict) -> Obs:
        width = self.obs_size - (self.num_agents if self.pad else 0)
        row = lambda a, d: jnp.pad(jnp.asarray(obs[a], jnp.float32).reshape(-1),
                                   (0, width - d))
        rows = jnp.stack([row(a, d) for a, d in zip(self.agents, self.obs_sizes,
                                                    strict=True)])
        if self.pad:  # the agent indicator
            rows = jnp.concatenate([rows, jnp.eye(self.num_agents, dtype=jnp.float32)], -1)
        return {"obs": rows}

    def reset(self, key: jax.Array) -> tuple[Obs, JaxMARLState]:
        obs, inner = self.env.reset(key)
        return self._stack(obs), JaxMARLState(inner, jnp.zeros((), jnp.int32),
                                              jnp.zeros((), bool))

    def step(self, key: jax.Array, state: JaxMARLState,
             actions: jax.Array) -> tuple[Obs, JaxMARLState, EnvOut]:
        if self.pad and self.action[0] == "discrete":  # outside its own space: action 0
            actions = jnp.where(actions < jnp.asarray(self.action_ns), actions, 0)
        acts = {a: actions[i] if not size else actions[i, :size]
                for i, (a, size) in enumerate(zip(self.agents, self.action_sizes,
                                                  strict=True))}
        obs, inner, rewards, dones, _ = self.env.step_env(key, state.inner, acts)
        live = ~state.over
        reward = jnp.where(live, jnp.stack([jnp.asarray(rewards[a], jnp.float32)
                                            for a in self.agents]), 0.0)
        t = state.t + 1
        over = state.over | jnp.asarray(dones["__all__"], bool) | (t >= self.max_steps)
        inner = jax.tree.map(lambda new, old: jnp.where(live, new, old), inner, state.inner)
        obs = self._stack(obs)
        team = reward[jnp.asarray(self.team)].mean() if self.team else reward.mean()
        out = EnvOut(reward=reward, skill_rewards=reward[:, None], team_reward=team,
                     done=over, metrics={})
        return obs, JaxMARLState(inner, t, over), out

    def observe(self, state: JaxMARLState) -> Obs:
        return self._stack(self.env.get_obs(state.inner))

    def _world_state(self) -> Any:
        for name in ("world_state", "get_world_state"):
            fn = getattr(self.env, name, None)
            if callable(fn):
                return fn
        return None

    def global_state(self, state: JaxMARLState) -> jax.Array:
        return self.global_state_at(state, self.observe(state))

    def global_state_at(self, state: JaxMARLState, obs: Obs) -> jax.Array:
        fn = self._world_state()
        if fn is not None:  # an array, or per-agent arrays (a dict: in key order)
            parts = jax.tree.leaves(fn(state.inner))
            return jnp.concatenate([jnp.asarray(x, jnp.float32).reshape(-1) for x in parts])
        return obs["obs"].reshape(-1)

    def comm_graph(self, state: JaxMARLState) -> jax.Array:
        del state
        return 1.0 - jnp.eye(self.num_agents, dtype=jnp.float32)

    # --- host-side -----------------------------------------------------------------
    @property
    def observation_space(self) -> gym.spaces.Dict:
        return gym.spaces.Dict({"obs": gym.spaces.Box(-np.inf, np.inf, (self.obs_size,),
                                                      np.float32)})

    @property
    def action_space(self) -> gym.Space:
        if self.action[0] == "discrete":
            return gym.spaces.Discrete(self.action[1])
        _, shape, low, high = self.action
        return gym.spaces.Box(np.reshape(low, shape).astype(np.float32),
                              np.reshape(high, shape).astype(np.float32), shape, np.float32)

    def render(self, state: JaxMARLState) -> np.ndarray:
        """MPE-style states (``p_pos``: agents first, then landmarks) drawn in a 3x3
        world centred on the origin; other envs cannot be drawn."""
        pos = getattr(state.inner, "p_pos", None)
        if pos is None:
            raise NotImplementedError(f"{self.name}: no picture of this env's state")
        pos = np.asarray(pos, np.float64) + 1.5
        n = self.num_agents
        return draw_swarm(3.0, np.clip(pos[:n], 0.0, 3.0), targets=np.clip(pos[n:], 0.0, 3.0),
                          target_radius=0.1)


def make_jaxmarl(name: str, **kwargs: Any) -> JaxMARLSwarm:
    """``jaxmarl.make(name, **kwargs)`` as a :class:`JaxMARLSwarm` (``max_steps`` may be
    among ``kwargs``: the env's own argument, and the horizon)."""
    if not available():
        raise ValueError(f"env 'jaxmarl/{name}' needs the jaxmarl package: {INSTALL_HINT}")
    jaxmarl = _jaxmarl()
    if name not in jaxmarl.registered_envs:
        import difflib

        close = difflib.get_close_matches(name, jaxmarl.registered_envs, n=3)
        raise ValueError(f"unknown jaxmarl env {name!r}"
                         + (f"; did you mean {close}?" if close else ""))
    return JaxMARLSwarm(jaxmarl.make(name, **kwargs), name=f"jaxmarl/{name}")


class AsJaxMARL:
    """A bundled SwarmEnv as a ``jaxmarl`` ``MultiAgentEnv`` (agents ``agent_<i>``; the
    per-agent observation is the SwarmEnv's obs dict row; ``step`` auto-resets like every
    JaxMARL env). Built lazily so that ``jaxmarl`` stays optional."""

    def __new__(cls, core: SwarmEnv) -> Any:
        from jaxmarl.environments import spaces
        from jaxmarl.environments.multi_agent_env import MultiAgentEnv

        class Wrapped(MultiAgentEnv):
            def __init__(self) -> None:
                super().__init__(core.num_agents)
                self.core, self.max_steps = core, core.max_steps
                box = core.action_space
                obs = {k: spaces.Box(-jnp.inf, jnp.inf, s.shape)
                       for k, s in core.observation_space.spaces.items()}
                self.observation_spaces = {a: spaces.Dict(obs) for a in self.agents}
                self.action_spaces = {a: spaces.Box(box.low, box.high, box.shape)
                                      for a in self.agents}

            def _split(self, obs: Obs) -> dict:
                return {a: jax.tree.map(lambda x, i=i: x[i], obs)
                        for i, a in enumerate(self.agents)}

            def reset(self, key: jax.Array) -> tuple[dict, Any]:
                obs, state = core.reset(key)
                return self._split(obs), state

            def step_env(self, key: jax.Array, state: Any, actions: dict) -> tuple:
                acts = jnp.stack([actions[a] for a in self.agents])
                obs, state, out = core.step(key, state, acts)
                rewards = {a: out.reward[i] for i, a in enumerate(self.agents)}
                dones = {a: out.done for a in self.agents} | {"__all__": out.done}
                return self._split(obs), state, rewards, dones, {
                    "team_reward": out.team_reward, "skill_rewards": out.skill_rewards}

            def get_obs(self, state: Any) -> dict:
                return self._split(core.observe(state))

        return Wrapped()
