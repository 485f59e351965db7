"""``FeudalActor``: LPAC backbone -> selector (each agent's option) -> executor action.

One word for the selector's choice: an agent's **option** is the skill it pursues (an
index into the env's ``skill_names``, whose dense reward channel the executor is trained
on) and, when the actor has a ``GoalSelector``, a sub-goal. A swarm's options are an
:data:`Option`: a ``[N]`` int32 array of skills, or a :class:`GoalOption` (skills and
sub-goals).

The rollout-facing API works on one env's swarm (obs leaves [N, ...], adjacency [N, N]);
``jax.vmap`` it over envs, and over a population of selectors (the selector's leaves are
:func:`agents.selector_filter`'s). All methods are pure and jittable.

The feudal time scale: the selector re-decides every ``selector_period`` steps
(``ActorConfig.selector_period``, held by the actor: whenever ``t % selector_period == 0``,
so at ``t = 0`` of every episode) and the option is kept in between; the rollout state
carries it. With ``ActorConfig.option_ends`` an agent's option also ends when its goal is
met (``done[i, option_i]``, the env's ``skill_done(state)``, which the rollouts pass in):
the selector re-decides for that agent at that step.

A recurrent executor (``ActorConfig.recurrent``) has a GRU state per agent. It travels
with the options: the carried value is a :class:`RecurrentOption` (the options and the
state), so every rollout that threads options through :meth:`FeudalActor.step` threads
the state too, and :meth:`FeudalActor.step` zeroes it at each episode's first step
(``t == 0``). MAPPO re-runs it over whole stored sequences
(:meth:`FeudalActor.evaluate_sequence`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp

from agents.backbone import LPACBackbone, as_obs_dict, obs_shapes
from agents.config import ActorConfig
from agents.heads import ActOut, Executor, GoalSelector, Selector, SkillSelector
from agents.layers import KeyLike, as_rng
from envs.base import OPTION_OBS, SELECTOR_OBS


class GoalOption(NamedTuple):
    """The options of a swarm whose selector also sets sub-goals."""

    skill: jax.Array  # [N] int32
    goal: jax.Array  # [N, G] float32 in (-1, 1)


class RecurrentOption(NamedTuple):
    """What a rollout carries for a recurrent executor: the options and the GRU state."""

    option: jax.Array | GoalOption  # [N] skills, or a GoalOption
    hidden: jax.Array  # [N, H] the GRU state after the last step (float32)


# a swarm's options: [N] skills, or a GoalOption (each wrapped in a RecurrentOption for a
# recurrent executor); the rollout carries it between decisions
Option = jax.Array | GoalOption | RecurrentOption


class FeudalActor(eqx.Module):
    """Backbone (executor side), selector (ES side) and executor head, composed."""

    backbone: LPACBackbone
    selector: Selector
    executor: Executor
    num_skills: int = eqx.field(static=True)
    goal_dim: int = eqx.field(static=True)
    options: str = eqx.field(static=True)  # ActorConfig.options
    fixed_option: int = eqx.field(static=True)
    option_schedule: tuple[int, ...] = eqx.field(static=True)  # ActorConfig.option_schedule
    selector_period: int = eqx.field(static=True)  # ActorConfig.selector_period
    option_ends: bool = eqx.field(static=True)  # ActorConfig.option_ends
    selector_input: str = eqx.field(static=True)  # ActorConfig.selector_input

    def __init__(
        self,
        key: KeyLike,
        obs_space: Any,
        action_space: gym.Space,
        num_skills: int,
        config: ActorConfig | None = None,
    ):
        if isinstance(num_skills, bool) or not isinstance(num_skills, int) or num_skills < 1:
            raise ValueError(f"num_skills must be an int >= 1, got {num_skills!r}")
        config = ActorConfig() if config is None else config
        if not isinstance(config, ActorConfig):
            raise TypeError(f"config must be an ActorConfig, got {type(config).__name__}")
        k_bb, k_skill, k_goal, k_exec = as_rng(key).spawn(4)
        self.backbone = LPACBackbone(k_bb, obs_space, config)
        self.selector_input = config.selector_input
        e = selector_features(obs_space, config)
        goal = None
        if config.goal_dim > 0:
            goal = GoalSelector(k_goal, e, config.goal_dim, config.selector_hidden)
        self.selector = Selector(
            SkillSelector(k_skill, e, num_skills, config.selector_hidden), goal
        )
        self.executor = Executor(k_exec, config.embed_dim, num_skills, action_space, config,
                                 option_features(obs_space, num_skills))
        self.num_skills = num_skills
        self.goal_dim = config.goal_dim
        if config.options == "fixed" and config.fixed_option >= num_skills:
            raise ValueError(f"ActorConfig.fixed_option={config.fixed_option} but the env has "
                             f"{num_skills} options")
        if any(o >= num_skills for o in config.option_schedule):
            raise ValueError(f"ActorConfig.option_schedule={config.option_schedule} but the "
                             f"env has {num_skills} options")
        self.options, self.fixed_option = config.options, config.fixed_option
        self.option_schedule = tuple(config.option_schedule)
        self.selector_period = config.selector_period
        self.option_ends = config.option_ends

    @classmethod
    def from_env(cls, key: KeyLike, env: Any, config: ActorConfig | None = None) -> Any:
        """Build from an env's per-agent ``observation_space``, ``action_space`` and
        ``skill_names``."""
        return cls(key, env.observation_space, env.action_space, len(env.skill_names), config)

    @property
    def recurrent(self) -> bool:
        """Whether the executor carries a GRU state (``ActorConfig.recurrent``)."""
        return self.executor.gru is not None

    # ------------------------------------------------------------------ pieces
    def embed(self, obs: Any, adj: jax.Array) -> jax.Array:
        """Per-agent embedding h [N, E]."""
        return self.backbone(obs, adj)

    def selector_in(self, obs: Any, adj: jax.Array) -> jax.Array:
        """What the selector reads, [N, E'] (``ActorConfig.selector_input``)."""
        return self._selector_in(self.embed(obs, adj), obs)

    def skill_logits(self, obs: Any, adj: jax.Array) -> jax.Array:
        """Selector logits [N, K]."""
        return self.selector.skill(self.selector_in(obs, adj))

    def initial_option(self, num_agents: int) -> Option:
        """Placeholder options (overwritten at ``t = 0``): zeros, or a zero
        :class:`GoalOption` when the actor has a ``GoalSelector``; for a recurrent
        executor wrapped in a :class:`RecurrentOption` with a zero state."""
        option: Option = jnp.zeros((num_agents,), jnp.int32)
        if self.goal_dim > 0:
            option = GoalOption(option, jnp.zeros((num_agents, self.goal_dim), jnp.float32))
        if not self.recurrent:
            return option
        return RecurrentOption(option, jnp.zeros((num_agents, self.executor.gru.hidden_size),
                                                 jnp.float32))

    # ------------------------------------------------------------------ rollout API
    def options_done(self, env: Any, state: Any) -> jax.Array | None:
        """What a rollout passes as ``done``: ``env.skill_done(state)`` (``[N, K]``) when
        this actor's options end when done (``option_ends``), else ``None`` (nothing
        computed, so an actor without it runs the same program as before)."""
        return env.skill_done(state) if self.option_ends else None

    def select_option(
        self, obs: Any, adj: jax.Array, prev: Option, t: jax.Array,
        key: jax.Array | None = None, done: jax.Array | None = None,
    ) -> Option:
        """The options to pursue now: chosen when ``t % selector_period == 0`` or, with
        ``option_ends``, for each agent whose option is done (``done``: ``[N, K]`` bool,
        the env's ``skill_done(state)``; ``None``: no goal is ever met) — the selector
        logits' argmax, or see ``ActorConfig.options``; ``key`` is needed for "uniform" —
        else ``prev``. Returns the type it was given."""
        return self._select(self.selector_in(obs, adj), prev, t, key, done=done)

    def act(
        self,
        key: jax.Array,
        obs: Any,
        adj: jax.Array,
        option: Option,
        deterministic: bool = False,
    ) -> ActOut:
        """Sample (or, if ``deterministic``, take the mode of) the executor's action
        pursuing ``option``. A recurrent executor reads ``option.hidden`` (a
        :class:`RecurrentOption`) as the state entering this step and does not return the
        next one: rollouts use :meth:`step`, which carries and resets it."""
        return self._act(key, self.embed(obs, adj), option, deterministic, obs)[1]

    def step(
        self,
        key: jax.Array,
        obs: Any,
        adj: jax.Array,
        prev: Option,
        t: jax.Array,
        deterministic: bool = False,
        explore: float = 0.0,
        done: jax.Array | None = None,
    ) -> tuple[Option, ActOut]:
        """``select_option`` then ``act`` on one shared embedding: ``(option, ActOut)``.

        ``explore``: at decision steps each agent's option is replaced, with this
        probability, by a uniformly random one (MAPPO's collection, so that the executor
        practises every option in every kind of state). The action key is ``key`` itself
        unless options are random (``explore > 0`` or ``options="uniform"``). ``done``: as
        in :meth:`select_option`."""
        h = self.embed(obs, adj)
        k_opt = None
        if explore > 0 or self.options == "uniform":
            key, k_opt = jax.random.split(key)
        option = self._select(self._selector_in(h, obs), prev, t, k_opt, explore, done)
        if isinstance(option, RecurrentOption):  # the GRU state starts each episode at 0
            option = option._replace(hidden=jnp.where(
                jnp.asarray(t).reshape(-1, 1) == 0, 0.0, option.hidden))
        return self._act(key, h, option, deterministic, obs)

    def evaluate(
        self, obs: Any, adj: jax.Array, option: Option, action: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """``(log_prob [N], entropy [N])`` of a stored ``ActOut.action`` (PPO update) of a
        feed-forward executor; a recurrent one needs the sequence
        (:meth:`evaluate_sequence`)."""
        if self.recurrent:
            raise ValueError("a recurrent executor's actions are evaluated over their "
                             "sequence: FeudalActor.evaluate_sequence")
        skills, goal = self._unpack(option)
        x = self.executor.inputs(self.embed(obs, adj), skills, goal, _option_obs(obs))
        return self.executor.head.evaluate(x, action)

    def evaluate_sequence(
        self, obs: Any, adj: jax.Array, option: RecurrentOption, action: jax.Array,
        first: jax.Array, hidden: jax.Array,
    ) -> tuple[jax.Array, jax.Array]:
        """``(log_prob [T, N], entropy [T, N])`` of the stored actions of ``T`` consecutive
        steps of one swarm (leaves time-major: ``obs`` [T, N, ...], ``adj`` [T, N, N],
        ``option`` as :meth:`step` returned it, ``action`` [T, N, ...]) for a recurrent
        executor: the GRU re-run from ``hidden`` ([N, H], the state entering step 0), set
        to zero at every step where ``first`` ([T] bool: the episode's first step) — the
        computation :meth:`step` made, now differentiable through time."""
        skills, goal = self._unpack(option)
        x = jax.vmap(lambda o, a, s, g: self.executor.inputs(
            self.embed(o, a), s, g, _option_obs(o)))(obs, adj, skills, goal)

        def body(h, xs):
            x_t, first_t = xs
            h = self.executor.recur(x_t, jnp.where(first_t, 0.0, h))
            return h, h

        _, hs = jax.lax.scan(body, hidden.astype(x.dtype), (x, first))
        return jax.vmap(self.executor.head.evaluate)(hs, action)

    # ------------------------------------------------------------------ internals
    def _unpack(self, option: Option) -> tuple[jax.Array, jax.Array]:
        if isinstance(option, RecurrentOption):
            option = option.option
        if isinstance(option, GoalOption):
            return option.skill, option.goal
        if self.goal_dim > 0:
            raise TypeError(
                f"this actor has a GoalSelector (goal_dim={self.goal_dim}): carry a GoalOption "
                "(see FeudalActor.initial_option), not a bare skill array"
            )
        option = jnp.asarray(option)
        return option, jnp.zeros((*option.shape, 0), jnp.float32)

    def _selector_in(self, h: jax.Array, obs: Any) -> jax.Array:
        if self.selector_input == "embedding":
            return h
        own = as_obs_dict(obs)[SELECTOR_OBS].astype(h.dtype)
        return own if self.selector_input == "own" else jnp.concatenate([h, own], axis=-1)

    def _select(self, z: jax.Array, prev: Option, t: jax.Array, key: jax.Array | None = None,
                explore: float = 0.0, done: jax.Array | None = None) -> Option:
        """``z``: the selector's input (:meth:`_selector_in`)."""
        if isinstance(prev, RecurrentOption):  # the state is the executor's, not chosen
            return prev._replace(option=self._select(z, prev.option, t, key, explore, done))
        prev_skill, prev_goal = self._unpack(prev)
        decide = jnp.broadcast_to(jnp.asarray(t) % self.selector_period == 0,
                                  prev_skill.shape)
        if self.option_ends and done is not None:
            ended = jnp.take_along_axis(jnp.asarray(done, bool),
                                        prev_skill.astype(jnp.int32)[:, None], axis=-1)[:, 0]
            decide = decide | ended
        shape, k = prev_skill.shape, self.num_skills
        if self.options == "fixed":
            new_skill = jnp.full(shape, self.fixed_option, jnp.int32)
        elif self.options == "schedule":
            d = jnp.minimum(jnp.asarray(t) // self.selector_period,
                            len(self.option_schedule) - 1)
            new_skill = jnp.broadcast_to(
                jnp.asarray(self.option_schedule, jnp.int32)[d], shape)
        elif self.options == "uniform" or explore > 0:
            if key is None:
                raise ValueError("random options (ActorConfig.options='uniform' or explore > "
                                 "0) need a key")
            k_pick, k_coin = jax.random.split(key)
            uniform = jax.random.randint(k_pick, shape, 0, k, jnp.int32)
            if self.options == "uniform":
                new_skill = uniform
            else:
                learned = jnp.argmax(self.selector.skill(z), axis=-1).astype(jnp.int32)
                new_skill = jnp.where(jax.random.uniform(k_coin, shape) < explore, uniform,
                                      learned)
        else:
            new_skill = jnp.argmax(self.selector.skill(z), axis=-1).astype(jnp.int32)
        skill = jnp.where(decide, new_skill, prev_skill.astype(jnp.int32))
        if not isinstance(prev, GoalOption):
            return skill
        goal = prev_goal
        if self.selector.goal is not None:
            goal = jnp.where(decide[:, None], self.selector.goal(z), prev_goal)
        return GoalOption(skill, goal.astype(jnp.float32))

    def _act(self, key: jax.Array, h: jax.Array, option: Option, deterministic: bool,
             obs: Any) -> tuple[Option, ActOut]:
        """``(option, ActOut)``: the action pursuing ``option``, and ``option`` with a
        recurrent executor's state advanced by this step (``option.hidden`` entering)."""
        skill, goal = self._unpack(option)
        x = self.executor.inputs(h, skill, goal, _option_obs(obs))
        if self.recurrent:
            if not isinstance(option, RecurrentOption):
                raise TypeError("a recurrent executor acts on a RecurrentOption (options and "
                                "the GRU state; see FeudalActor.initial_option)")
            x = self.executor.recur(x, option.hidden)
            option = option._replace(hidden=x)
        return option, self.executor.head.sample(key, x, deterministic)


def option_features(obs_space: Any, num_skills: int) -> int:
    """``F`` of the observation's per-option features (``envs.base.OPTION_OBS``, per agent
    ``[K, F]``), 0 when it has none; ``K`` must be the option count."""
    shape = obs_shapes(obs_space).get(OPTION_OBS)
    if shape is None:
        return 0
    if len(shape) != 2 or shape[0] != num_skills:
        raise ValueError(f"observation entry {OPTION_OBS!r} must be [num_options, features] "
                         f"per agent, i.e. [{num_skills}, F]; got {list(shape)}")
    return int(shape[1])


def selector_features(obs_space: Any, config: ActorConfig) -> int:
    """Size of the selector's input: ``embed_dim``, ``S`` of the observation's
    ``envs.base.SELECTOR_OBS`` (per agent ``[S]``) or their sum, as
    ``config.selector_input`` says; an env without that entry is refused for "own" and
    "both"."""
    if config.selector_input == "embedding":
        return config.embed_dim
    shape = obs_shapes(obs_space).get(SELECTOR_OBS)
    if shape is None:
        raise ValueError(f"ActorConfig.selector_input={config.selector_input!r} reads the "
                         f"observation entry {SELECTOR_OBS!r}, which this env does not have "
                         "(e.g. RoverMERL-v0 with selector_info=True); use 'embedding'")
    if len(shape) != 1:
        raise ValueError(f"observation entry {SELECTOR_OBS!r} must be a vector per agent, "
                         f"got per-agent shape {list(shape)}")
    own = int(shape[0])
    return own if config.selector_input == "own" else config.embed_dim + own


def _option_obs(obs: Any) -> jax.Array | None:
    return as_obs_dict(obs).get(OPTION_OBS)
