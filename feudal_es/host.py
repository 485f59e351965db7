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

What a custom env may provide (all optional; DESIGN.md "Custom environments"):
``comm_graph() -> [N, N]`` (else all-to-all among live agents), ``state()`` (else the
concatenated padded observations), ``infos[agent]["skill_rewards"]`` (else the agent's
reward for every skill) and ``infos[agent]["team_reward"]`` (else the mean agent reward).
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from feudal_es.mappo import (
    Batch,
    MAPPOConfig,
    TrainState,
    skill_ids,
    update,
    update_fused,
    uses_fused_update,
)


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
        check_spaces(self.observation_space, self.action_space, f"{type(env).__name__}")
        names = getattr(env, "skill_names", None)
        self.skill_names = tuple(names) if names else tuple(
            f"skill_{i}" for i in range(num_skills or 1))
        self.num_agents = len(self.agents)
        self.agent_index = {a: i for i, a in enumerate(self.agents)}
        self.has_state = _has_state(env)
        obs_size = sum(int(np.prod(s.shape)) for s in _leaf_spaces(self.observation_space))
        self.global_state_size = (int(np.prod(env.state_space.shape)) if self.has_state
                                  else self.num_agents * obs_size)

    @property
    def num_skills(self) -> int:
        return len(self.skill_names)


def check_spaces(obs_space: gym.Space, act_space: gym.Space, name: str = "env") -> None:
    """Refuse (``ValueError`` naming the space) what the feudal actor cannot read or emit:
    observations must be a numeric ``Box`` or a ``Dict`` of them, actions a float ``Box``
    or a ``Discrete`` starting at 0."""
    leaves = (list(obs_space.spaces.items()) if isinstance(obs_space, gym.spaces.Dict)
              else [(None, obs_space)])
    for key, space in leaves:
        where = "observation space" + ("" if key is None else f" entry {key!r}")
        if not isinstance(space, gym.spaces.Box) or space.dtype is None or \
                np.dtype(space.dtype).kind not in "biuf":
            raise ValueError(
                f"{name}: {where} {space} is not supported: the feudal actor reads a numeric "
                "Box or a Dict of Box spaces (flatten other spaces in a wrapper, e.g. with "
                "gymnasium.spaces.flatten_space)")
        if len(space.shape) not in (1, 2, 3):
            raise ValueError(f"{name}: {where} {space} has rank {len(space.shape)}; the actor "
                             "reads rank 1 (vector) or rank 2/3 (image, channel-first)")
    if isinstance(act_space, gym.spaces.Discrete):
        if int(act_space.start) != 0:
            raise ValueError(f"{name}: action space {act_space} starts at {act_space.start}; "
                             "the actor emits Discrete actions 0..n-1 (use start=0)")
    elif isinstance(act_space, gym.spaces.Box):
        if np.dtype(act_space.dtype).kind != "f":
            raise ValueError(f"{name}: action space {act_space} has dtype {act_space.dtype}; "
                             "a Box action space must be floating point (use Discrete for "
                             "integer actions)")
    else:
        raise ValueError(f"{name}: unsupported action space {act_space} (the actor emits Box "
                         "or Discrete actions)")


# ---------------------------------------------------------------------------------------
# checks of what a custom env returns, and a bound on how long it may take
# ---------------------------------------------------------------------------------------
class EnvOutputError(ValueError):
    """A PettingZoo env returned something the ParallelEnv API does not allow (the
    message names the env, the call, the agent and what was wrong)."""


class EnvTimeout(TimeoutError):
    """An env call (or an evaluation episode) ran past its time limit."""


def _check_obs(space: gym.Space, x: Any, where: str) -> None:
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(x, Mapping):
            raise EnvOutputError(f"{where} is a {type(x).__name__}; the observation space is a "
                                 "Dict, so a dict is expected")
        for k, sub in space.spaces.items():
            if k not in x:
                raise EnvOutputError(f"{where} has no entry {k!r} (keys: {sorted(x)})")
            _check_obs(sub, x[k], f"{where}[{k!r}]")
        return
    try:
        arr = np.asarray(x)
    except Exception as e:  # ragged lists etc.
        raise EnvOutputError(f"{where} is not an array ({e})") from None
    if arr.shape != tuple(space.shape) or arr.dtype.kind not in "biuf":
        raise EnvOutputError(f"{where} is {arr.dtype}{list(arr.shape)}; the observation space "
                             f"says {space.dtype}{list(space.shape)}")


