"""The host path: any PettingZoo ``ParallelEnv`` trained and evaluated from Python.

:class:`HostCollector` is MAPPO's collection for custom envs: a Python loop over a few env
copies; per step the observations of all copies are stacked into one array pytree (agents
padded to ``possible_agents`` with an ``alive`` mask, as in MAPPO's death masking), sent
to the device once, and one jitted call (:func:`policy`) returns every copy's actions.
The result is the same :class:`feudal_es.mappo.Batch` the pure-JAX path builds, so
:func:`feudal_es.mappo.update` trains on it unchanged. :class:`HostEvaluator` plays the
team-fitness episodes of an ES population with the same policy and conversions, failing
only the member whose env misbehaves. Every env output is checked (:func:`check_reset`,
:func:`check_step`) and env calls can be bounded in time (:func:`deadline`).

What a custom env may provide (all optional; README "Your own PettingZoo env"):
``comm_graph() -> [N, N]`` (else all-to-all among live agents), ``state()`` (else the
concatenated padded observations), ``infos[agent]["skill_rewards"]`` (else the agent's
reward for every skill) and ``infos[agent]["team_reward"]`` (else the mean agent reward).

The code lives in three modules, re-exported here: :mod:`feudal_es.pettingzoo_host` (the
env's spec, the checks of its outputs, time limits, the per-step conversions),
:mod:`feudal_es.host_collect` (:func:`policy`, :func:`host_update`,
:class:`HostCollector`) and :mod:`feudal_es.host_eval` (:class:`HostEvaluator`). The
collector's env copies are stepped by :mod:`feudal_es.host_copies` in this process, or
by worker processes (``TrainerConfig.host_workers``: :mod:`feudal_es.host_workers`).
"""

from __future__ import annotations

from feudal_es.host_collect import HostCollector, host_update, policy
from feudal_es.host_eval import HostEvaluator
from feudal_es.pettingzoo_host import (
    EnvOutputError,
    EnvTimeout,
    HostEnvSpec,
    adjacency,
    check_reset,
    check_spaces,
    check_step,
    deadline,
    env_actions,
    neutral_actions,
    probe_env,
    stack_agents,
    team_reward,
    zeros_like_space,
)

__all__ = [
    "EnvOutputError",
    "EnvTimeout",
    "HostCollector",
    "HostEnvSpec",
    "HostEvaluator",
    "adjacency",
    "check_reset",
    "check_spaces",
    "check_step",
    "deadline",
    "env_actions",
    "host_update",
    "neutral_actions",
    "policy",
    "probe_env",
    "stack_agents",
    "team_reward",
    "zeros_like_space",
]
