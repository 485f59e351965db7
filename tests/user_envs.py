"""A user's env module, as the README's "Your own PettingZoo env" shows one: it defines a
PettingZoo env and registers it on import, so ``feudal-es ... --import user_envs`` can
name ``tests/CliLine-v0`` (the CLI tests' subprocesses do exactly that), and
``tests/Gather-v0``, a vector-observation env written from that section alone (the
defaults learn on it: tests/test_custom_env_learns.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pettingzoo
from line_envs import Line


class CliLine(Line):
    """``Line`` with 8-step episodes."""

    def __init__(self, max_cycles: int = 8):
        super().__init__(max_cycles)


pettingzoo.register("parallel", "tests/CliLine-v0", entry_point=CliLine)


class Gather(pettingzoo.ParallelEnv):
    """A user's own env, written from the README's "Your own PettingZoo env" section:
    robots in the unit square must gather. Each sees its position and the team's mean
    (a vector observation), moves at up to 0.1 a step, is rewarded for closing in on the
    mean, and the team reward on the last step is minus the mean distance to it."""

    metadata = {"name": "gather_v0", "render_modes": ["rgb_array"]}  # noqa: RUF012

    def __init__(self, num_agents: int = 3, max_cycles: int = 25, render_mode=None):
        self.possible_agents = [f"robot_{i}" for i in range(num_agents)]
        self.max_cycles, self.render_mode = max_cycles, render_mode
        # one space object per kind, returned on every call (parallel_api_test wants it)
        self._obs_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self._act_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _spread(self) -> np.ndarray:
        return np.linalg.norm(self.pos - self.pos.mean(axis=0), axis=1)

    def _obs(self):
        mean = self.pos.mean(axis=0)
        return {a: np.concatenate([p, mean]).astype(np.float32)
                for a, p in zip(self.agents, self.pos, strict=True)}

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.pos = np.random.default_rng(seed).uniform(-1, 1, (len(self.agents), 2))
        self.t = 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        before = self._spread()
        vel = np.array([np.clip(actions[a], -1, 1) for a in self.agents])
        self.pos = np.clip(self.pos + 0.1 * vel, -1, 1)
        self.t += 1
        spread = self._spread()
        done = self.t >= self.max_cycles
        rewards = dict(zip(self.agents, (before - spread).tolist(), strict=True))
        team = -float(spread.mean()) if done else 0.0
        infos = {a: {"team_reward": team} for a in self.agents}
        obs = self._obs()
        terminations = {a: False for a in self.agents}
        truncations = {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def render(self):  # a 64 x 64 picture, one dot per robot
        img = np.full((64, 64, 3), 255, np.uint8)
        for x, y in ((self.pos + 1) / 2 * 63).astype(int):
            img[max(y - 2, 0):y + 3, max(x - 2, 0):x + 3] = (31, 119, 180)
        return img


pettingzoo.register("parallel", "tests/Gather-v0", entry_point=Gather)
