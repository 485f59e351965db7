"""Agents in groups: one actor per group of agents that share their spaces.

An env whose agents differ in their observation or action spaces (MPE's
simple_speaker_listener: a speaker and a listener; simple_tag: adversaries and a good
agent) is trained with one actor per group, parameters shared within a group, as
BenchMARL's agent groups. Agents are grouped by their (observation space, action space)
pair, groups in the order of their first agent.

So that everything downstream keeps one agent axis (MAPPO's batch, the critic, the ES
rollouts, checkpoints), a grouped env presents its observations stacked on that axis,
each agent's vector zero-padded to the largest (:func:`padded_observation_space`), and
takes its actions stacked the same way (:func:`padded_action_space`): ``[N]`` integers
(``Discrete``; each agent's within its own ``n``) or ``[N, A]`` floats (``Box``; an agent
reads its first ``A_i``). Each group's actor reads its agents' rows cut to their own size
and emits actions of their own space, so no agent ever sees padding or an action outside
its space. What can be grouped: flat ``Box`` observations, and actions that are all
``Discrete`` or all flat float ``Box``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import gymnasium as gym
import numpy as np

__all__ = ["AgentGroup", "group_agents", "padded_action_space", "padded_observation_space",
           "team_agents"]


class AgentGroup(NamedTuple):
    """Agents sharing one observation and one action space (and so one actor)."""

    name: str  # e.g. "speaker" (the agents' names without their index), unique per env
    agents: tuple[int, ...]  # their indices on the env's agent axis
    observation_space: gym.spaces.Box  # one agent's, unpadded
    action_space: gym.Space  # one agent's: Discrete or a flat Box

    @property
    def obs_size(self) -> int:
        return int(self.observation_space.shape[0])

    @property
    def action_size(self) -> int:
        """``n`` of a Discrete action space, the length of a Box one."""
        space = self.action_space
        return int(space.n) if isinstance(space, gym.spaces.Discrete) else int(space.shape[0])


def _base_name(agent: str) -> str:
    return re.sub(r"[_\-]?\d+$", "", agent) or agent


def _named(agents: Sequence[str], mapping: Mapping[str, Sequence[str]], where: str
           ) -> dict[int, str]:
    """Agent index -> group name of the agents a user's ``mapping`` (group name -> agent
    names) places; ``ValueError`` naming an unknown agent, one placed twice, or a bad
    entry."""
    if not isinstance(mapping, Mapping):
        raise TypeError(f"groups must map group names to lists of agent names, got "
                        f"{mapping!r}")
    index, placed = {a: i for i, a in enumerate(agents)}, {}
    for name, members in mapping.items():
        if not isinstance(name, str) or not name or isinstance(members, str) or not (
                isinstance(members, Sequence) and members):
            raise ValueError(f"groups: {name!r} must name a non-empty list of agents, got "
                             f"{members!r}")
        for agent in members:
            if agent not in index:
                raise ValueError(f"groups[{name!r}]: {where} has no agent {agent!r} (its "
                                 f"agents: {list(agents)})")
            if index[agent] in placed:
                raise ValueError(f"groups: agent {agent!r} is in both "
                                 f"{placed[index[agent]]!r} and {name!r}")
            placed[index[agent]] = name
    return placed


def group_agents(agents: Sequence[str], obs_spaces: Sequence[gym.Space],
                 action_spaces: Sequence[gym.Space], where: str = "env",
                 mapping: Mapping[str, Sequence[str]] | None = None
                 ) -> tuple[AgentGroup, ...]:
    """The agents (names, with their spaces in the same order) in groups of equal
    (observation, action) spaces, in order of each group's first agent; one group when
    all agents share their spaces. ``mapping`` (``TrainerConfig.groups``: group name ->
    agent names) places the agents it names in those groups first (e.g. two teams of
    agents with equal spaces), each group's agents sharing their spaces; the rest are
    grouped by their spaces. Agents that differ must be groupable (see the module
    docstring): anything else is a ``ValueError`` naming the agent and its space."""
    named = _named(agents, mapping or {}, where)
    keys: list[tuple[gym.Space, gym.Space]] = []
    members: list[list[int]] = []
    labels: list[str | None] = []  # the user's name of each group (None: by its spaces)
    for i, (obs, act) in enumerate(zip(obs_spaces, action_spaces, strict=True)):
        label = named.get(i)
        for k, (o, a) in enumerate(keys):
            if labels[k] == label and (obs is o or obs == o) and (act is a or act == a):
                members[k].append(i)
                break
            if label is not None and labels[k] == label:
                raise ValueError(
                    f"groups[{label!r}]: agents {agents[members[k][0]]!r} and {agents[i]!r} "
                    f"differ in their spaces ({o}, {a} vs {obs}, {act}); a group's agents "
                    "share one actor, so they must share their spaces")
        else:
            keys.append((obs, act))
            members.append([i])
            labels.append(label)
    if len(keys) > 1:
        kinds = {type(a) for _, a in keys}
        for k, (obs, act) in enumerate(keys):
            agent = agents[members[k][0]]
            if not isinstance(obs, gym.spaces.Box) or len(obs.shape) != 1:
                raise ValueError(f"{where}: agent {agent!r} has observation space {obs}; "
                                 "agents with different spaces are grouped only with flat "
                                 "Box observations (flatten them in a wrapper)")
            if isinstance(act, gym.spaces.Box) and (len(act.shape) != 1 or np.dtype(
                    act.dtype).kind != "f"):
                raise ValueError(f"{where}: agent {agent!r} has action space {act}; grouped "
                                 "agents' Box actions must be flat float vectors")
            if not isinstance(act, gym.spaces.Discrete | gym.spaces.Box):
                raise ValueError(f"{where}: agent {agent!r} has action space {act}; grouped "
                                 "agents act in Discrete or Box spaces")
        if len(kinds) > 1:
            firsts = {agents[m[0]]: a for (_, a), m in zip(keys, members, strict=True)}
            raise ValueError(f"{where}: some agents act in Discrete spaces and others in Box "
                             f"spaces ({firsts}); grouped agents must all be Discrete or all "
                             "Box")
    names: list[str] = [label or "" for label in labels]
    for k, m in enumerate(members):
        if labels[k] is not None:
            continue
        base = _base_name(agents[m[0]])
        name, j = base, 1
        while name in names:
            j += 1
            name = f"{base}_{j}"
        names[k] = name
    return tuple(AgentGroup(n, tuple(m), o, a)
                 for n, m, (o, a) in zip(names, members, keys, strict=True))


def team_agents(groups: Sequence[AgentGroup], team: str) -> tuple[int, ...]:
    """The agents of group ``team`` (``TrainerConfig.team``; ``""``: none named, ``()``);
    a ``ValueError`` naming the groups when there is no such group, or only one group."""
    if not team:
        return ()
    names = [g.name for g in groups]
    if len(groups) < 2:
        raise ValueError(f"team={team!r} names a group of agents, but this env's agents are "
                         "one group (they share their spaces): leave team empty")
    if team not in names:
        raise ValueError(f"team={team!r} is not one of the env's agent groups {names}")
    return groups[names.index(team)].agents


def padded_observation_space(groups: Sequence[AgentGroup]) -> gym.spaces.Box:
    """One agent's observation as a grouped env stacks it: the largest vector, unbounded
    (each agent's own values first, then zeros)."""
    size = max(g.obs_size for g in groups)
    return gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)


def padded_action_space(groups: Sequence[AgentGroup]) -> gym.Space:
    """One agent's action as a grouped env stacks it: ``Discrete`` of the largest ``n``,
    or a ``Box`` of the largest length (bounds: the widest of the groups' on each
    coordinate, [-1, 1] where no group has one)."""
    if isinstance(groups[0].action_space, gym.spaces.Discrete):
        return gym.spaces.Discrete(max(g.action_size for g in groups))
    size = max(g.action_size for g in groups)
    low, high = np.full(size, np.inf, np.float32), np.full(size, -np.inf, np.float32)
    for g in groups:
        a = g.action_size
        low[:a] = np.minimum(low[:a], g.action_space.low)
        high[:a] = np.maximum(high[:a], g.action_space.high)
    low[low == np.inf] = -1.0  # coordinates no group has
    high[high == -np.inf] = 1.0
    return gym.spaces.Box(low, high, (size,), np.float32)