def check_reset(env: Any, out: Any, spec: HostEnvSpec) -> dict:
    """Validate ``env.reset(...)``'s ``(observations, infos)``; returns the observations."""
    name = type(env).__name__
    if not isinstance(out, tuple | list) or len(out) != 2:
        raise EnvOutputError(f"{name}.reset() must return (observations, infos) (PettingZoo "
                             f">= 1.22), got {_brief(out)}")
    obs = out[0]
    if not isinstance(obs, Mapping):
        raise EnvOutputError(f"{name}.reset() observations must be a dict keyed by agent, got "
                             f"{type(obs).__name__}")
    _check_agent_keys(name, "reset()", "observations", obs, spec)
    _check_live_obs(env, obs, spec, f"{name}.reset()")
    return obs


def check_step(env: Any, actions: Mapping, out: Any, spec: HostEnvSpec,
               live: Sequence[str] | None = None) -> tuple:
    """Validate ``env.step(actions)``'s 5-tuple of per-agent dicts: every agent that acted
    while in ``env.agents`` (``live``: the list before the step; default all that acted)
    has a reward, termination and truncation flag, every agent still in ``env.agents`` an
    observation of the declared shape, rewards are numbers and keys are known agents."""
    name = type(env).__name__
    if not isinstance(out, tuple | list) or len(out) != 5:
        raise EnvOutputError(
            f"{name}.step() must return (observations, rewards, terminations, truncations, "
            f"infos) (PettingZoo >= 1.22), got {_brief(out)}")
    labels = ("observations", "rewards", "terminations", "truncations", "infos")
    for label, d in zip(labels, out, strict=True):
        if not isinstance(d, Mapping):
            raise EnvOutputError(f"{name}.step() {label} must be a dict keyed by agent, got "
                                 f"{type(d).__name__}")
        _check_agent_keys(name, "step()", label, d, spec)
    obs, rewards, terms, truncs, _ = out
    for label, d in zip(labels[1:4], (rewards, terms, truncs), strict=True):
        missing = [a for a in actions if a not in d and (live is None or a in live)]
        if missing:
            raise EnvOutputError(f"{name}.step() {label} miss agent(s) {missing} that were "
                                 f"given actions (got {sorted(d)})")
    for a, r in rewards.items():
        arr = np.asarray(r) if isinstance(r, int | float | np.generic | np.ndarray) else None
        if arr is None or arr.size != 1 or arr.dtype.kind not in "biuf":
            raise EnvOutputError(f"{name}.step() reward of {a!r} must be a number, got "
                                 f"{_brief(r)}")
    _check_live_obs(env, obs, spec, f"{name}.step()")
    return out


def _check_live_obs(env: Any, obs: Mapping, spec: HostEnvSpec, where: str) -> None:
    """Every agent in ``env.agents`` has an observation, each of the declared shape."""
    for a in getattr(env, "agents", []):
        if a not in obs:
            raise EnvOutputError(f"{where}: agent {a!r} is in env.agents but got no "
                                 "observation")
    for a, x in obs.items():
        _check_obs(spec.observation_space, x, f"{where} observation of {a!r}")


def _check_agent_keys(name: str, call: str, label: str, d: Mapping, spec: HostEnvSpec) -> None:
    unknown = [a for a in d if a not in spec.agent_index]
    if unknown:
        raise EnvOutputError(f"{name}.{call} {label} name agent(s) {unknown[:5]} that are not "
                             f"in possible_agents {spec.agents}")


def _brief(x: Any) -> str:
    text = repr(x)
    return f"{type(x).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def neutral_actions(spec: HostEnvSpec, agents: Sequence[str]) -> dict:
    """A fixed, valid action per agent (0 / the Box point nearest the origin): the probe
    step :func:`probe_env` takes."""
    space = spec.action_space
    if isinstance(space, gym.spaces.Discrete):
        return {a: 0 for a in agents}
    zero = np.clip(np.zeros(space.shape), space.low, space.high).astype(space.dtype)
    return {a: zero.copy() for a in agents}


def probe_env(env: Any, spec: HostEnvSpec, seed: int = 0) -> None:
    """One checked ``reset`` and ``step`` (neutral actions), so a custom env that breaks
    the ParallelEnv API is refused before any training compute is spent."""
    obs = check_reset(env, env.reset(seed=seed), spec)
    live = list(env.agents)
    acts = neutral_actions(spec, [a for a in spec.agents if a in obs])
    check_step(env, acts, env.step(acts), spec, live)


