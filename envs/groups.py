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
from collections.abc import Sequence
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


def group_agents(agents: Sequence[str], obs_spaces: Sequence[gym.Space],
                 action_spaces: Sequence[gym.Space], where: str = "env"
                 ) -> tuple[AgentGroup, ...]:
    """The agents (names, with their spaces in the same order) in groups of equal
    (observation, action) spaces, in order of each group's first agent; one group when
    all agents share their spaces. Agents that differ must be groupable (see the module
    docstring): anything else is a ``ValueError`` naming the agent and its space."""
    keys: list[tuple[gym.Space, gym.Space]] = []
    members: list[list[int]] = []
    for i, (obs, act) in enumerate(zip(obs_spaces, action_spaces, strict=True)):
        for k, (o, a) in enumerate(keys):
            if (obs is o or obs == o) and (act is a or act == a):
                members[k].append(i)
                break
        else:
            keys.append((obs, act))
            members.append([i])
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
    names: list[str] = []
    for m in members:
        base = _base_name(agents[m[0]])
        name, j = base, 1
        while name in names:
            j += 1
            name = f"{base}_{j}"
        names.append(name)
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
