"""Host collection for any PettingZoo ``ParallelEnv``: the MAPPO path for custom envs.

A Python loop over a few env copies; per step the observations of all copies are stacked
into one array pytree (agents padded to ``possible_agents`` with an ``alive`` mask, as in
MAPPO's death masking), sent to the device once, and one jitted call returns every
copy's actions. The result is the same :class:`feudal_es.mappo.Batch` the pure-JAX path
builds, so :func:`feudal_es.mappo.update` trains on it unchanged.

What a custom env may provide (all optional; DESIGN.md "Custom environments"):
``comm_graph() -> [N, N]`` (else all-to-all among live agents), ``state()`` (else the
concatenated padded observations), ``infos[agent]["skill_rewards"]`` (else the agent's
reward for every skill) and ``infos[agent]["team_reward"]`` (else the mean agent reward).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from feudal_es.mappo import Batch, MAPPOConfig, TrainState, skill_ids


class HostEnvSpec:
    """Shapes of a PettingZoo env as the actor and critic see them.

    Agents must be homogeneous (one observation and one action space for all).
    """

    def __init__(self, env: Any, num_skills: int | None = None):
        self.agents: list[str] = list(env.possible_agents)
        if not self.agents:
            raise ValueError(f"{type(env).__name__} has no possible_agents")
        first = self.agents[0]
        self.observation_space = env.observation_space(first)
        self.action_space = env.action_space(first)
        for a in self.agents[1:]:
            if env.observation_space(a) != self.observation_space or \
                    env.action_space(a) != self.action_space:
                raise ValueError(
                    f"agent {a!r} has other spaces than {first!r}: feudal-es trains one "
                    "shared actor, so all agents need the same observation and action space"
                )
        if not isinstance(self.action_space, gym.spaces.Box | gym.spaces.Discrete):
            raise ValueError(f"unsupported action space {self.action_space} (Box or Discrete)")
        names = getattr(env, "skill_names", None)
        self.skill_names = tuple(names) if names else tuple(
            f"skill_{i}" for i in range(num_skills or 1))
        self.num_agents = len(self.agents)
        self.has_state = _has_state(env)
        obs_size = sum(int(np.prod(s.shape)) for s in _leaf_spaces(self.observation_space))
        self.global_state_size = (int(np.prod(env.state_space.shape)) if self.has_state
                                  else self.num_agents * obs_size)

    @property
    def num_skills(self) -> int:
        return len(self.skill_names)


def _has_state(env: Any) -> bool:
    if getattr(env, "state_space", None) is None:
        return False
    try:
        env.state()
    except NotImplementedError:
        return False
    except Exception:  # not reset yet, etc.: the space is declared, trust it
        return True
    return True


def _leaf_spaces(space: gym.Space) -> list[gym.Space]:
    if isinstance(space, gym.spaces.Dict):
        return [s for k in sorted(space.spaces) for s in _leaf_spaces(space.spaces[k])]
    return [space]


def _zeros_like_space(space: gym.Space) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _zeros_like_space(s) for k, s in space.spaces.items()}
    return np.zeros(space.shape, np.float32)


class HostCollector:
    """Collects ``cfg.num_steps x len(envs)`` transitions from PettingZoo env copies.

    Args:
      envs: the env copies (e.g. ``[pettingzoo.make("parallel", id) for _ in range(E)]``);
        reused across calls and reset whenever an episode ends.
      spec: their :class:`HostEnvSpec`.
      cfg: the MAPPO config (``num_steps``, ``selector_period``; ``num_envs`` must equal
        ``len(envs)``).
      seed: seeds the resets (the ``j``-th episode started gets ``seed + j``).
      deterministic: take the executor's mode instead of sampling (evaluation, tests).
    """

    def __init__(self, envs: Sequence[Any], spec: HostEnvSpec, cfg: MAPPOConfig, seed: int = 0,
                 deterministic: bool = False):
        if len(envs) != cfg.num_envs:
            raise ValueError(f"got {len(envs)} env copies but MAPPOConfig.num_envs is "
                             f"{cfg.num_envs}")
        self.envs = list(envs)
        self.spec = spec
        self.cfg = cfg
        self._seed = seed
        self._episodes_started = 0
        self._obs: list[dict] = []
        self._ep_t = np.zeros(len(envs), np.int32)
        self._ep_return = np.zeros(len(envs), np.float64)
        self._ep_team = np.zeros(len(envs), np.float64)
        self._held: Any = None
        self._policy = _make_policy(cfg.selector_period, deterministic)
        for i in range(len(envs)):
            self._obs.append(self._reset(i))

    # --- per-env conversions ---------------------------------------------------------
    def _reset(self, i: int) -> dict:
        obs, _ = self.envs[i].reset(seed=self._seed + self._episodes_started)
        self._episodes_started += 1
        self._ep_t[i] = 0
        self._ep_return[i] = 0.0
        self._ep_team[i] = 0.0
        return obs

    def _stack_obs(self, obs: dict) -> tuple[Any, np.ndarray]:
        """Per-agent dict -> padded pytree with the agent axis first, and the alive mask."""
        zero = _zeros_like_space(self.spec.observation_space)
        rows = [obs.get(a, zero) for a in self.spec.agents]
        alive = np.array([a in obs for a in self.spec.agents], np.float32)
        stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x, np.float32) for x in xs]),
                               *rows)
        return stacked, alive

    def _global_state(self, i: int, stacked_obs: Any) -> np.ndarray:
        if self.spec.has_state:
            return np.asarray(self.envs[i].state(), np.float32).reshape(-1)
        leaves = [stacked_obs[k] for k in sorted(stacked_obs)] if isinstance(
            stacked_obs, dict) else [stacked_obs]
        return np.concatenate([x.reshape(-1) for x in leaves])

    def _comm_graph(self, i: int, alive: np.ndarray) -> np.ndarray:
        graph = getattr(self.envs[i], "comm_graph", None)
        n = self.spec.num_agents
        if callable(graph):
            adj = np.asarray(graph(), np.float32)
        else:
            adj = 1.0 - np.eye(n, dtype=np.float32)
        return adj * alive[:, None] * alive[None, :]

    def _env_action(self, a: np.ndarray) -> Any:
        if isinstance(self.spec.action_space, gym.spaces.Discrete):
            return int(a)
        return np.asarray(a, self.spec.action_space.dtype)

    def _inputs(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """The current step's stacked ``(obs, alive, adj, global_state)`` of all copies."""
        stacked = [self._stack_obs(o) for o in self._obs]
        obs = jax.tree.map(lambda *xs: np.stack(xs), *[s[0] for s in stacked])
        alive = np.stack([s[1] for s in stacked])
        adj = np.stack([self._comm_graph(i, alive[i]) for i in range(len(self.envs))])
        gstate = np.stack([self._global_state(i, s[0]) for i, s in enumerate(stacked)])
        return obs, alive, adj, gstate

    # --- collection -------------------------------------------------------------------
    def collect(self, ts: TrainState) -> tuple[TrainState, Batch, dict]:
        """Roll every copy ``num_steps`` steps with ``ts.actor``; return the advanced
        ``ts`` (key, env-step counter), the batch and rollout statistics."""
        cfg, spec = self.cfg, self.spec
        e, n = len(self.envs), spec.num_agents
        if self._held is None:
            self._held = jax.tree.map(lambda x: np.broadcast_to(x, (e, *x.shape)).copy(),
                                      jax.device_get(ts.actor.initial_skill(n)))
        steps: list[dict] = []
        finished_return: list[float] = []
        finished_team: list[float] = []
        env_reward_sum, team_reward_sum = 0.0, 0.0
        key = ts.key
        for _ in range(cfg.num_steps):
            obs, alive, adj, gstate = self._inputs()
            key, sub = jax.random.split(key)
            held, out, value = jax.device_get(self._policy(
                ts.actor, ts.critic, sub, obs, adj, gstate, self._held, self._ep_t))
            reward = np.zeros((e, n), np.float32)
            done = np.zeros((e, n), np.float32)
            for i, env in enumerate(self.envs):
                live = [a for a in spec.agents if a in self._obs[i]]
                acts = {a: self._env_action(out.env_action[i, spec.agents.index(a)])
                        for a in live}
                obs_i, rew, term, trunc, infos = env.step(acts)
                skills = np.asarray(skill_ids(held)[i])
                for j, a in enumerate(spec.agents):
                    if a not in rew:
                        continue
                    channels = (infos.get(a) or {}).get("skill_rewards")
                    reward[i, j] = float(rew[a]) if channels is None else float(
                        np.asarray(channels).reshape(-1)[skills[j]])
                    done[i, j] = float(term.get(a, False) or trunc.get(a, False))
                mean_reward = float(np.mean(list(rew.values()))) if rew else 0.0
                team_r = _team_reward(infos, rew, mean_reward)
                env_reward_sum += mean_reward
                team_reward_sum += team_r
                self._ep_return[i] += mean_reward
                self._ep_team[i] += team_r
                self._ep_t[i] += 1
                if not env.agents:  # episode over: every agent terminated or truncated
                    done[i, :] = 1.0
                    finished_return.append(self._ep_return[i])
                    finished_team.append(self._ep_team[i])
                    obs_i = self._reset(i)
                self._obs[i] = obs_i
            self._held = held
            steps.append(dict(obs=obs, adj=adj, global_state=gstate, held=held,
                              action=out.action, log_prob=out.log_prob, value=value,
                              reward=reward, done=done, alive=alive))
        # bootstrap value after the last step
        obs, alive, adj, gstate = self._inputs()
        key, sub = jax.random.split(key)
        _, _, last_value = jax.device_get(self._policy(
            ts.actor, ts.critic, sub, obs, adj, gstate, self._held, self._ep_t))
        traj = jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *steps)
        batch = Batch(last_value=jnp.asarray(last_value), **traj)
        stats = {
            "episodes": float(len(finished_return)),
            "episode_return": float(np.mean(finished_return)) if finished_return else np.nan,
            "team_return": float(np.mean(finished_team)) if finished_team else np.nan,
            "env_reward": env_reward_sum / (cfg.num_steps * e),
            "team_reward": team_reward_sum / (cfg.num_steps * e),
        }
        ts = ts._replace(key=key, env_steps=ts.env_steps + cfg.num_steps * e)
        return ts, batch, stats


def _team_reward(infos: dict, rewards: dict, mean_reward: float) -> float:
    """``infos[agent]["team_reward"]`` of the first agent that reports one, else the mean
    agent reward (DESIGN.md's default for custom envs)."""
    for a in rewards:
        info = infos.get(a) or {}
        if "team_reward" in info:
            return float(info["team_reward"])
    return mean_reward


def _make_policy(period: int, deterministic: bool) -> Callable:
    """One jitted call for all copies: ``(held, ActOut, value)`` from stacked inputs."""

    @eqx.filter_jit
    def policy(actor, critic, key, obs, adj, gstate, held, ep_t):
        keys = jax.random.split(key, adj.shape[0])
        new_held, out = jax.vmap(
            lambda k, o, a, h, t: actor.step(k, o, a, h, t, period, deterministic))(
                keys, obs, adj, held, ep_t)
        value = jax.vmap(critic)(gstate, skill_ids(new_held))
        return new_held, out, value

    return policy