def _can_alarm() -> bool:
    return hasattr(signal, "setitimer") and \
        threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deadline(seconds: float, message: str) -> Iterator[float]:
    """Bound an env call: after ``seconds`` (0 = no bound) raise ``EnvTimeout(message)``
    in it; yields the ``time.monotonic()`` deadline. Wrap env code only, never JAX calls
    (an exception raised inside a compilation could leave its caches half-written).

    Why SIGALRM: a hung pure-Python env (a loop, a sleep, a blocking socket read) cannot
    be stopped from another thread, and a worker thread left running keeps the env
    instance and its CPU. ``setitimer`` interrupts the main thread at the next bytecode
    or system call. It cannot interrupt C code that holds the GIL without returning;
    off the main thread (or on Windows) no signal is set and callers check the yielded
    deadline between steps instead. A timer already running (e.g. pytest-timeout's) is
    restored afterwards with its remaining time; if it is due first, it is left alone.
    """
    if not seconds or seconds <= 0:
        yield math.inf
        return
    start = time.monotonic()
    end = start + seconds
    if not _can_alarm():
        yield end
        return
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    if 0 < outer_left <= seconds:  # an outer alarm fires first: keep it, check between steps
        yield end
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise EnvTimeout(message)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield end
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left > 0:
            left = max(outer_left - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, outer_interval)


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


# ---------------------------------------------------------------------------------------
# per-step conversions shared by the collector and the evaluator
# ---------------------------------------------------------------------------------------
def zeros_like_space(space: gym.Space) -> Any:
    """A float32 zero observation of ``space`` (what a dead agent's padding row holds)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: zeros_like_space(s) for k, s in space.spaces.items()}
    return np.zeros(space.shape, np.float32)


def stack_agents(spec: HostEnvSpec, obs: Mapping[str, Any]) -> tuple[Any, np.ndarray]:
    """Per-agent observation dict -> ``(pytree with the agent axis first, alive[N])``:
    agents padded to ``possible_agents`` with zeros, as in MAPPO's death masking."""
    zero = zeros_like_space(spec.observation_space)
    rows = [obs.get(a, zero) for a in spec.agents]
    alive = np.array([a in obs for a in spec.agents], np.float32)
    stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x, np.float32) for x in xs]),
                           *rows)
    return stacked, alive


def adjacency(graph: Callable[[], Any] | None, num_agents: int,
              alive: np.ndarray) -> np.ndarray:
    """``[N, N]`` comm graph among live agents: the env's ``comm_graph()`` result when it
    has one (``graph``), else all-to-all."""
    adj = (np.asarray(graph(), np.float32) if callable(graph)
           else 1.0 - np.eye(num_agents, dtype=np.float32))
    return adj * alive[:, None] * alive[None, :]


def env_actions(spec: HostEnvSpec, actions: np.ndarray, live: Sequence[str]) -> dict:
    """The actor's ``[N, ...]`` actions as the env's per-agent dict, for the live agents."""
    if isinstance(spec.action_space, gym.spaces.Discrete):
        return {a: int(actions[spec.agent_index[a]]) for a in live}
    dtype = spec.action_space.dtype
    return {a: np.asarray(actions[spec.agent_index[a]], dtype) for a in live}


def team_reward(infos: Mapping, rewards: Mapping) -> float:
    """``infos[agent]["team_reward"]`` of the first agent that reports one, else the mean
    agent reward (DESIGN.md's default for custom envs)."""
    for a in rewards:
        info = infos.get(a) or {}
        if "team_reward" in info:
            return float(info["team_reward"])
    return float(np.mean(list(rewards.values()))) if rewards else 0.0


@functools.cache
def policy(period: int, deterministic: bool, explore: float = 0.0) -> Callable:
    """The one jitted policy of the host path, cached per setting (so a second trainer on
    the same shapes does not compile it again; ``explore``: see ``FeudalActor.step``):
    ``policy(actor, critic, keys[E], obs[E], adj[E], gstate[E], held[E], t[E]) ->
    (held, ActOut, value)`` for ``E`` env copies at once; with ``critic=None`` (and
    ``gstate=None``) the value is ``None`` (evaluation)."""

    @eqx.filter_jit
    def step(actor, critic, keys, obs, adj, gstate, held, ep_t):
        new_held, out = jax.vmap(
            lambda k, o, a, h, t: actor.step(k, o, a, h, t, period, deterministic, explore))(
                keys, obs, adj, held, ep_t)
        value = None if critic is None else jax.vmap(critic)(gstate, skill_ids(new_held))
        return new_held, out, value

    return step


