# my_envs.py
"""LineMeet: robots on a line must all meet (a PettingZoo ParallelEnv)."""

import gymnasium as gym
import numpy as np
import pettingzoo


class LineMeet(pettingzoo.ParallelEnv):
    metadata = {"name": "line_meet_v0", "render_modes": ["rgb_array"]}

    def __init__(self, num_agents=3, max_cycles=20, render_mode=None):
        self.possible_agents = [f"robot_{i}" for i in range(num_agents)]
        self.max_cycles, self.render_mode = max_cycles, render_mode
        # one space object each, returned on every call (PettingZoo's API test checks it)
        self._obs_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)  # [own, mean position]
        self._act_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)  # velocity

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _obs(self):
        mean = self.pos.mean()
        return {a: np.array([p, mean], np.float32)
                for a, p in zip(self.agents, self.pos, strict=True)}

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.pos = np.random.default_rng(seed).uniform(-1, 1, len(self.agents))
        self.t = 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        before = np.abs(self.pos - self.pos.mean())
        vel = np.array([actions[a][0] for a in self.agents])
        self.pos = np.clip(self.pos + 0.1 * vel, -1, 1)
        self.t += 1
        spread = np.abs(self.pos - self.pos.mean())
        done = self.t >= self.max_cycles
        rewards = dict(zip(self.agents, (before - spread).tolist(), strict=True))  # dense
        team = -float(spread.mean()) if done else 0.0  # sparse team fitness: the last step
        infos = {a: {"team_reward": team} for a in self.agents}
        obs = self._obs()
        terminations = {a: False for a in self.agents}
        truncations = {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def render(self):  # a 32 x 256 strip, one dot per robot
        img = np.full((32, 256, 3), 255, np.uint8)
        for p in self.pos:
            x = int((p + 1) / 2 * 255)
            img[12:20, max(x - 3, 0):x + 4] = (31, 119, 180)
        return img


pettingzoo.register("parallel", "me/LineMeet-v0", entry_point=LineMeet)
