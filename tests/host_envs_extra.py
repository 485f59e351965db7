"""More host (PettingZoo) envs for the size-guard and host-default tests, built on
``line_envs.Line``: one that never ends its episodes, one that returns a non-finite
value in a chosen field, and one with any number of agents. Importing the module
registers ``tests/ManyLine-v0`` and ``tests/EndlessLine-v0`` (the CLI tests pass
``--import host_envs_extra``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pettingzoo
from line_envs import Line


class EndlessLine(Line):
    """:class:`Line` whose episodes never terminate or truncate (no time limit)."""

    def step(self, actions):
        obs, rewards, flags, trunc, infos = super().step(actions)
        if not self.agents:  # Line's last step: keep going instead
            self.agents = list(self.possible_agents)
            obs = self._obs()
        return obs, rewards, flags, {a: False for a in trunc}, infos


class NonFiniteLine(Line):
    """:class:`Line` that puts ``value`` into ``field`` (``"obs"``, ``"reward"`` or
    ``"team_reward"``) of ``agent`` from step ``at`` of every episode on."""

    def __init__(self, field: str, agent: str = "a1", at: int = 3, value: float = np.nan,
                 max_cycles: int = 6):
        super().__init__(max_cycles)
        self.field, self.agent, self.at, self.value = field, agent, at, value

    def step(self, actions):
        obs, rewards, flags, trunc, infos = super().step(actions)
        if self.t >= self.at:
            if self.field == "obs" and self.agent in obs:
                obs[self.agent] = np.array([self.value, 0.0], np.float32)
            elif self.field == "reward":
                rewards[self.agent] = self.value
            elif self.field == "team_reward":
                for a in infos:
                    infos[a] = {"team_reward": self.value}
        return obs, rewards, flags, trunc, infos


class ManyLine(Line):
    """:class:`Line` with ``num_agents`` agents sharing one space object each way (so
    building it for a million agents is cheap; stepping it is not)."""

    _obs_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    _act_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, num_agents: int = 3, max_cycles: int = 6):
        super().__init__(max_cycles)
        self.possible_agents = [f"a{i}" for i in range(num_agents)]

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space


pettingzoo.register("parallel", "tests/ManyLine-v0", entry_point=ManyLine)
pettingzoo.register("parallel", "tests/EndlessLine-v0", entry_point=EndlessLine)