@functools.cache
def _fused_update(cfg: MAPPOConfig) -> Callable:
    return eqx.filter_jit(lambda ts, batch: update_fused(ts, batch, cfg))


def host_update(cfg: MAPPOConfig, obs_space: gym.Space, actor: Any = None) -> Callable:
    """The MAPPO update of the host path, as the JAX path chooses it
    (:func:`feudal_es.mappo.uses_fused_update`, ``actor`` the ``ActorConfig``): one jitted
    :func:`~feudal_es.mappo.update_fused`, or the split update's jitted pieces (shared by
    every trainer)."""
    if uses_fused_update(cfg, obs_space, actor):
        return _fused_update(cfg)
    return lambda ts, batch: update(ts, batch, cfg)


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
      step_timeout: seconds one ``reset``/``step`` call may take (0 = no limit); over it
        :class:`EnvTimeout` is raised (see :func:`deadline`).

    Every ``reset``/``step`` result is checked (:func:`check_reset`, :func:`check_step`):
    a malformed one raises :class:`EnvOutputError` naming the agent and the problem.
    """

    def __init__(self, envs: Sequence[Any], spec: HostEnvSpec, cfg: MAPPOConfig, seed: int = 0,
                 deterministic: bool = False, step_timeout: float = 0.0):
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
        self._policy = policy(cfg.selector_period, deterministic, cfg.option_exploration)
        self._bootstrap = policy(cfg.selector_period, deterministic)
        self.step_timeout = float(step_timeout)
        for i in range(len(envs)):
            self._obs.append(self._reset(i))

    # --- per-env conversions ---------------------------------------------------------
    def _reset(self, i: int) -> dict:
        env = self.envs[i]
        with deadline(self.step_timeout, f"{type(env).__name__}.reset() took longer than "
                      f"{self.step_timeout:g} s (time limit)"):
            out = env.reset(seed=self._seed + self._episodes_started)
        obs = check_reset(env, out, self.spec)
        self._episodes_started += 1
        self._ep_t[i] = 0
        self._ep_return[i] = 0.0
        self._ep_team[i] = 0.0
        return obs

    def restart(self, i: int) -> None:
        """Drop copy ``i``'s episode in progress and reset it (the next seed in turn)."""
        self._obs[i] = self._reset(i)

    def _global_state(self, i: int, stacked_obs: Any) -> np.ndarray:
        if self.spec.has_state:
            return np.asarray(self.envs[i].state(), np.float32).reshape(-1)
        leaves = [stacked_obs[k] for k in sorted(stacked_obs)] if isinstance(
            stacked_obs, dict) else [stacked_obs]
        return np.concatenate([x.reshape(-1) for x in leaves])

    def _inputs(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """The current step's stacked ``(obs, alive, adj, global_state)`` of all copies."""
        stacked = [stack_agents(self.spec, o) for o in self._obs]
        obs = jax.tree.map(lambda *xs: np.stack(xs), *[s[0] for s in stacked])
        alive = np.stack([s[1] for s in stacked])
        adj = np.stack([adjacency(getattr(env, "comm_graph", None), self.spec.num_agents,
                                  alive[i]) for i, env in enumerate(self.envs)])
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
                ts.actor, ts.critic, jax.random.split(sub, e), obs, adj, gstate, self._held,
                self._ep_t))
            reward = np.zeros((e, n), np.float32)
            done = np.zeros((e, n), np.float32)
            for i, env in enumerate(self.envs):
                acts = env_actions(spec, out.env_action[i],
                                   [a for a in spec.agents if a in self._obs[i]])
                live_i = list(env.agents)
                with deadline(self.step_timeout, f"{type(env).__name__}.step() took longer "
                              f"than {self.step_timeout:g} s (time limit)"):
                    out_i = env.step(acts)
                obs_i, rew, term, trunc, infos = check_step(env, acts, out_i, spec, live_i)
                skills = np.asarray(skill_ids(held)[i])
                for j, a in enumerate(spec.agents):
                    if a not in rew:
                        continue
                    channels = (infos.get(a) or {}).get("skill_rewards")
                    reward[i, j] = float(rew[a]) if channels is None else float(
                        np.asarray(channels).reshape(-1)[skills[j]])
                    done[i, j] = float(term.get(a, False) or trunc.get(a, False))
                mean_reward = float(np.mean(list(rew.values()))) if rew else 0.0
                team_r = team_reward(infos, rew)
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
        # bootstrap value after the last step, under the option the selector would choose
        # (no exploration, as the JAX path's collect)
        obs, alive, adj, gstate = self._inputs()
        key, sub = jax.random.split(key)
        _, _, last_value = jax.device_get(self._bootstrap(
            ts.actor, ts.critic, jax.random.split(sub, e), obs, adj, gstate, self._held,
            self._ep_t))
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


