"""A PettingZoo ``ParallelEnv`` as the host path sees it: its spec, checks of what it
returns, time limits on its calls, and the conversions between its per-agent dicts and the
actor's arrays. :class:`HostEnvSpec` reads the shapes the actor and critic need (agents in
groups by their spaces, :mod:`envs.groups`; :func:`check_spaces` refuses spaces the actor
cannot read or emit). :func:`check_reset` and :func:`check_step` validate every ``reset`` /
``step`` result against the ParallelEnv API, raising :class:`EnvOutputError` naming the
env, the call, the agent and the problem; :func:`probe_env` runs one checked reset and
step before any compute is spent. :func:`deadline` bounds an env call in time
(:class:`EnvTimeout`). :func:`stack_agents`, :func:`adjacency`, :func:`env_actions` and
:func:`team_reward` are the per-step conversions the collector
(:mod:`feudal_es.host_collect`) and the evaluator (:mod:`feudal_es.host_eval`) share.
Nothing here runs JAX.

:class:`EnvNotices` reports, once each, what an env does that training survives but its
author should know: an episode cut at ``TrainerConfig.max_episode_steps`` (an env with
no time limit of its own), and a non-finite observation, reward, ``skill_rewards`` or
``team_reward`` (:func:`first_nonfinite` names the agent and the field). A non-finite
value only warns, it does not fail the episode: the damage is already contained where
it lands (a non-finite MAPPO update is skipped, a non-finite ES fitness ranks last), and
an env with an odd ``inf`` in an entry no reward depends on keeps training; the warning
names the source, so the user looks at the env rather than at those two symptoms.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import jax
import numpy as np

from envs.groups import group_agents, padded_action_space, padded_observation_space, team_agents

log = logging.getLogger("feudal_es")


class HostEnvSpec:
    """Shapes of a PettingZoo env as the actor and critic see them.

    Agents that share one observation and one action space share one actor. Agents with
    different spaces come in groups (``agent_groups``, :mod:`envs.groups`: one actor per
    group), their observations stacked zero-padded to the largest
    (``observation_space``), their actions stacked likewise (``action_space``); each
    agent's own spaces are ``agent_spaces``; ``groups``: ``TrainerConfig.groups``.
    """

    def __init__(self, env: Any, num_skills: int | None = None,
                 groups: Mapping[str, Sequence[str]] | None = None):
        self.agents: list[str] = list(env.possible_agents)
        if not self.agents:
            raise ValueError(f"{type(env).__name__} has no possible_agents")
        name = type(env).__name__
        obs_spaces = [env.observation_space(a) for a in self.agents]
        act_spaces = [env.action_space(a) for a in self.agents]
        self.agent_spaces = dict(zip(self.agents, zip(obs_spaces, act_spaces, strict=True),
                                     strict=True))
        self.agent_groups = group_agents(self.agents, obs_spaces, act_spaces, name, groups)
        for g in self.agent_groups:  # once per distinct pair of spaces
            try:
                check_spaces(g.observation_space, g.action_space, name)
            except ValueError as e:
                raise ValueError(f"{e} (agent {self.agents[g.agents[0]]!r})") from None
        self.team: tuple[str, ...] = ()  # with_team: the team's agents ((): every agent)
        self.group_teams = False  # with_team's: each group its own team (others="train")
        if len(self.agent_groups) == 1:
            self.observation_space, self.action_space = obs_spaces[0], act_spaces[0]
        else:
            self.observation_space = padded_observation_space(self.agent_groups)
            self.action_space = padded_action_space(self.agent_groups)
        names = getattr(env, "skill_names", None)
        self.skill_names = tuple(names) if names else tuple(
            f"skill_{i}" for i in range(num_skills or 1))
        self.num_agents = len(self.agents)
        self.agent_index = {a: i for i, a in enumerate(self.agents)}
        self.has_state = _has_state(env)
        obs_size = sum(int(np.prod(s.shape)) for s in _leaf_spaces(self.observation_space))
        self.global_state_size = (int(np.prod(env.state_space.shape)) if self.has_state
                                  else self.num_agents * obs_size)

    def with_team(self, name: str, group_teams: bool = False) -> HostEnvSpec:
        """This spec with group ``name``'s agents as the team (``TrainerConfig.team``):
        :func:`team_reward` averages their rewards only. ``""``: every agent.
        ``group_teams``: every group is its own team for MAPPO (``others="train"``)."""
        self.team = tuple(self.agents[i] for i in team_agents(self.agent_groups, name))
        self.group_teams = bool(group_teams)
        return self

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
    _check_skill_rewards(name, out[4], spec)
    return out


def _check_skill_rewards(name: str, infos: Mapping, spec: HostEnvSpec) -> None:
    """``infos[agent]["skill_rewards"]``, where sent, holds one number per option: a
    length other than ``spec.num_skills`` would pay an option another option's reward."""
    for a, info in infos.items():
        channels = info.get("skill_rewards") if isinstance(info, Mapping) else None
        if channels is None:
            continue
        size = np.asarray(channels).size
        if size != spec.num_skills:
            raise EnvOutputError(
                f"{name}.step() infos[{a!r}]['skill_rewards'] has {size} value(s), but the "
                f"selector has {spec.num_skills} option(s) {list(spec.skill_names)}: send "
                "one reward per option (an env names its options in skill_names; without "
                "them it gets one option, or --set num_skills=N)")


