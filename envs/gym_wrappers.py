"""Gymnasium views of a functional swarm env: the whole swarm, and the selector's SMDP.

- :class:`SwarmGymEnv` — the swarm as one single-agent ``gymnasium.Env``: the observation
  stacks every agent's observation, the action is every agent's velocity ``[N, 2]``.
- :class:`SelectorEnv` — the selector level: the action is one skill index per agent; a
  given executor policy carries the skills out for ``selector_period`` env steps and the
  reward is the team reward summed over them. Any Gymnasium algorithm can thus train or
  probe a skill selector over a frozen executor.

Both observations are ``Dict(maps=[N, C, H, W], vec=[N, D], adj=[N, N])``, where ``adj``
is the comm graph (what an LPAC backbone needs besides the per-agent observations).
Seeding follows :mod:`envs.pettingzoo_env`: ``reset(seed)`` re-roots a JAX key stream;
``reset()`` continues it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from envs.base import Obs, SwarmEnv
from envs.pettingzoo_env import Packer, check_adapter_args, key_from_seed

#: ``executor(key, obs, adj, skills) -> actions``: ``obs`` is the env's obs pytree
#: (``{"maps": [N, C, H, W], "vec": [N, D]}``), ``adj`` the ``[N, N]`` float32 comm graph,
#: ``skills`` int32 ``[N]`` (one index into ``skill_names`` per agent); it returns
#: ``[N, 2]`` float32 velocities in ``[-1, 1]``. It must be JAX-traceable (jit/scan) unless
#: the wrapper is built with ``jit_executor=False``.
Executor = Callable[[jax.Array, Obs, jax.Array, jax.Array], jax.Array]


def random_executor(key: jax.Array, obs: Obs, adj: jax.Array, skills: jax.Array) -> jax.Array:
    """Skill-agnostic placeholder executor: uniform random velocities in ``[-1, 1]^2``."""
    del obs, adj
    return jax.random.uniform(key, (skills.shape[0], 2), jnp.float32, -1.0, 1.0)


def _swarm_obs_space(env: SwarmEnv) -> gym.spaces.Dict:
    n = int(env.num_agents)
    spaces = {
        name: gym.spaces.Box(-np.inf, np.inf, shape=(n, *box.shape), dtype=np.float32)
        for name, box in env.observation_space.spaces.items()
    }
    spaces["adj"] = gym.spaces.Box(0.0, 1.0, shape=(n, n), dtype=np.float32)
    return gym.spaces.Dict(spaces)


def _with_adj(env: SwarmEnv, obs: Obs, state: Any) -> dict[str, jax.Array]:
    return {**obs, "adj": env.comm_graph(state).astype(jnp.float32)}


class _SwarmFns(NamedTuple):
    reset: Callable
    step: Callable  # (key, state, actions) -> (key, state, packed (obs + adj, EnvOut))
    unpack: Callable


@functools.lru_cache(maxsize=32)
def _cached_swarm_fns(env: SwarmEnv) -> _SwarmFns:
    return _build_swarm_fns(env)


def _build_swarm_fns(env: SwarmEnv) -> _SwarmFns:
    def reset(key):
        key, sub = jax.random.split(key)
        obs, state = env.reset(sub)
        return key, _with_adj(env, obs, state), state

    _, state_shape = jax.eval_shape(env.reset, jax.random.key(0))
    act_shape = jax.ShapeDtypeStruct((env.num_agents, *env.action_space.shape), jnp.float32)
    obs_shape, _, out_shape = jax.eval_shape(env.step, jax.random.key(0), state_shape, act_shape)
    obs_shape = {**obs_shape, "adj": jax.ShapeDtypeStruct((env.num_agents,) * 2, jnp.float32)}
    packer = Packer((obs_shape, out_shape))

    def step(key, state, actions):
        key, sub = jax.random.split(key)
        obs, state, out = env.step(sub, state, actions)
        return key, state, packer.pack((_with_adj(env, obs, state), out))

    return _SwarmFns(jax.jit(reset), jax.jit(step), packer.unpack)


def _swarm_fns(env: SwarmEnv) -> _SwarmFns:
    try:
        return _cached_swarm_fns(env)
    except TypeError:  # unhashable env (array fields): compile for this instance
        return _build_swarm_fns(env)


class _JaxSwarmGymBase(gym.Env):
    """Shared seeding, key handling and rendering of the two wrappers."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012

    def __init__(self, env: SwarmEnv, render_mode: str | None):
        check_adapter_args(env, render_mode, self.metadata["render_modes"])
        self.env = env
        self.render_mode = render_mode
        self.num_agents = int(env.num_agents)
        self.skill_names = tuple(env.skill_names)
        self.observation_space = _swarm_obs_space(env)
        self._fns = _swarm_fns(env)
        self._key: jax.Array | None = None
        self._state: Any = None
        self._obs: dict[str, jax.Array] | None = None  # device obs (the executor reads it)
        self._episode_over = True

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._key = key_from_seed(seed)
        elif self._key is None:
            self._key = key_from_seed(int(self.np_random.integers(2**31)))
        self._key, self._obs, self._state = self._fns.reset(self._key)
        self._episode_over = False
        return jax.device_get(self._obs), {}

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='rgb_array'")
            return None
        if self._state is None:
            raise RuntimeError("render() needs an episode: call reset() first")
        return self.env.render(jax.device_get(self._state))

    def _check_running(self) -> None:
        if self._episode_over:
            raise RuntimeError("the episode is over (or never started): call reset() first")