class HostEvaluator:
    """Team fitness on any PettingZoo ParallelEnv: a loop reusing ``episodes`` instances.

    Episode ``e`` of every member is reset with ``seed + e`` and plays with key
    ``fold_in(key, e)`` (common random numbers). Fault isolation: an exception in a
    member's episode (the env raising, a malformed ``reset``/``step`` output, the episode
    running past ``timeout`` seconds) fails that member only: its returns are NaN (ES
    ranks it last), the failure is recorded in ``failures`` and the env instance is
    replaced by a fresh one.
    """

    def __init__(self, make: Callable[..., Any], spec: HostEnvSpec, episodes: int,
                 period: int, deterministic: bool, max_steps: int, timeout: float = 0.0,
                 params: str = "selector"):
        self.make, self.params = make, params
        self.envs = [make() for _ in range(episodes)]
        self.spec = spec
        self.max_steps = max_steps
        self.timeout = float(timeout)
        self.failures: list[dict[str, Any]] = []  # of the last returns() call
        self._policy = policy(int(period), bool(deterministic))

    def episode(self, actor: Any, env: Any, seed: int, key: jax.Array) -> float:
        """One episode's team return (the sum of :func:`team_reward` over its steps)."""
        spec, budget, used = self.spec, self.timeout, 0.0
        message = (f"an evaluation episode of {type(env).__name__} spent more than "
                   f"{budget:g} s in env calls (episode_timeout)")

        def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
            """An env call under the episode's remaining time budget (the policy's JAX
            calls, compilation included, are not timed and never interrupted)."""
            nonlocal used
            if not budget:
                return fn(*args, **kwargs)
            if used >= budget:  # also where no SIGALRM can interrupt (threads)
                raise EnvTimeout(message)
            t0 = time.monotonic()
            try:
                with deadline(budget - used, message):
                    return fn(*args, **kwargs)
            finally:
                used += time.monotonic() - t0

        obs = check_reset(env, call(env.reset, seed=seed), spec)
        held = jax.tree.map(lambda x: x[None], actor.initial_skill(spec.num_agents))
        graph = getattr(env, "comm_graph", None)
        total, t = 0.0, 0
        while env.agents and t < self.max_steps:
            stacked, alive = stack_agents(spec, obs)
            adj = adjacency((lambda: call(graph)) if callable(graph) else None,
                            spec.num_agents, alive)
            key, sub = jax.random.split(key)
            held, out, _ = self._policy(actor, None, sub[None],
                                        jax.tree.map(lambda x: x[None], stacked), adj[None],
                                        None, held, np.full(1, t, np.int32))
            acts = env_actions(spec, np.asarray(out.env_action[0]),
                               [a for a in spec.agents if a in obs])
            live = list(env.agents)
            obs, rew, _, _, infos = check_step(env, acts, call(env.step, acts), spec, live)
            total += team_reward(infos, rew)
            t += 1
        return total

    def returns(self, actor: Any, thetas: np.ndarray, seed: int, key: jax.Array,
                episodes: int | None = None) -> np.ndarray:
        """``[P, E]`` team returns of ``thetas[P, D]`` put into ``actor`` (its selector, or
        the whole actor: ``params``); a failed member's row is NaN (see ``failures``)."""
        from agents import set_es_theta

        count = len(self.envs) if episodes is None else int(episodes)
        while len(self.envs) < count:
            self.envs.append(self.make())
        out = np.zeros((len(thetas), count), np.float64)
        self.failures = []
        for p, theta in enumerate(thetas):
            a = set_es_theta(actor, jnp.asarray(theta), self.params)
            for e in range(count):
                try:
                    out[p, e] = self.episode(a, self.envs[e], seed + e,
                                             jax.random.fold_in(key, e))
                except Exception as err:  # the env's fault: this member fails, others run
                    out[p] = np.nan
                    frame = traceback.extract_tb(err.__traceback__)[-1]
                    self.failures.append({
                        "member": p, "episode": e, "env_seed": seed + e,
                        "error": f"{type(err).__name__}: {err}",
                        "where": f"{frame.filename}:{frame.lineno} in {frame.name}"})
                    broken, self.envs[e] = self.envs[e], self.make()
                    with contextlib.suppress(Exception), deadline(self.timeout, "close()"):
                        broken.close()  # a hung env may hang in close() too: bounded
                    break
        return out
