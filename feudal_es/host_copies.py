"""MAPPO's env copies on the host path, and the per-copy work of one collection step.

:class:`CopyGroup` owns some of the collector's PettingZoo env copies (all of them in
process, or one worker's share: :mod:`feudal_es.host_workers`) and does everything a
step needs that touches an env: it resets copies with the seeds it is given, steps them
with the policy's actions (bounded in time by :func:`~feudal_es.pettingzoo_host.deadline`,
checked by :func:`~feudal_es.pettingzoo_host.check_step`), computes each agent's reward
and done flag, ends episodes (all agents gone, or ``max_episode_steps`` reached), and
converts the observations into what the policy reads next (:class:`CopyView`). What it
returns is plain numpy, so a worker process can send it as it is; the collector
(:mod:`feudal_es.host_collect`) keeps everything else (the policy, the reset seeds, the
statistics, the batch), which is why a collection over workers equals the in-process one.

Both kinds of copies offer :class:`EnvCopies`: ``reset_copies`` and ``step_copies``.
:class:`CopiesRestarted` is how a worker pool says that it lost a worker and replaced it
(the collector then restarts every episode and collects again). Nothing here runs JAX.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from feudal_es.group_fitness import host_agent_team
from feudal_es.pettingzoo_host import (
    EnvNotices,
    HostEnvSpec,
    adjacency,
    check_reset,
    check_step,
    deadline,
    env_actions,
    env_name,
    stack_agents,
    team_reward,
)

__all__ = ["CopiesLost", "CopiesRestarted", "CopyGroup", "CopyStep", "CopyView", "EnvCopies"]


class CopyView(NamedTuple):
    """What the policy reads of one copy: its observations (agent axis first, dead agents
    zero-padded), ``alive[N]``, the comm graph ``adj[N, N]`` among live agents and the
    critic's global state ``gstate[G]`` (the env's ``state()``, else the observations)."""

    obs: Any
    alive: np.ndarray
    adj: np.ndarray
    gstate: np.ndarray


class CopyStep(NamedTuple):
    """One copy's step: ``reward[N]`` as MAPPO pays it (``MAPPOConfig.reward``),
    ``done[N]``, the mean agent reward and the team reward of the step, and either the
    next step's :class:`CopyView` or, when the episode is ``over`` (every agent gone, or
    cut at ``max_episode_steps``), None: the copy waits for a reset."""

    reward: np.ndarray
    done: np.ndarray
    mean_reward: float
    team: float
    over: bool
    view: CopyView | None


class CopiesRestarted(Exception):
    """A worker holding some env copies died and was replaced (its copies rebuilt, not yet
    reset); the message says which and why. Every copy's episode must be restarted and
    the collection in progress redone."""


class CopiesLost(RuntimeError, ValueError):
    """Env copies could not be kept running (a worker that cannot start, or that keeps
    dying): a fault of the machine or the env, not of feudal-es (a ``ValueError`` too, so
    the command line prints it as one line)."""


class EnvCopies(Protocol):
    """What the collector needs of its env copies, in process or over workers."""

    num_copies: int

    def reset_copies(self, seeds: Sequence[tuple[int, int]]) -> dict[int, CopyView]:
        """Reset each copy ``i`` of ``seeds`` (``(i, seed)`` pairs, in that order)."""

    def step_copies(self, actions: np.ndarray, skills: np.ndarray) -> list[CopyStep]:
        """Step every copy with its ``actions[i]`` (``[E, N, ...]``); ``skills[E, N]``:
        each agent's current option, the channel of ``skill_rewards`` it is paid."""

    def close(self) -> None:
        """Release the copies (and their workers)."""


