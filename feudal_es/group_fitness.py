"""Every group trains, each on its own team fitness (``TrainerConfig.others="train"``).

In a mixed cooperative / competitive env (agents in groups, :mod:`envs.groups`) with a
named team, ``others="train"`` makes every group a learner, and each group's "team" is
itself: group ``g``'s fitness is the sum over an episode of the mean reward of ``g``'s
agents. For the named team that is the run's team fitness itself (the env's team reward:
its agents' mean reward, unless the env reports one), which stays what the run logs,
keeps as its best selector and evaluates; the other groups' columns only steer their own
learners. Two learners read them:

* ES: a population's fitness is ``[P, G]`` (:func:`group_returns` per step, summed over
  the episode) and :func:`feudal_es.evolution.generation.tell_groups` moves each group's
  coordinates of θ (:func:`coord_groups`) with its own column. Only the ES kinds whose
  update is separable per coordinate qualify (NES, ``sgd`` or ``adam``), and not the
  modes that migrate the learner into whole-actor ES (:func:`check_config`).
* MAPPO: the team part of the ``"team"`` and ``"mixed"`` rewards is each agent's own
  group's (:func:`agent_team_reward` on the JAX path, :func:`host_agent_team` on the host
  path), read from an env (a JAX env, or the host path's ``HostEnvSpec``) whose
  ``group_teams`` is true; ``"option"`` and ``"local"`` are every agent's own reward
  already.

Pure functions of static group structure (agent indices per group) and arrays; nothing
here loops over population members. The host path's env copies import this module in
their worker processes: it imports no networks and no ES code until asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from feudal_es.config import TrainerConfig

__all__ = ["agent_team_reward", "check_config", "coord_groups", "env_groups", "evolve",
           "group_returns", "host_agent_team", "host_group_rewards", "spec_groups",
           "trains_groups"]

Groups = tuple[tuple[int, ...], ...]  # agent indices per group, in the actor's order


def trains_groups(config: TrainerConfig) -> bool:
    """Whether every group trains on its own fitness (``others="train"``)."""
    return getattr(config, "others", "random") == "train"


def check_config(config: TrainerConfig) -> None:
    """``ValueError`` for what per-group fitness cannot run (nothing for other
    ``others``): an ES kind whose update is not separable per coordinate, and a mode that
    migrates the learner into whole-actor ES (its elitist comparison scores one team)."""
    if not trains_groups(config):
        return
    from feudal_es.evolution.generation import check_group_kind

    if config.runs_es:
        check_group_kind(config.es, "others='train' (every group on its own fitness)")
    if config.plan.migrates:
        raise ValueError(f"others='train' evolves each group on its own fitness; mode "
                         f"{config.mode!r} migrates the learner into whole-actor ES by one "
                         "team's score: use mode merl, es or es-selector")


def coord_groups(actor: Any, params: str = "selector") -> np.ndarray:
    """``[D]`` int32: the group (index into ``actor.actors``) of each coordinate of the
    ES θ (:func:`feudal_es.theta.es_theta` with ``params``), from the leaves' shapes and
    tree paths only (so it is static inside a jit). A single-group actor: all 0."""
    from agents import es_filter

    leaves = jax.tree_util.tree_leaves_with_path(eqx.filter(actor, es_filter(actor, params)))
    if not hasattr(actor, "actors"):
        return np.zeros(sum(int(np.prod(x.shape)) for _, x in leaves), np.int32)
    parts = []
    for path, x in leaves:
        if len(path) < 2 or getattr(path[0], "name", None) != "actors":
            raise ValueError(f"coord_groups: an ES leaf outside the group actors ({path})")
        parts.append(np.full(int(np.prod(x.shape)), path[1].idx, np.int32))
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


def evolve(config: TrainerConfig) -> Any:
    """``(key, es_state, actor, fitness) -> (es_state, info)``: one ES generation whose
    ``fitness(thetas, key)`` is ``[P, G]``, each group's coordinates told with its own
    column, ``info`` the named team's (:func:`feudal_es.evolution.generation`)."""
    from feudal_es.evolution.generation import generation

    cfg, params, team = config.es, config.es_params, config.team

    def run(key: jax.Array, state: Any, actor: Any, fitness: Any) -> Any:
        return generation(key, state, fitness, cfg, coord_group=coord_groups(actor, params),
                          report=actor.names.index(team))

    return run


