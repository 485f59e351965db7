"""A toy PettingZoo env whose two agents have different spaces (the padding tests).

A speaker sees a target in {0, 1, 2} (a one-hot, ``Box(3,)``) and says a word
(``Discrete(3)``); a listener sees the word said last step and a noise value
(``Box(4,)``) and picks one of five answers (``Discrete(5)``); both are paid 1 when the
listener's answer is the target. Episodes last ``max_cycles`` steps.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pettingzoo


class SpeakerListener(pettingzoo.ParallelEnv):
    """Two agents, two kinds of spaces (see the module docstring)."""

    metadata = {"name": "speaker_listener_toy_v0"}  # noqa: RUF012 - PettingZoo convention

    def __init__(self, max_cycles: int = 5):
        self.possible_agents = ["speaker_0", "listener_0"]
        self.agents: list[str] = []
        self.max_cycles = max_cycles

    def observation_space(self, agent):
        size = 3 if agent == "speaker_0" else 4
        return gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(3 if agent == "speaker_0" else 5)

    def _obs(self):
        said = np.eye(3, dtype=np.float32)[self.said] if self.said >= 0 else np.zeros(3)
        return {"speaker_0": np.eye(3, dtype=np.float32)[self.target],
                "listener_0": np.append(said, self.rng.normal()).astype(np.float32)}

    def reset(self, seed=None, options=None):
        self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.target, self.said, self.t = int(self.rng.integers(3)), -1, 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        hit = float(int(actions["listener_0"]) == self.target)
        self.said = int(actions["speaker_0"])
        rewards = {a: hit for a in self.agents}
        done = self.t >= self.max_cycles
        obs = self._obs()
        if done:
            self.agents = []
        flags = {a: done for a in self.possible_agents}
        return obs, rewards, flags, dict.fromkeys(self.possible_agents, False), {
            a: {} for a in self.possible_agents}