class SwarmGymEnv(_JaxSwarmGymBase):
    """The whole swarm as one Gymnasium env.

    - observation: ``Dict(maps=[N, C, H, W], vec=[N, D], adj=[N, N])`` float32.
    - action: ``Box(-1, 1, (N, 2))`` — every agent's velocity command.
    - reward: ``reward="mean"`` (default) the mean of the dense per-agent rewards, or
      ``reward="team"`` the sparse team reward.
    - episodes end by truncation at the env's ``max_steps`` (never termination).
    - ``info``: ``reward`` ``[N]``, ``skill_rewards`` ``[N, K]``, ``team_reward`` (float),
      ``metrics`` (``dict[str, float]``).
    """

    def __init__(
        self,
        env: SwarmEnv,
        reward: Literal["mean", "team"] = "mean",
        render_mode: str | None = None,
    ):
        if reward not in ("mean", "team"):
            raise ValueError(f"reward must be 'mean' or 'team', got {reward!r}")
        super().__init__(env, render_mode)
        self.reward_mode = reward
        per_agent = env.action_space
        self.action_space = gym.spaces.Box(
            np.broadcast_to(per_agent.low, (self.num_agents, *per_agent.shape)),
            np.broadcast_to(per_agent.high, (self.num_agents, *per_agent.shape)),
            dtype=per_agent.dtype,
        )

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        self._check_running()
        action = np.asarray(action, dtype=self.action_space.dtype)
        if action.shape != self.action_space.shape:
            raise ValueError(
                f"action must have shape {self.action_space.shape}, got {action.shape}"
            )
        self._key, self._state, packed = self._fns.step(self._key, self._state, action)
        obs, out = self._fns.unpack(Packer.to_host(packed))
        truncated = bool(out.done)
        self._episode_over = truncated
        team = float(out.team_reward)
        reward = float(np.mean(out.reward)) if self.reward_mode == "mean" else team
        info = {
            "reward": out.reward,
            "skill_rewards": out.skill_rewards,
            "team_reward": team,
            "metrics": {k: float(v) for k, v in out.metrics.items()},
        }
        return obs, reward, False, truncated, info