# --- the JAX path ------------------------------------------------------------------------
def env_groups(env: Any) -> tuple[Groups, int | None]:
    """A JAX env's agent groups (``env.agent_groups``, the actor's order) and the index
    of its named team (``env.team_name``; None when none is named)."""
    groups = tuple(getattr(env, "agent_groups", ()) or ())
    if not groups:
        return ((tuple(range(env.num_agents)),), None)
    names = [g.name for g in groups]
    team = getattr(env, "team_name", "")
    return tuple(tuple(g.agents) for g in groups), (names.index(team) if team else None)


def group_returns(groups: Groups, team: int | None, reward: jax.Array,
                  team_reward: jax.Array) -> jax.Array:
    """``[..., G]``: each group's reward of a step, the mean of ``reward[..., N]`` over
    its agents; column ``team`` is ``team_reward[...]`` (the run's team reward: what the
    named team's fitness sums)."""
    cols = [reward[..., np.asarray(g)].mean(axis=-1) for g in groups]
    if team is not None:
        cols[team] = jnp.asarray(team_reward, reward.dtype)
    return jnp.stack(cols, axis=-1)


def agent_team_reward(env: Any, eo: Any) -> jax.Array | None:
    """MAPPO's team part of each agent's reward, ``[..., N]``, of one step's ``EnvOut``
    (any leading axes): the agent's own group's reward (:func:`group_returns`) when
    ``env.group_teams``; None otherwise (the env's team reward, for every agent)."""
    if not getattr(env, "group_teams", False):
        return None
    groups, team = env_groups(env)
    cols = group_returns(groups, team, eo.reward, eo.team_reward)
    of = np.zeros(eo.reward.shape[-1], np.int32)
    for g, agents in enumerate(groups):
        of[list(agents)] = g
    return jnp.take(cols, of, axis=-1)


# --- the host path -----------------------------------------------------------------------
def spec_groups(spec: Any) -> tuple[tuple[tuple[str, ...], ...], int | None]:
    """A host env's agent groups as agent names (``spec.agent_groups``, the actor's
    order) and the index of the team's group (``spec.team``; None when none is named)."""
    groups = tuple(tuple(spec.agents[i] for i in g.agents) for g in spec.agent_groups)
    team = tuple(getattr(spec, "team", ()) or ())
    return groups, (groups.index(team) if team in groups else None)


def host_group_rewards(spec: Any, rewards: Mapping[str, float], team: float
                       ) -> np.ndarray:
    """``[G]`` float64: each group's reward of one PettingZoo step, the mean of its live
    agents' ``rewards`` (0 when none is live); the team's group's is ``team`` (the step's
    :func:`~feudal_es.pettingzoo_host.team_reward`)."""
    groups, index = spec_groups(spec)
    out = np.zeros(len(groups), np.float64)
    for g, agents in enumerate(groups):
        live = [float(rewards[a]) for a in agents if a in rewards]
        out[g] = float(np.mean(live)) if live else 0.0
    if index is not None:
        out[index] = float(team)
    return out


def host_agent_team(spec: Any, rewards: Mapping[str, float], team: float
                    ) -> Sequence[float] | None:
    """MAPPO's team part of each agent's reward on the host path (``[N]``, the agents in
    ``spec.agents`` order): its group's :func:`host_group_rewards` when
    ``spec.group_teams``; None otherwise (``team`` for every agent)."""
    if not getattr(spec, "group_teams", False):
        return None
    cols = host_group_rewards(spec, rewards, team)
    out = np.zeros(spec.num_agents, np.float64)
    for g, group in enumerate(spec.agent_groups):
        out[list(group.agents)] = cols[g]
    return out
