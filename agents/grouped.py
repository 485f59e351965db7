"""``GroupedActor``: one :class:`~agents.actor.FeudalActor` per group of agents.

Agents with different spaces (``envs.groups``) get one feudal actor per group, its
parameters shared by the group's agents, as BenchMARL's agent groups. The grouped actor
has the feudal actor's rollout-facing API on the env's one agent axis (observations
padded to the largest, actions stacked; see :mod:`envs.groups`), so MAPPO, the ES
rollouts, evaluation and checkpoints run it unchanged: each method cuts every group's
rows out (their observations to their own size, the comm graph to the group's agents),
runs that group's actor, and puts the results back in agent order. The selector's
leaves are every group's selector's (:func:`agents.selector_filter`): ES evolves them
together on the team fitness; MAPPO trains every group's executor.

With a named ``team`` (``TrainerConfig.team``, a mixed cooperative / competitive env),
``others`` (``TrainerConfig.others``) says what the other groups do: act uniformly at
random in their own action spaces (``"random"``, the default), run a scripted JAX policy
(a callable), play their own actor frozen (``"actor"``: its parameters are a saved run's,
put in by :meth:`GroupedActor.with_group_actors`), or train too (``"train"``, each on its
own group's fitness). A fixed group (the first three) is not trained: its log-probabilities
are 0, :attr:`GroupedActor.agent_mask` leaves it out of MAPPO's losses and its selector is
not ES's, so its parameters stay bit for bit as they are; random and scripted groups'
options and GRU states pass through unchanged.

Every group's actor has the same ``ActorConfig`` (sizes, option period, recurrence), so
their options and GRU states stack; sub-goals (``goal_dim``) and a selector reading the
env's ``selector_obs`` are not offered for groups. Within a group, graph communication
runs among the group's agents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from agents.actor import FeudalActor, Option
from agents.config import ActorConfig
from agents.heads import ActOut
from agents.layers import KeyLike, as_rng
from envs.groups import AgentGroup


def _group_space(space: gym.Space, size: int) -> gym.Space:
    """The env's (padded) per-agent observation space with its one vector cut to
    ``size``: a flat ``Box``, or a ``Dict`` holding exactly one."""
    box = lambda: gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return box()
    if isinstance(space, gym.spaces.Dict) and len(space.spaces) == 1:
        (name, inner), = space.spaces.items()
        if isinstance(inner, gym.spaces.Box) and len(inner.shape) == 1:
            return gym.spaces.Dict({name: box()})
    raise ValueError(f"agents in groups read one flat observation vector, got {space}")


def _fixed(group: AgentGroup, others: str | Callable) -> tuple | None:
    """How a group other than the team acts (``GroupedActor.fixed``'s entry) under
    ``others``: "random", "train" (None: it trains), "actor" (its own, frozen), or a
    scripted policy (a callable)."""
    if callable(others):
        return ("script", others)
    if others == "train":
        return None
    if others == "actor":
        return ("actor",)
    if others != "random":
        raise ValueError(f"others must be 'random', 'train', 'actor' or a callable, got "
                         f"{others!r}")
    space = group.action_space
    if isinstance(space, gym.spaces.Discrete):
        return ("random", "discrete", int(space.n))
    return ("random", "box", tuple(np.asarray(space.low, float).tolist()),
            tuple(np.asarray(space.high, float).tolist()))


def _scripted(fn: Callable, key: jax.Array, obs: Any, n: int, action_size: int
              ) -> jax.Array:
    """``fn(key, obs)``'s actions of a group's ``n`` agents (``obs``: their observations,
    cut to the group's size), checked: ``[n]`` ints for a Discrete space, ``[n,
    action_size]`` floats for a Box."""
    name = getattr(fn, "__qualname__", repr(fn))
    a = jnp.asarray(fn(key, obs))
    want = (n,) if not action_size else (n, action_size)
    if a.shape != want:
        raise ValueError(f"the scripted policy {name} returned actions of shape {a.shape} "
                         f"for {n} agents; their action space wants {want}")
    if not action_size:
        if not jnp.issubdtype(a.dtype, jnp.integer):
            raise ValueError(f"the scripted policy {name} returned {a.dtype} actions for a "
                             "Discrete space (integers wanted)")
        return a.astype(jnp.int32)
    return a.astype(jnp.float32)


class GroupedActor(eqx.Module):
    """One :class:`FeudalActor` per :class:`~envs.groups.AgentGroup` (see the module
    docstring); built from the groups, the env's padded per-agent observation space and
    its option count."""

    actors: tuple[FeudalActor, ...]
    groups: tuple[tuple[int, ...], ...] = eqx.field(static=True)  # agent indices per group
    names: tuple[str, ...] = eqx.field(static=True)
    obs_sizes: tuple[int, ...] = eqx.field(static=True)
    action_sizes: tuple[int, ...] = eqx.field(static=True)  # Box lengths (Discrete: 0)
    num_agents: int = eqx.field(static=True)
    # per group: None (its actor acts and trains), or how a fixed group acts (another
    # group is the team): ("random", "discrete", n) / ("random", "box", low, high)
    # uniformly at random, ("script", fn) a scripted policy, ("actor",) its own actor,
    # frozen
    fixed: tuple[tuple | None, ...] = eqx.field(static=True)

    def __init__(self, key: KeyLike, groups: Sequence[AgentGroup], obs_space: gym.Space,
                 num_skills: int, config: ActorConfig | None = None, team: str = "",
                 others: str | Callable = "random"):
        config = ActorConfig() if config is None else config
        if config.goal_dim > 0:
            raise ValueError("ActorConfig.goal_dim > 0 (sub-goals) is not offered for agents "
                             "in groups")
        if config.selector_input != "embedding":
            raise ValueError(f"ActorConfig.selector_input={config.selector_input!r} reads the "
                             "env's selector_obs, which agents in groups do not have; use "
                             "'embedding'")
        rngs = as_rng(key).spawn(len(groups))
        self.actors = tuple(
            FeudalActor(r, _group_space(obs_space, g.obs_size), g.action_space, num_skills,
                        config) for r, g in zip(rngs, groups, strict=True))
        self.groups = tuple(tuple(int(i) for i in g.agents) for g in groups)
        self.names = tuple(g.name for g in groups)
        self.obs_sizes = tuple(g.obs_size for g in groups)
        self.action_sizes = tuple(0 if isinstance(g.action_space, gym.spaces.Discrete)
                                  else g.action_size for g in groups)
        self.num_agents = sum(len(g) for g in self.groups)
        if team and team not in self.names:
            raise ValueError(f"team={team!r} is not one of the agent groups {self.names}")
        self.fixed = tuple(None if not team or g.name == team else _fixed(g, others)
                           for g in groups)
        if sorted(i for g in self.groups for i in g) != list(range(self.num_agents)):
            raise ValueError(f"the groups' agents {self.groups} must be 0..N-1, each once")

    # --- what every group shares (one ActorConfig) -------------------------------------
    @property
    def num_skills(self) -> int:
        return self.actors[0].num_skills

    @property
    def goal_dim(self) -> int:
        return self.actors[0].goal_dim

    @property
    def options(self) -> str:
        return self.actors[0].options

    @property
    def fixed_option(self) -> int:
        return self.actors[0].fixed_option

    @property
    def option_schedule(self) -> tuple[int, ...]:
        return self.actors[0].option_schedule

    @property
    def selector_period(self) -> int:
        return self.actors[0].selector_period

    @property
    def option_ends(self) -> bool:
        return self.actors[0].option_ends

    @property
    def selector_input(self) -> str:
        return self.actors[0].selector_input

    @property
    def recurrent(self) -> bool:
        return self.actors[0].recurrent

    @property
    def trains(self) -> tuple[bool, ...]:
        """Per group: whether it trains (MAPPO, ES), i.e. is not a fixed policy."""
        return tuple(how is None for how in self.fixed)

    @property
    def agent_mask(self) -> jax.Array:
        """``[N]`` 1.0 for the agents MAPPO trains, 0.0 for those of fixed groups."""
        mask = np.ones(self.num_agents, np.float32)
        for g, trains in zip(self.groups, self.trains, strict=True):
            if not trains:
                mask[list(g)] = 0.0
        return jnp.asarray(mask)

    def with_group_actors(self, actors: Sequence[FeudalActor | None]) -> GroupedActor:
        """This actor with group ``g``'s actor replaced by ``actors[g]`` where not None
        (a saved run's, for the groups that play it frozen); the shapes must match."""
        new = list(self.actors)
        for g, a in enumerate(actors):
            if a is None:
                continue
            mine = jax.tree.map(lambda x: (x.shape, x.dtype), eqx.filter(new[g], eqx.is_array))
            theirs = jax.tree.map(lambda x: (x.shape, x.dtype), eqx.filter(a, eqx.is_array))
            if jax.tree.structure(new[g]) != jax.tree.structure(a) or mine != theirs:
                raise ValueError(f"the saved actor of group {self.names[g]!r} does not fit "
                                 "this run's (another env, architecture or actor config)")
            new[g] = a
        return eqx.tree_at(lambda s: s.actors, self, tuple(new))

    def _fixed_act(self, g: int, key: jax.Array, obs: Any) -> ActOut:
        """Group ``g``'s actions by its random or scripted policy, log-probability 0."""
        how, n = self.fixed[g], len(self.groups[g])
        zeros = jnp.zeros((n,), jnp.float32)
        if how[0] == "script":
            seen = self._obs(g, obs)  # the group's one observation vector, [n, obs_size]
            seen = next(iter(seen.values())) if isinstance(seen, dict) else seen
            a = _scripted(how[1], key, seen, n, self.action_sizes[g])
        elif how[1] == "discrete":
            a = jax.random.randint(key, (n,), 0, how[2], jnp.int32)
        else:
            low, high = np.asarray(how[2], np.float32), np.asarray(how[3], np.float32)
            a = jax.random.uniform(key, (n, low.size), jnp.float32, low, high)
        return ActOut(a, a, zeros, zeros)

    def _acts_itself(self, g: int) -> bool:
        """Whether group ``g`` acts with its own actor (trained, or a frozen saved one)."""
        return self.fixed[g] is None or self.fixed[g][0] == "actor"

    # --- rows of a group, and back ------------------------------------------------------
    def _rows(self, g: int, tree: Any, axis: int = 0) -> Any:
        idx = np.asarray(self.groups[g])
        return jax.tree.map(lambda x: jnp.take(x, idx, axis=axis), tree)

    def _obs(self, g: int, obs: Any, axis: int = 0) -> Any:
        return jax.tree.map(lambda x: x[..., : self.obs_sizes[g]], self._rows(g, obs, axis))

    def _adj(self, g: int, adj: jax.Array) -> jax.Array:
        idx = np.asarray(self.groups[g])
        return adj[..., idx[:, None], idx[None, :]]

    def _action(self, g: int, action: jax.Array) -> jax.Array:
        """A stacked action's group rows cut to the group's Box length (Discrete: as is)."""
        return action if not self.action_sizes[g] else action[..., : self.action_sizes[g]]

    def _pad_action(self, g: int, out: ActOut) -> ActOut:
        width = max(self.action_sizes)
        if not self.action_sizes[g] or self.action_sizes[g] == width:
            return out
        pad = lambda x: jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, width - x.shape[-1])])
        return out._replace(action=pad(out.action), env_action=pad(out.env_action))

    def _merge(self, parts: Sequence[Any], axis: int = 0) -> Any:
        """Group results (agent axis ``axis``) back into agent order."""
        order = np.argsort(np.concatenate([np.asarray(g) for g in self.groups]))
        return jax.tree.map(lambda *xs: jnp.take(jnp.concatenate(xs, axis=axis), order,
                                                 axis=axis), *parts)

    def _each(self, fn: Callable[[int, FeudalActor], Any], axis: int = 0) -> Any:
        return self._merge([fn(g, a) for g, a in enumerate(self.actors)], axis)

    # --- the FeudalActor API on the env's agent axis ------------------------------------
    def embed(self, obs: Any, adj: jax.Array) -> jax.Array:
        return self._each(lambda g, a: a.embed(self._obs(g, obs), self._adj(g, adj)))

    def selector_in(self, obs: Any, adj: jax.Array) -> jax.Array:
        return self._each(lambda g, a: a.selector_in(self._obs(g, obs), self._adj(g, adj)))

    def skill_logits(self, obs: Any, adj: jax.Array) -> jax.Array:
        return self._each(lambda g, a: a.skill_logits(self._obs(g, obs), self._adj(g, adj)))

    def initial_option(self, num_agents: int) -> Option:
        return self.actors[0].initial_option(num_agents)

    def options_done(self, env: Any, state: Any) -> jax.Array | None:
        return env.skill_done(state) if self.option_ends else None

    def select_option(self, obs: Any, adj: jax.Array, prev: Option, t: jax.Array,
                      key: jax.Array | None = None, done: jax.Array | None = None) -> Option:
        return self._each(lambda g, a: a.select_option(
            self._obs(g, obs), self._adj(g, adj), self._rows(g, prev), t,
            None if key is None else jax.random.fold_in(key, g),
            None if done is None else self._rows(g, done)))

    def act(self, key: jax.Array, obs: Any, adj: jax.Array, option: Option,
            deterministic: bool = False) -> ActOut:
        return self._each(lambda g, a: self._pad_action(g, a.act(
            jax.random.fold_in(key, g), self._obs(g, obs), self._adj(g, adj),
            self._rows(g, option), deterministic) if self._acts_itself(g) else
            self._fixed_act(g, jax.random.fold_in(key, g), obs)))

    def step(self, key: jax.Array, obs: Any, adj: jax.Array, prev: Option, t: jax.Array,
             deterministic: bool = False, explore: float = 0.0,
             done: jax.Array | None = None) -> tuple[Option, ActOut]:
        parts = [a.step(jax.random.fold_in(key, g), self._obs(g, obs), self._adj(g, adj),
                        self._rows(g, prev), t, deterministic,
                        explore if self.fixed[g] is None else 0.0,
                        None if done is None else self._rows(g, done))
                 if self._acts_itself(g) else
                 (self._rows(g, prev), self._fixed_act(g, jax.random.fold_in(key, g), obs))
                 for g, a in enumerate(self.actors)]
        return (self._merge([p[0] for p in parts]),
                self._merge([self._pad_action(g, p[1]) for g, p in enumerate(parts)]))

    def _zeros(self, g: int, lead: tuple[int, ...] = ()) -> tuple[jax.Array, jax.Array]:
        z = jnp.zeros((*lead, len(self.groups[g])), jnp.float32)
        return z, z

    def evaluate(self, obs: Any, adj: jax.Array, option: Option, action: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
        return self._each(lambda g, a: self._zeros(g) if self.fixed[g] else a.evaluate(
            self._obs(g, obs), self._adj(g, adj), self._rows(g, option),
            self._action(g, self._rows(g, action))))

    def evaluate_sequence(self, obs: Any, adj: jax.Array, option: Option, action: jax.Array,
                          first: jax.Array, hidden: jax.Array
                          ) -> tuple[jax.Array, jax.Array]:
        return self._each(lambda g, a: self._zeros(g, first.shape) if self.fixed[g] else
                          a.evaluate_sequence(
            self._obs(g, obs, 1), self._adj(g, adj), self._rows(g, option, 1),
            self._action(g, self._rows(g, action, 1)), first, self._rows(g, hidden)),
            axis=1)


def make_actor(key: KeyLike, env: Any, config: ActorConfig | None = None,
               team: str = "", others: str | Callable = "random") -> Any:
    """The actor for ``env``: a :class:`GroupedActor` when its agents come in more than
    one group (``env.agent_groups``; ``team``: the group that is the team, ``others``:
    what the other groups do), else a :class:`FeudalActor` (``from_env``)."""
    groups = tuple(getattr(env, "agent_groups", ()) or ())
    if len(groups) > 1:
        return GroupedActor(key, groups, env.observation_space, len(env.skill_names), config,
                            team, others)
    if team:
        raise ValueError(f"team={team!r} names a group of agents, but this env's agents are "
                         "one group (they share their spaces): leave team empty")
    return FeudalActor.from_env(key, env, config)