def _check_live_obs(env: Any, obs: Mapping, spec: HostEnvSpec, where: str) -> None:
    """Every agent in ``env.agents`` has an observation, each of the declared shape."""
    for a in getattr(env, "agents", []):
        if a not in obs:
            raise EnvOutputError(f"{where}: agent {a!r} is in env.agents but got no "
                                 "observation")
    for a, x in obs.items():
        _check_obs(spec.agent_spaces[a][0], x, f"{where} observation of {a!r}")


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
    out = {}
    for a in agents:
        space = spec.agent_spaces[a][1]
        out[a] = 0 if isinstance(space, gym.spaces.Discrete) else np.clip(
            np.zeros(space.shape), space.low, space.high).astype(space.dtype)
    return out


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
    if len(spec.agent_groups) > 1:  # flat vectors, zero-padded to the largest
        size = zero.shape[0]
        row = lambda x: np.pad(np.asarray(x, np.float32).reshape(-1),
                               (0, size - int(np.size(x))))
        obs = {a: row(x) for a, x in obs.items()}
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
    out = {}
    for a in live:  # a grouped agent reads its own length of the stacked action
        space = spec.agent_spaces[a][1]
        out[a] = np.asarray(actions[spec.agent_index[a]][: space.shape[0]]
                            if len(spec.agent_groups) > 1 else
                            actions[spec.agent_index[a]], space.dtype)
    return out


def team_reward(infos: Mapping, rewards: Mapping, team: Sequence[str] = ()) -> float:
    """``infos[agent]["team_reward"]`` of the first agent that reports one, else the mean
    agent reward (the default for a custom env, README "Your own PettingZoo env"): of the
    ``team``'s agents when given (``TrainerConfig.team``), of every agent otherwise."""
    for a in rewards:
        info = infos.get(a) or {}
        if "team_reward" in info:
            return float(info["team_reward"])
    if team:
        rewards = {a: r for a, r in rewards.items() if a in team}
    return float(np.mean(list(rewards.values()))) if rewards else 0.0


# ---------------------------------------------------------------------------------------
# what an env does that training survives, reported once
# ---------------------------------------------------------------------------------------
_F32_MAX = float(np.finfo(np.float32).max)


def _bad(x: Any) -> str | None:
    """``"nan"`` / ``"inf"`` / ``"-inf"``: the first non-finite value of ``x`` as the
    actor reads it (float32: a float64 beyond its range is ``inf``), or None."""
    if isinstance(x, float | int) and not isinstance(x, bool):  # most rewards: cheap
        if math.isfinite(x) and abs(x) <= _F32_MAX:
            return None
    try:
        with np.errstate(over="ignore"):  # a float64 beyond float32's range: inf, named
            arr = np.asarray(x, np.float32).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        return None
    if np.isfinite(arr).all():
        return None
    return str(arr[~np.isfinite(arr)][0])