class SelectorEnv(_JaxSwarmGymBase):
    """Selector-level (SMDP) env: pick one skill per agent; an executor carries it out.

    - action: ``MultiDiscrete([K] * N)`` — a skill index per agent.
    - one ``step`` runs ``selector_period`` env steps (fewer if the episode ends first),
      each with ``actions = executor(key, obs, adj, skills)`` (see :data:`Executor`).
    - reward: the team reward summed over those env steps (what team fitness sums).
    - observation: as :class:`SwarmGymEnv`, at the next decision step.
    - ``info``: ``team_reward`` (= reward), ``reward`` ``[N]`` and ``skill_rewards``
      ``[N, K]`` summed over the period, ``env_steps`` (int), ``metrics`` (last step).

    Args:
      env: the functional env.
      executor: the frozen executor; default :func:`random_executor` (skill-agnostic).
      selector_period: env steps per selector decision.
      jit_executor: trace the executor into the jitted period loop (default). Set
        ``False`` for a non-JAX callable; it is then called from Python every env step.
    """

    def __init__(
        self,
        env: SwarmEnv,
        executor: Executor | None = None,
        selector_period: int = 8,
        render_mode: str | None = None,
        jit_executor: bool = True,
    ):
        if isinstance(selector_period, bool) or not isinstance(selector_period, int):
            raise TypeError(f"selector_period must be an int, got {selector_period!r}")
        if selector_period < 1:
            raise ValueError(f"selector_period must be >= 1, got {selector_period}")
        if executor is not None and not callable(executor):
            raise TypeError(f"executor must be callable, got {type(executor).__name__}")
        super().__init__(env, render_mode)
        self.executor = executor if executor is not None else random_executor
        self.selector_period = selector_period
        self.jit_executor = jit_executor
        self.action_space = gym.spaces.MultiDiscrete(
            np.full(self.num_agents, len(self.skill_names), dtype=np.int64)
        )
        if jit_executor:
            self._period = jax.jit(self._run_period)
        else:
            self._env_step = jax.jit(self._env_step_with_adj)

    def _env_step_with_adj(self, key, state, actions):
        obs, state, out = self.env.step(key, state, actions)
        return _with_adj(self.env, obs, state), state, out

    def _substep(self, key, state, obs, skills):
        """One env step under the executor: key split -> (executor key, env key)."""
        key, k_exec, k_env = jax.random.split(key, 3)
        core_obs = {k: v for k, v in obs.items() if k != "adj"}
        actions = jnp.asarray(self.executor(k_exec, core_obs, obs["adj"], skills), jnp.float32)
        return (key, *self._env_step_with_adj(k_env, state, actions))

    def _run_period(self, key, state, obs, skills):
        n, k = self.num_agents, len(self.skill_names)
        zeros = (jnp.zeros(()), jnp.zeros((n,)), jnp.zeros((n, k)))

        def body(carry, _):
            key, state, obs, done, steps, sums, metrics = carry
            key2, obs2, state2, out = self._substep(key, state, obs, skills)
            live = jnp.logical_not(done)
            keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(live, a, b), new, old)
            add = (out.team_reward, out.reward, out.skill_rewards)
            sums = jax.tree.map(lambda s, x: s + jnp.where(live, x, 0).astype(s.dtype), sums, add)
            carry = (
                key2,
                keep(state2, state),
                keep(obs2, obs),
                jnp.logical_or(done, out.done),
                steps + live.astype(jnp.int32),
                sums,
                keep(out.metrics, metrics),
            )
            return carry, None

        _, _, _, out0 = jax.eval_shape(self._substep, key, state, obs, skills)
        metrics0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), out0.metrics)
        init = (key, state, obs, jnp.array(False), jnp.array(0, jnp.int32), zeros, metrics0)
        carry, _ = jax.lax.scan(body, init, None, length=self.selector_period)
        key, state, obs, done, steps, sums, metrics = carry
        return key, state, obs, done, steps, sums, metrics

    def _run_period_python(self, skills):
        n, k = self.num_agents, len(self.skill_names)
        team, rew, skill = 0.0, np.zeros(n, np.float32), np.zeros((n, k), np.float32)
        done, steps, metrics = False, 0, {}
        for _ in range(self.selector_period):
            self._key, k_exec, k_env = jax.random.split(self._key, 3)
            core_obs = {name: v for name, v in self._obs.items() if name != "adj"}
            actions = np.asarray(
                self.executor(k_exec, core_obs, self._obs["adj"], skills), np.float32
            )
            obs, self._state, out = self._env_step(k_env, self._state, actions)
            out = jax.device_get(out)
            self._obs = obs
            team += float(out.team_reward)
            rew += out.reward
            skill += out.skill_rewards
            steps += 1
            metrics = out.metrics
            if bool(out.done):
                done = True
                break
        return done, steps, (team, rew, skill), metrics

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        self._check_running()
        skills = np.asarray(action)
        if skills.shape != (self.num_agents,) or not np.issubdtype(skills.dtype, np.integer):
            raise ValueError(
                f"action must be {self.num_agents} integer skill indices, got {action!r}"
            )
        if skills.min() < 0 or skills.max() >= len(self.skill_names):
            raise ValueError(
                f"skill indices must be in [0, {len(self.skill_names)}), got {skills.tolist()}"
            )
        skills = skills.astype(np.int32)
        if self.jit_executor:
            self._key, self._state, self._obs, done, steps, sums, metrics = self._period(
                self._key, self._state, self._obs, skills
            )
            done, steps, sums, metrics, obs = jax.device_get(
                (done, steps, sums, metrics, self._obs)
            )
        else:
            done, steps, sums, metrics = self._run_period_python(skills)
            obs = jax.device_get(self._obs)
        team, rew, skill = sums
        truncated = bool(done)
        self._episode_over = truncated
        info = {
            "team_reward": float(team),
            "reward": np.asarray(rew, np.float32),
            "skill_rewards": np.asarray(skill, np.float32),
            "env_steps": int(steps),
            "metrics": {name: float(v) for name, v in metrics.items()},
        }
        return obs, float(team), False, truncated, info
