"""Agents with different spaces behind one shared actor: SuperSuit's padding.

A PettingZoo env whose agents differ in their observation or action spaces (MPE's
simple_speaker_listener: a speaker and a listener) cannot share one actor as it is.
``TrainerConfig.pad_agents`` wraps the env's factory in SuperSuit's wrappers, the
field's usual answer: ``pad_observations_v0`` (every observation zero-padded to the
largest), ``pad_action_space_v0`` (every action space the largest; an agent's action
outside its own space is read as its action 0 for a ``Discrete`` space, and cut to its
own size for a ``Box``) and ``agent_indicator_v0`` (a one-hot of the agent appended to
its observation, so the shared actor knows whom it acts for). Everything else of the env
(``state()``, infos' ``skill_rewards`` / ``team_reward``, ``comm_graph()``) passes through.

SuperSuit is an optional extra (``pip install -e ".[supersuit]"``); it is imported only
when a run pads. :class:`Padded` is a module-level callable of a picklable factory, so
padded envs also build in ``host_workers`` processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from feudal_es.resolve import ResolvedEnv

__all__ = ["Padded", "padded"]


@dataclasses.dataclass(frozen=True)
class Padded:
    """``make`` (an env factory) with its env padded to one observation and one action
    space and an agent indicator appended (see the module docstring)."""

    make: Callable[..., Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            import supersuit
        except ImportError:
            raise ValueError("pad_agents=true pads the agents' spaces with SuperSuit, which "
                             "is not installed: pip install -e '.[supersuit]'") from None
        env = self.make(*args, **kwargs)
        try:
            env = supersuit.pad_observations_v0(env)
            env = supersuit.pad_action_space_v0(env)
            return supersuit.agent_indicator_v0(env)
        except AssertionError as e:  # SuperSuit's checks of what it can pad
            spaces = {a: (env.observation_space(a), env.action_space(a))
                      for a in env.possible_agents}
            raise ValueError(f"pad_agents=true cannot pad {type(env).__name__}'s spaces "
                             f"{spaces} (SuperSuit pads Box and Discrete spaces only: {e})"
                             ) from None


def padded(env: ResolvedEnv, config: Any) -> ResolvedEnv:
    """``env`` as a run of ``config`` (a ``TrainerConfig``: its ``pad_agents``,
    ``groups`` and ``team``) trains it: a host env's factory :class:`Padded` when
    ``pad_agents``; a JaxMARL env padded alike on the JAX path
    (``envs.jaxmarl_env.JaxMARLSwarm.padded``); a bundled env is refused (its agents
    share their spaces). ``groups``: a JaxMARL env with the user's groups (``regrouped``).
    ``team`` (a group's name): a JaxMARL env whose team reward is that group's
    (``with_team``, each group its own team for MAPPO with ``others="train"``). A host
    env's spec is told both by the runtime."""
    pad, team, groups = config.pad_agents, config.team, getattr(config, "groups", {})
    if groups and env.kind != "host":  # the host path's spec is told by the runtime
        if not hasattr(env.core, "regrouped"):
            raise ValueError(f"groups={groups!r} places agents in groups; {env.env_id} is "
                             "not a multi-agent env of named agents (PettingZoo, JaxMARL)")
        env = dataclasses.replace(env, core=env.core.regrouped(groups))
    if team and env.kind != "host":
        if not hasattr(env.core, "with_team"):
            raise ValueError(f"team={team!r} names a group of agents; {env.env_id}'s agents "
                             "are one group (leave team empty)")
        core = (env.core.with_team(team, group_teams=True)
                if getattr(config, "others", "random") == "train"
                else env.core.with_team(team))  # others="train": each group its own team
        env = dataclasses.replace(env, core=core)
    if not pad:
        return env
    if env.kind != "host":
        if hasattr(env.core, "padded"):
            return dataclasses.replace(env, core=env.core.padded())
        raise ValueError(f"pad_agents=true pads the agents of a PettingZoo or JaxMARL env; "
                         f"{env.env_id}'s agents share one space (leave it false)")
    return dataclasses.replace(env, make=Padded(env.make))