class CopyGroup:
    """Env copies ``first .. first + len(envs) - 1`` of a collection, stepped in this
    process (see the module docstring).

    Args:
      envs: the env instances (reused, reset whenever an episode ends).
      spec: their :class:`~feudal_es.pettingzoo_host.HostEnvSpec`.
      reward: what an agent is paid per step (``MAPPOConfig.reward``).
      first: the collection-wide index of ``envs[0]``.
      step_timeout: seconds one ``reset``/``step`` call may take (0 = no limit).
      max_episode_steps: an episode still running after this many steps is cut (0 = no
        limit); reported once through ``notices``.
      notices: where non-finite outputs and cut episodes are reported.
    """

    def __init__(self, envs: Sequence[Any], spec: HostEnvSpec, reward: str = "option",
                 first: int = 0, step_timeout: float = 0.0, max_episode_steps: int = 0,
                 notices: EnvNotices | None = None):
        self.envs = list(envs)
        self.num_copies = len(self.envs)
        self.spec, self.reward, self.first = spec, reward, int(first)
        self.step_timeout = float(step_timeout)
        self.max_episode_steps = int(max_episode_steps)
        self.notices = notices if notices is not None else EnvNotices()
        self._obs: list[dict | None] = [None] * self.num_copies
        self._ep_t = [0] * self.num_copies
        self._ep_seed = [0] * self.num_copies

    def _limit(self, env: Any, call: str) -> Any:
        return deadline(self.step_timeout, f"{type(env).__name__}.{call}() took longer than "
                        f"{self.step_timeout:g} s (time limit)")

    def view(self, k: int) -> CopyView:
        """Local copy ``k``'s :class:`CopyView` (its current observations)."""
        env, spec = self.envs[k], self.spec
        obs, alive = stack_agents(spec, self._obs[k])
        adj = adjacency(getattr(env, "comm_graph", None), spec.num_agents, alive)
        if spec.has_state:
            gstate = np.asarray(env.state(), np.float32).reshape(-1)
        else:
            leaves = [obs[key] for key in sorted(obs)] if isinstance(obs, dict) else [obs]
            gstate = np.concatenate([x.reshape(-1) for x in leaves])
        return CopyView(obs, alive, adj, gstate)

    def reset_copies(self, seeds: Sequence[tuple[int, int]]) -> dict[int, CopyView]:
        """Reset copy ``i`` with ``seed`` for each ``(i, seed)``, in order; their views."""
        views = {}
        for i, seed in seeds:
            k = i - self.first
            env = self.envs[k]
            with self._limit(env, "reset"):
                out = env.reset(seed=seed)
            self._obs[k] = check_reset(env, out, self.spec)
            self._ep_seed[k], self._ep_t[k] = int(seed), 0
            self.notices.check(env_name(env), 0, int(seed), "MAPPO collection", self._obs[k])
            views[i] = self.view(k)
        return views

    def step_copies(self, actions: np.ndarray, skills: np.ndarray) -> list[CopyStep]:
        """Step every copy: ``actions[k]`` and ``skills[k]`` are local copy ``k``'s."""
        return [self._step(k, actions[k], skills[k]) for k in range(self.num_copies)]

    def _step(self, k: int, actions: np.ndarray, skills: np.ndarray) -> CopyStep:
        env, spec = self.envs[k], self.spec
        acts = env_actions(spec, actions, [a for a in spec.agents if a in self._obs[k]])
        live = list(env.agents)
        with self._limit(env, "step"):
            out = env.step(acts)
        obs, rew, term, trunc, infos = check_step(env, acts, out, spec, live)
        team = team_reward(infos, rew, spec.team)
        own = host_agent_team(spec, rew, team)  # others="train": each group's own team
        reward = np.zeros(spec.num_agents, np.float32)
        done = np.zeros(spec.num_agents, np.float32)
        for j, a in enumerate(spec.agents):
            if a not in rew:
                continue
            channels = (infos.get(a) or {}).get("skill_rewards")
            local = float(rew[a])
            mine = team if own is None else float(own[j])
            reward[j] = ((local if channels is None
                          else float(np.asarray(channels).reshape(-1)[skills[j]]))
                         if self.reward == "option" else local if self.reward == "local"
                         else mine if self.reward == "team" else local + mine)
            done[j] = float(term.get(a, False) or trunc.get(a, False))
        mean_reward = float(np.mean(list(rew.values()))) if rew else 0.0
        self._ep_t[k] += 1
        self.notices.check(env_name(env), self._ep_t[k], self._ep_seed[k], "MAPPO collection",
                           obs, rew, infos)
        cut = bool(env.agents) and 0 < self.max_episode_steps <= self._ep_t[k]
        if cut:
            self.notices.time_limit(env_name(env), self.max_episode_steps,
                                    "a MAPPO collection")
        if cut or not env.agents:  # over: every agent ended, or the time limit
            done[:] = 1.0
            self._obs[k] = None
            return CopyStep(reward, done, mean_reward, team, True, None)
        self._obs[k] = obs
        return CopyStep(reward, done, mean_reward, team, False, self.view(k))

    def close(self) -> None:
        """Close every env (errors ignored: the copies are being dropped)."""
        for env in self.envs:
            with contextlib.suppress(Exception):  # a broken env's close(): nothing to save
                env.close()
