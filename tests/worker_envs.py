"""A toy PettingZoo env for the host-worker tests (tests/test_host_workers.py), built on
``line_envs.Line`` and importable in the worker processes (``tests/`` is on their
``sys.path``). Importing the module registers ``tests/RichLine-v0`` (the CLI test passes
``--import worker_envs``).

:class:`RichLine` uses every optional part of the host path, so that a batch collected
by workers is compared with the in-process one on all of it: ``state()``,
``comm_graph()``, ``skill_rewards`` and ``team_reward`` infos, an agent leaving early
(the alive mask), episode lengths that depend on the reset seed (copies end on different
steps, so the order of the reset seeds matters), and on request a worker that dies
(``crash_file``), an env error (``fault``) or a slow step (``sleep``).
"""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np
import pettingzoo
from line_envs import Line


class RichLine(Line):
    """:class:`Line` with a global state, a distance-based comm graph, two named skills
    and seed-dependent episodes (see the module docstring).

    ``crash_file``: once ``<crash_file>.armed`` exists, the first process other than
    ``spare`` (a pid: the test's own) to step such an env creates ``crash_file`` and
    SIGKILLs itself (a worker killed mid-collection).
    ``faults``: ``{seed: kind}``: the second step of an episode reset with ``seed`` raises
    a ``RuntimeError`` (``"raise"``), returns a list of rewards (``"nondict"``), sleeps
    for a minute (``"sleep"``, to be cut by a time limit) or SIGKILLs its process unless
    that is ``spare`` (``"die"``). ``sleep``: seconds every step sleeps (a slow env)."""

    metadata = {"name": "rich_line_v0"}  # noqa: RUF012 - PettingZoo convention
    skill_names = ("approach", "hold")
    state_space = gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)

    def __init__(self, max_cycles: int = 7, crash_file: str | None = None, spare: int = 0,
                 faults: dict[int, str] | None = None, sleep: float = 0.0):
        super().__init__(max_cycles)
        self.crash_file, self.spare, self.sleep = crash_file, spare, sleep
        self.faults, self.seed = dict(faults or {}), None
        self.pos = {a: 0.0 for a in self.possible_agents}
        self.goal = {a: 0.0 for a in self.possible_agents}

    def reset(self, seed=None, options=None):
        obs, infos = super().reset(seed, options)
        self.seed = seed
        self.length = 3 + (seed or 0) % (self.max_cycles - 2)  # 3 .. max_cycles
        return obs, infos

    def state(self):
        return np.array([v for a in self.possible_agents
                         for v in (self.pos[a], self.goal[a])], np.float32)

    def comm_graph(self):
        p = np.array([self.pos[a] for a in self.possible_agents])
        return (np.abs(p[:, None] - p[None, :]) < 0.8).astype(np.float32) - np.eye(3)

    def step(self, actions):
        if self.sleep:
            time.sleep(self.sleep)
        if self.crash_file is not None and os.getpid() != self.spare and \
                os.path.exists(self.crash_file + ".armed"):
            try:
                os.close(os.open(self.crash_file, os.O_CREAT | os.O_EXCL))
                os.kill(os.getpid(), signal.SIGKILL)  # the first step anywhere: die
            except FileExistsError:
                pass
        self.t += 1
        rewards = self._move(actions)
        done = self.t >= self.length
        team = -float(np.mean([abs(self.pos[a] - self.goal[a]) for a in self.agents]))
        infos = {a: {"team_reward": team if done else 0.0,
                     "skill_rewards": np.array([rewards[a], -abs(float(actions[a][0]))],
                                               np.float32)} for a in self.agents}
        leaving = "a2" if self.t == 2 and "a2" in self.agents else None
        terms = {a: a == leaving for a in self.agents}
        truncs = {a: done for a in self.agents}
        if leaving and not done:
            self.agents.remove(leaving)  # it gets no observation: dead from the next step
        obs = self._obs()
        fault = self.faults.get(self.seed) if self.t == 2 else None
        if fault == "raise":
            raise RuntimeError(f"RichLine: injected fault in the episode of seed {self.seed}")
        if fault == "nondict":
            rewards = list(rewards.values())
        if fault == "sleep":
            time.sleep(60)
        if fault == "die" and os.getpid() != self.spare:
            os.kill(os.getpid(), signal.SIGKILL)
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos


pettingzoo.register("parallel", "tests/RichLine-v0", entry_point=RichLine)