def first_nonfinite(obs: Mapping | None = None, rewards: Mapping | None = None,
                    infos: Mapping | None = None) -> str | None:
    """The first non-finite value among per-agent observations, rewards and the
    ``skill_rewards`` / ``team_reward`` of ``infos``, as a phrase naming the value, the
    field and the agent (``"nan as the reward of agent 'a1'"``), or None when all are
    finite."""
    for a, x in (obs or {}).items():
        leaves = sorted(x.items()) if isinstance(x, Mapping) else [(None, x)]
        for key, leaf in leaves:
            value = _bad(leaf)
            if value is not None:
                entry = "" if key is None else f" (entry {key!r})"
                return f"{value} in the observation of agent {a!r}{entry}"
    for a, r in (rewards or {}).items():
        value = _bad(r)
        if value is not None:
            return f"{value} as the reward of agent {a!r}"
    for a, info in (infos or {}).items():
        for key in ("skill_rewards", "team_reward"):
            if isinstance(info, Mapping) and key in info:
                value = _bad(info[key])
                if value is not None:
                    return f"{value} in infos[{a!r}][{key!r}]"
    return None


def env_name(env: Any) -> str:
    """The class name of ``env`` under its wrappers (what a warning calls it)."""
    return type(getattr(env, "unwrapped", env)).__name__


class EnvNotices:
    """Warnings about a host env (logger ``"feudal_es"``), each kind logged once per
    instance: a run shares one between its collector and evaluator; a Ray worker's
    evaluator has its own, whose messages the driver logs through the run's."""

    def __init__(self, env: str = ""):
        self.env = env  # how the messages name the env (its id; default: its class)
        self.seen: dict[str, str] = {}  # kind -> the message logged
        self.source: str | None = None  # the first non-finite value found, in brief

    def _name(self, cls: str) -> str:
        return f"{self.env!r} ({cls})" if self.env and self.env != cls else cls

    def warn(self, kind: str, message: str) -> None:
        """Log ``message`` unless a message of ``kind`` was logged before."""
        if kind not in self.seen:
            self.seen[kind] = message
            log.warning("%s", message)

    def absorb(self, seen: dict[str, str], source: str | None = None) -> None:
        """Log another instance's messages (a Ray worker's) as this one's, once each."""
        if source is not None and self.source is None:
            self.source = source
        for kind, message in seen.items():
            self.warn(kind, message)

    def time_limit(self, name: str, limit: int, phase: str) -> None:
        """An episode of ``phase`` reached ``limit`` steps without ending: cut there."""
        self.warn("time_limit", (
            f"env {self._name(name)} ran {phase} episode to max_episode_steps={limit} "
            "steps without terminating or truncating it; feudal-es cuts every episode "
            "there (treated as a truncation). If the env has no time limit of its own, give "
            "it one, or set TrainerConfig.max_episode_steps (--set max_episode_steps=N)"))

    def nonfinite(self, name: str, found: str, step: int, seed: int, phase: str) -> None:
        """The env returned a non-finite value (:func:`first_nonfinite`'s ``found``)."""
        when = "reset" if step == 0 else f"step {step}"
        if self.source is None:
            self.source = (f"env {self._name(name)} returned {found} at {when} of an "
                           f"episode reset with seed {seed} ({phase})")
        self.warn("nonfinite", (
            f"{self.source}. Training goes on (a MAPPO update that turns non-finite is "
            "skipped, an ES member with a non-finite fitness ranks last), but the env's "
            "reset()/step() needs a look; reported once"))

    def check(self, name: str, step: int, seed: int, phase: str, obs: Mapping | None,
              rewards: Mapping | None = None, infos: Mapping | None = None) -> None:
        """:meth:`nonfinite` for the first non-finite value of one reset/step's output
        (nothing is looked at once it has been reported)."""
        if self.source is not None:
            return
        found = first_nonfinite(obs, rewards, infos)
        if found is not None:
            self.nonfinite(name, found, step, seed, phase)
