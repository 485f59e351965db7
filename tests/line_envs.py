"""A toy PettingZoo env shared by the host-path tests (MAPPO, CLI, Ray, reliability).

Three agents on a line, each rewarded for closing in on its own goal (Box obs
``[position, goal]``, Box action ``[velocity]``). The team reward, minus the mean final
distance, comes on the last of ``max_cycles`` steps. Tests subclass it to change one thing
(early termination, crashes); :class:`FaultyLine` injects faults on a schedule
(:class:`Plan`) for the reliability tests.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pettingzoo


class Line(pettingzoo.ParallelEnv):
    """Three agents on a line moving toward their own goals (see the module docstring)."""

    metadata = {"name": "line_v0"}  # noqa: RUF012 - PettingZoo convention
    speed = 0.3  # distance per step at full action

    def __init__(self, max_cycles: int = 6):
        self.possible_agents = ["a0", "a1", "a2"]
        self.agents: list[str] = []
        self.max_cycles = max_cycles

    def observation_space(self, agent):
        return gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _obs(self):
        return {a: np.array([self.pos[a], self.goal[a]], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.pos = {a: float(rng.uniform(-1, 1)) for a in self.agents}
        self.goal = {a: float(rng.uniform(-1, 1)) for a in self.agents}
        self.t = 0
        return self._obs(), {a: {} for a in self.agents}

    def _move(self, actions) -> dict[str, float]:
        """Move every live agent; its reward is how much closer to its goal it got."""
        rewards = {}
        for a in self.agents:
            before = abs(self.pos[a] - self.goal[a])
            self.pos[a] = float(np.clip(self.pos[a] + self.speed * float(actions[a][0]),
                                        -1.5, 1.5))
            rewards[a] = before - abs(self.pos[a] - self.goal[a])
        return rewards

    def step(self, actions):
        self.t += 1
        rewards = self._move(actions)
        done = self.t >= self.max_cycles
        team = -float(np.mean([abs(self.pos[a] - self.goal[a]) for a in self.agents])) \
            if done else 0.0
        obs = self._obs()
        infos = {a: {"team_reward": team} for a in self.agents}
        flags = {a: False for a in self.agents}
        trunc = {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, flags, trunc, infos


class Plan:
    """Which episodes misbehave: ``faults[k] = (kind, step)`` hits the k-th episode
    started (counted over all env instances) once ``armed``."""

    def __init__(self, faults: dict | None = None):
        self.faults = dict(faults or {})
        self.armed = False
        self.started = 0


class FaultyLine(Line):
    """:class:`Line` that misbehaves on demand: ``bad`` on every call, or the faults
    of a :class:`Plan`."""

    def __init__(self, plan: Plan | None = None, max_cycles: int = 6, bad: str | None = None):
        super().__init__(max_cycles)
        self.plan, self.bad = plan, bad
        self.episode: int | None = None

    def reset(self, seed=None, options=None):
        obs, infos = super().reset(seed, options)
        self.episode = None
        if self.plan is not None and self.plan.armed:
            self.episode = self.plan.started
            self.plan.started += 1
        if self.bad == "reset_not_tuple":
            return obs
        return obs, infos

    def step(self, actions):
        obs, rewards, flags, trunc, infos = super().step(actions)
        fault = None if self.plan is None else self.plan.faults.get(self.episode)
        kind = self.bad if self.bad else fault[0] if fault and fault[1] == self.t else None
        if kind == "raise":
            raise RuntimeError(f"injected fault in episode #{self.episode}")
        if kind == "sleep":
            time.sleep(60)
        if kind == "spin":
            while True:
                pass
        if kind == "nan_reward":
            rewards = {a: float("nan") for a in rewards}
        if kind == "missing_agent":
            del rewards["a1"]
        if kind == "nondict":
            rewards = list(rewards.values())
        if kind == "four_tuple":
            return obs, rewards, flags, infos
        if kind == "obs_shape":
            obs["a2"] = np.zeros(3, np.float32)
        if kind == "unknown_agent":
            rewards["ghost"] = 0.0
        if kind == "reward_str":
            rewards["a0"] = "high"
        if kind == "no_obs":
            obs.pop("a0", None)
        return obs, rewards, flags, trunc, infos
