"""``ESTrainer``: the MERL loop end to end — MAPPO on the executor, ES on the selector.

One trainer owns one run: the env (a bundled functional env on the pure-JAX path, or any
PettingZoo ``ParallelEnv`` on the host path), one :class:`agents.FeudalActor` whose
selector leaves ES evolves and whose executor leaves MAPPO trains, a centralized critic,
and the run directory (config, metrics, plot, checkpoints, best selector, GIF).

Team fitness of a selector ``theta`` = the mean team return (sum of ``team_reward``) over
``episodes`` full episodes with the *current* executor, deterministic executor actions by
default. On the JAX path the whole population is evaluated in one jitted call (``vmap``
over members x episodes, ``lax.scan`` over the episode) and every member of a generation
sees the same env reset keys (common random numbers). On the host path a Python loop
reuses ``episodes`` env instances, seeded identically for every member.

Keys: ``jax.random.key(seed)`` splits into the network/env init key, the ES key chain
that :func:`feudal_es.es.merl_coexist` consumes (round ``r`` uses the chain advanced ``r``
times, recomputed from the seed on resume) and a fixed evaluation key. So a resumed run
repeats exactly what the uninterrupted run would have done (JAX path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import difflib
import functools
import importlib
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from agents import (
    ActorConfig,
    CentralCritic,
    CriticConfig,
    FeudalActor,
    selector_theta,
    set_selector_theta,
)
from envs.base import SwarmEnv
from feudal_es import checkpoint, es, mappo

__all__ = [
    "MODES",
    "ESTrainer",
    "ResolvedEnv",
    "TrainerConfig",
    "TrainingInterrupted",
    "UntrustedEnvError",
    "chain_key",
    "resolve_env",
]

MODES = ("merl", "es", "mappo")
log = logging.getLogger("feudal_es.trainer")
BACKENDS = ("serial", "ray")
_NESTED = {"es": es.ESConfig, "mappo": mappo.MAPPOConfig, "actor": ActorConfig,
           "critic": CriticConfig}


# ---------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Everything a run needs, JSON-serialisable (frozen, validated; errors name the field).

    Nested configs are plain dicts of the fields of :class:`feudal_es.es.ESConfig`,
    :class:`feudal_es.mappo.MAPPOConfig`, :class:`agents.ActorConfig` and
    :class:`agents.CriticConfig`; missing fields take those classes' defaults.
    """

    env: str = "feudal_es/Coverage-v0"  # registry id or "module:attr"
    env_kwargs: dict = dataclasses.field(default_factory=dict)  # passed to the env
    mode: str = "merl"  # merl (ES + MAPPO) | es (executor frozen) | mappo (selector frozen)
    n_outer: int = 20  # merl_coexist outer rounds
    grad_steps_per_outer: int = 1  # MAPPO train steps per round
    episodes: int = 4  # episodes per team-fitness evaluation
    deterministic_eval: bool = True  # executor mode (not a sample) during fitness episodes
    seed: int = 0
    es: dict = dataclasses.field(default_factory=dict)
    mappo: dict = dataclasses.field(default_factory=dict)
    actor: dict = dataclasses.field(default_factory=dict)
    critic: dict = dataclasses.field(default_factory=dict)
    num_skills: int = 2  # host envs without ``skill_names``: selector choices per agent
    checkpoint_every: int = 5  # rounds between checkpoints (the last round always saves)
    keep_checkpoints: int = 3  # newest checkpoints kept
    plot_every: int = 1  # rounds between learning-curve refreshes (the last always)
    gif: bool = True  # write a final deterministic episode GIF (if the env renders)
    max_episode_steps: int = 10_000  # host envs: cap on an evaluation episode's length
    # host envs: seconds an evaluation episode (and one MAPPO-collection env call) may
    # take; over it the member fails / collection stops with EnvTimeout. 0 = no limit
    episode_timeout: float = 0.0
    # JAX envs: devices the ES population is sharded over (feudal_es.sharding); 0 = all
    # of jax.devices() (no sharding when there is one), 1 = never shard, n = the first n
    population_devices: int = 0
    # JAX envs: ES members evaluated together per chunk (per device when sharded): the
    # population rollout is a lax.map(batch_size=...) over vmapped chunks, a remainder
    # chunk included. 0 = automatic: CPU_POPULATION_CHUNK (8) on a CPU backend, where the
    # full-width batch's activations overflow the caches, the whole population otherwise
    # (a GPU wants the full width); n >= the population = one full-width vmap
    population_chunk: int = 0
    backend: str = "serial"  # host envs: "serial" (in-process loop) | "ray" (Ray actors)
    ray_workers: int = 0  # backend "ray": actors evaluating members; 0 = Ray's CPU count

    def __post_init__(self) -> None:
        c = type(self).__name__
        if not isinstance(self.env, str) or not self.env:
            raise TypeError(f"{c}.env must be a non-empty string, got {self.env!r}")
        for name in ("env_kwargs", *_NESTED):
            if not isinstance(getattr(self, name), Mapping):
                raise TypeError(f"{c}.{name} must be a dict, got "
                                f"{type(getattr(self, name)).__name__}")
        if self.mode not in MODES:
            raise ValueError(f"{c}.mode must be one of {MODES}, got {self.mode!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"{c}.backend must be one of {BACKENDS}, got {self.backend!r}")
        for name, low in (("n_outer", 1), ("grad_steps_per_outer", 1), ("episodes", 1),
                          ("seed", 0), ("num_skills", 1), ("checkpoint_every", 1),
                          ("keep_checkpoints", 1), ("plot_every", 1),
                          ("max_episode_steps", 1), ("population_devices", 0),
                          ("population_chunk", 0), ("ray_workers", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{c}.{name} must be an int, got {type(v).__name__} {v!r}")
            if v < low:
                raise ValueError(f"{c}.{name} must be >= {low}, got {v}")
        t = self.episode_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)):
            raise TypeError(f"{c}.episode_timeout must be a number of seconds, got "
                            f"{type(t).__name__} {t!r}")
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"{c}.episode_timeout must be finite and >= 0 (0 = no limit), "
                             f"got {t}")
        for name in ("deterministic_eval", "gif"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{c}.{name} must be a bool, got {getattr(self, name)!r}")
        for name in _NESTED:  # validate, then store the fully resolved (canonical) dict
            resolved = json.loads(json.dumps(dataclasses.asdict(self._nested(name))))
            object.__setattr__(self, name, resolved)
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        try:
            json.dumps(self.env_kwargs)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{c}.env_kwargs must be JSON-serialisable: {e}") from None

    # --- nested configs ------------------------------------------------------------
    def _nested(self, name: str) -> Any:
        cls = _NESTED[name]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for k, v in getattr(self, name).items():
            if k not in fields:
                close = difflib.get_close_matches(str(k), list(fields), n=3)
                hint = f"; did you mean {close}?" if close else f"; fields: {sorted(fields)}"
                raise ValueError(f"TrainerConfig.{name} has no field {k!r}{hint}")
            if isinstance(v, list):  # JSON has no tuples
                v = tuple(v)
            kwargs[k] = v
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as e:
            raise type(e)(f"TrainerConfig.{name}: {e}") from None

    @property
    def es_config(self) -> es.ESConfig:
        return self._nested("es")

    @property
    def mappo_config(self) -> mappo.MAPPOConfig:
        return self._nested("mappo")

    @property
    def actor_config(self) -> ActorConfig:
        return self._nested("actor")

    @property
    def critic_config(self) -> CriticConfig:
        return self._nested("critic")

    # --- (de)serialisation ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (nested configs fully resolved, tuples as lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainerConfig:
        """Build from a dict (e.g. ``config.json``); unknown keys are refused by name."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a TrainerConfig must be a JSON object, got {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        for k in data:
            if k not in names:
                close = difflib.get_close_matches(str(k), names, n=3)
                raise ValueError(f"TrainerConfig has no field {k!r}"
                                 + (f"; did you mean {close}?" if close else ""))
        return cls(**data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> TrainerConfig:
        """Read a JSON config file."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ValueError(f"config file {path} does not exist") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"config file {path} is not valid JSON: {e}") from None
        return cls.from_dict(data)

    def override(self, assignments: Mapping[str, Any]) -> TrainerConfig:
        """A copy with dotted-path assignments applied, e.g. ``{"es.sigma": 0.1,
        "env_kwargs.num_agents": 4, "n_outer": 3}``."""
        data = dataclasses.asdict(self)
        names = [f.name for f in dataclasses.fields(self)]
        for path, value in assignments.items():
            head, _, rest = path.partition(".")
            if head not in names:
                close = difflib.get_close_matches(head, names, n=3)
                raise ValueError(f"unknown setting {path!r}"
                                 + (f"; did you mean {close}?" if close else ""))
            if rest:
                if not isinstance(data[head], dict):
                    raise ValueError(f"setting {path!r}: {head} is not a nested config")
                data[head] = {**data[head], rest: value}
            else:
                data[head] = value
        return type(self).from_dict(data)


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by SIGINT/SIGTERM. ``graceful``: the round in progress was
    finished and checkpointed; else every completed round was. ``round``: rounds done."""

    def __init__(self, signum: int, round_: int, graceful: bool):
        super().__init__(f"stopped by {signal.Signals(signum).name} after {round_} rounds")
        self.signum, self.round, self.graceful = signum, round_, graceful


def parse_assignment(text: str) -> tuple[str, Any]:
    """``"es.sigma=0.1"`` -> ``("es.sigma", 0.1)``; the value is JSON if it parses as
    JSON (numbers, true/false, lists, objects), else the plain string."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--set expects KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


# ---------------------------------------------------------------------------------------
# env resolution
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class ResolvedEnv:
    """An env id resolved to the path it trains on.

    ``kind == "jax"``: ``core`` is the functional :class:`envs.base.SwarmEnv`.
    ``kind == "host"``: ``make(**extra)`` builds one PettingZoo ``ParallelEnv`` instance.
    """

    env_id: str
    kind: str
    core: SwarmEnv | None = None
    make: Callable[..., Any] | None = None


def _registered_ids() -> list[str]:
    import pettingzoo

    return sorted(set(pettingzoo.parallel_registry) | set(pettingzoo.aec_registry))


def _to_parallel(env: Any) -> Any:
    """A ParallelEnv (AEC envs converted); unwrap nothing else."""
    from pettingzoo import AECEnv, ParallelEnv
    from pettingzoo.utils.conversions import aec_to_parallel

    if isinstance(env, ParallelEnv):
        return env
    if isinstance(env, AECEnv):
        return aec_to_parallel(env)
    raise TypeError(f"expected a PettingZoo ParallelEnv or AECEnv, got {type(env).__name__}")


def _classify(env_id: str, obj: Any) -> ResolvedEnv | None:
    from envs.pettingzoo_env import SwarmParallelEnv

    if isinstance(obj, SwarmEnv):
        return ResolvedEnv(env_id, "jax", core=obj)
    if isinstance(obj, SwarmParallelEnv):
        return ResolvedEnv(env_id, "jax", core=obj.env)
    return None


class UntrustedEnvError(ValueError):
    """An env id read from a file (a run directory, a checkpoint) names code to import and
    call (``"module:attr"``). Files are data: the user must name such an env themselves."""

    def __init__(self, env_id: str, source: str):
        super().__init__(
            f"{source} names the env {env_id!r}, a 'module:attr' that would be imported and "
            "called to build it; a run directory or checkpoint is data, so feudal-es does "
            "not import or call what it names. If you trust it, name the env yourself: add "
            f"`--env {env_id}` to the command (Python: pass env={env_id!r})")
        self.env_id, self.source = env_id, source


def is_code_reference(env_id: str) -> bool:
    """True for ``"module:attr"`` ids (resolving them imports and calls code); registry
    ids such as ``feudal_es/Coverage-v0`` are not."""
    return ":" in env_id and "/" not in env_id.partition(":")[0]


def resolve_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
                source: str | None = None) -> ResolvedEnv:
    """Resolve a PettingZoo registry id (bundled or user-registered) or ``"module:attr"``.

    A feudal-es functional env (a registered bundled id, a ``SwarmEnv`` class/instance,
    or a factory returning a ``SwarmParallelEnv``) goes to the pure-JAX path; any other
    PettingZoo env to the host path. Unknown ids raise ``ValueError`` with close matches.

    ``source`` names the file the id was read from (``None``: the user's own code or
    command line). An id from a file resolves only through what this process already
    registered; a ``"module:attr"`` id from a file raises :class:`UntrustedEnvError`
    before anything is imported.
    """
    import pettingzoo

    import envs  # noqa: F401  (registers the bundled ids)

    kwargs = dict(env_kwargs or {})
    if is_code_reference(env_id):
        if source is not None:
            raise UntrustedEnvError(env_id, source)
        module_name, _, attr = env_id.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"env {env_id!r}: cannot import module {module_name!r} ({e})"
                             ) from None
        if not hasattr(module, attr):
            raise ValueError(f"env {env_id!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(module, attr)
        if isinstance(target, type) and issubclass(target, SwarmEnv):
            return ResolvedEnv(env_id, "jax", core=target(**kwargs))
        found = _classify(env_id, target)
        if found is not None:
            if kwargs:
                raise ValueError(f"env {env_id!r} is an instance; env_kwargs {kwargs} "
                                 "cannot be applied")
            return found
        if not callable(target):
            raise ValueError(f"env {env_id!r}: {attr} is neither an env nor an env factory")
        probe = target(**kwargs)
        found = _classify(env_id, probe)
        if found is not None:
            return found
        _to_parallel(probe)
        return ResolvedEnv(env_id, "host",
                           make=lambda **extra: _to_parallel(target(**kwargs, **extra)))
    for env_type in ("parallel", "aec"):
        registry = pettingzoo.parallel_registry if env_type == "parallel" else (
            pettingzoo.aec_registry)
        if env_id not in registry:
            continue
        probe = pettingzoo.make(env_type, env_id, **kwargs)
        found = _classify(env_id, probe)
        if found is not None:
            return found
        if env_type == "parallel":
            make = lambda **extra: pettingzoo.make("parallel", env_id, **kwargs, **extra)
        else:
            make = lambda **extra: _to_parallel(pettingzoo.make("aec", env_id, **kwargs,
                                                                **extra))
        return ResolvedEnv(env_id, "host", make=make)
    close = difflib.get_close_matches(env_id, _registered_ids(), n=3, cutoff=0.5)
    hint = f"; did you mean {close}?" if close else ""
    raise ValueError(
        f"unknown env {env_id!r}{hint} (see `feudal-es envs`; a module that registers "
        "envs can be loaded with --import MODULE, or name a factory as 'module:attr')"
    )


# ---------------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------------
def root_keys(seed: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(init_key, es_chain_key, eval_key)`` from the seed (fixed derivation)."""
    k_init, k_es, k_eval = jax.random.split(jax.random.key(seed), 3)
    return k_init, k_es, k_eval


def chain_key(key: jax.Array, rounds: int) -> jax.Array:
    """The key :func:`feudal_es.es.merl_coexist` holds after ``rounds`` rounds
    (``key, _ = split(key)`` per round), recomputed from the start key."""
    for _ in range(int(rounds)):
        key = jax.random.split(key)[0]
    return key


# ---------------------------------------------------------------------------------------
# JAX-path rollouts
# ---------------------------------------------------------------------------------------
def _episode(env: SwarmEnv, actor: FeudalActor, key: jax.Array, period: int,
             deterministic: bool, keep_states: bool = False):
    """One full episode from ``env.reset(key)``: ``(team_return, final metrics[, states])``."""
    k_reset, k_run = jax.random.split(key)
    obs, state = env.reset(k_reset)
    held = actor.initial_skill(env.num_agents)

    def body(carry, k):
        obs, state, held, t, ret = carry
        k_act, k_env = jax.random.split(k)
        adj = env.comm_graph(state)
        held, out = actor.step(k_act, obs, adj, held, t, period, deterministic)
        obs, state, eo = env.step(k_env, state, out.env_action)
        ys = (eo.metrics, state) if keep_states else (eo.metrics, None)
        return (obs, state, held, t + 1, ret + eo.team_reward), ys

    init = (obs, state, held, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32))
    (_, _, _, _, ret), (metrics, states) = jax.lax.scan(
        body, init, jax.random.split(k_run, env.max_steps))
    final = jax.tree.map(lambda m: m[-1], metrics)
    if keep_states:
        states = jax.tree.map(lambda s0, s: jnp.concatenate([s0[None], s]), state, states)
        return ret, final, states
    return ret, final


_LOSS_KEYS = ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm")


class _Learned(NamedTuple):
    """What a MAPPO update learns (the part of a TrainState a skipped update keeps)."""

    actor: Any
    critic: Any
    actor_opt_state: Any
    critic_opt_state: Any
    value_norm: Any


def _learned(ts: mappo.TrainState) -> _Learned:
    return _Learned(ts.actor, ts.critic, ts.actor_opt_state, ts.critic_opt_state,
                    ts.value_norm)


@eqx.filter_jit
def _all_finite(tree: Any) -> jax.Array:
    """True iff every floating-point leaf of ``tree`` is finite (one jitted reduction)."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(eqx.filter(
        tree, eqx.is_inexact_array))]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def make_population_rollouts(env: SwarmEnv, period: int, deterministic: bool,
                             chunk: int = 0) -> Callable:
    """``rollouts(actor, thetas[P, D], keys[E]) -> (team_return[P, E], metrics[P, E])``.

    Every member ``p`` runs episode ``e`` from ``keys[e]`` (common random numbers) with
    ``set_selector_theta(actor, thetas[p])``. Pure; ``vmap`` x ``vmap`` x ``lax.scan``.
    ``0 < chunk < P`` evaluates the members ``chunk`` at a time instead,
    ``lax.map(batch_size=chunk)`` (a ``lax.scan`` over ``P // chunk`` vmapped chunks, then
    one vmap over the ``P % chunk`` remainder): same program per member, activations
    bounded by ``chunk`` (see ``TrainerConfig.population_chunk``).
    """

    def rollouts(actor: FeudalActor, thetas: jax.Array, keys: jax.Array):
        def member(theta):
            a = set_selector_theta(actor, theta)
            return jax.vmap(lambda k: _episode(env, a, k, period, deterministic))(keys)

        if 0 < chunk < thetas.shape[0]:
            return jax.lax.map(member, thetas, batch_size=chunk)
        return jax.vmap(member)(thetas)

    return rollouts


@dataclasses.dataclass
class _JaxFns:
    """The jitted functions of one JAX-path setup (built once, shared by trainers)."""

    init_state: Callable  # jitted mappo.init_train_state (one compile, not ~150 eager ops)
    train_step: Callable
    rollouts: Callable
    generation: Callable
    gif_episode: Callable | None = None
    # fitness(thetas[P, D], actor, keys[E]) -> [P]: the population's team fitness exactly
    # as generation evaluates it (chunked, sharded), jitted on its own (bench/perf.py)
    fitness: Callable | None = None


_JAX_FNS: dict[str, _JaxFns] = {}


def _population_devices(config: TrainerConfig) -> list:
    """The devices the ES population is sharded over (one device: no sharding)."""
    devices = jax.devices()
    n = config.population_devices or len(devices)
    if n > len(devices):
        raise ValueError(f"TrainerConfig.population_devices={n} but JAX sees only "
                         f"{len(devices)} device(s): {devices}")
    return devices[:n]


CPU_POPULATION_CHUNK = 8  # population_chunk=0 on a CPU backend (bench/perf.py measures it)


def population_chunk(config: TrainerConfig) -> int:
    """Members evaluated together per chunk on the JAX path (0 = the whole population):
    ``config.population_chunk``, or for 0 :data:`CPU_POPULATION_CHUNK` when
    ``jax.default_backend()`` is ``"cpu"`` and full width on an accelerator."""
    if config.population_chunk:
        return config.population_chunk
    return CPU_POPULATION_CHUNK if jax.default_backend() == "cpu" else 0


def _jax_fns(config: TrainerConfig, core: SwarmEnv) -> _JaxFns:
    """The jitted train step, population rollouts and ES generation for ``config``.

    Cached per process by everything that shapes them (env id and kwargs, MAPPO/ES
    configs, episodes, determinism, devices, population chunk), so a resumed trainer or
    the CLI's eval reuses the compiled code instead of compiling it again; the networks
    are jit *arguments*.
    """
    c = config.to_dict()
    devices = _population_devices(config)
    key = json.dumps({**{k: c[k] for k in ("env", "env_kwargs", "mappo", "es", "episodes",
                                           "deterministic_eval")},
                      "devices": [d.id for d in devices],
                      "chunk": population_chunk(config)}, sort_keys=True)
    if key in _JAX_FNS:
        return _JAX_FNS[key]
    mcfg, es_cfg, eps = config.mappo_config, config.es_config, config.episodes
    rollouts = make_population_rollouts(core, mcfg.selector_period, config.deterministic_eval,
                                        population_chunk(config))

    def team_fitness(thetas, actor, keys):
        return rollouts(actor, thetas, keys)[0].mean(axis=1)

    if len(devices) > 1:  # the population axis split over a device mesh
        from feudal_es import sharding

        mesh = sharding.population_mesh(devices)
        team_fitness = sharding.shard_population(team_fitness, mesh)

    @eqx.filter_jit
    def generation(key, state, actor):
        def fitness(thetas, k):
            return team_fitness(thetas, actor, jax.random.split(k, eps))

        return es.generation(key, state, fitness, es_cfg)

    if len(devices) > 1:
        jitted = generation

        def generation(key, state, actor):  # inputs replicated on the mesh, outputs local
            return sharding.to_local(jitted(*sharding.replicate((key, state, actor), mesh)))

    fns = _JaxFns(eqx.filter_jit(mappo.init_train_state), mappo.make_train_step(core, mcfg),
                  eqx.filter_jit(rollouts), generation, fitness=eqx.filter_jit(team_fitness))
    _JAX_FNS[key] = fns
    return fns


# ---------------------------------------------------------------------------------------
# host-path rollouts
# ---------------------------------------------------------------------------------------
@functools.cache
def _host_policy(period: int, deterministic: bool) -> Callable:
    """The jitted one-step policy of host-path evaluation, shared by all evaluators (so a
    second trainer on the same shapes does not compile it again)."""

    @eqx.filter_jit
    def policy(actor, key, obs, adj, held, t):
        return actor.step(key, obs, adj, held, t, period, deterministic)

    return policy


def _host_update(cfg: mappo.MAPPOConfig) -> Callable:
    """The MAPPO update of the host path: :func:`feudal_es.mappo.update` as the JAX path
    runs it (its jitted pieces are shared by every trainer; an outer ``jit`` would unroll
    the epoch/minibatch loops into one program that compiles for tens of seconds)."""
    return lambda ts, batch: mappo.update(ts, batch, cfg)


class _HostEvaluator:
    """Team fitness on any PettingZoo ParallelEnv: a loop reusing ``episodes`` instances.

    Fault isolation: an exception in a member's episode (the env raising, a malformed
    ``reset``/``step`` output, the episode running past ``timeout`` seconds) fails that
    member only: its returns are NaN (ES ranks it last), the failure is recorded in
    ``failures`` and the env instance is replaced by a fresh one.
    """

    def __init__(self, make: Callable[..., Any], spec: Any, episodes: int, period: int,
                 deterministic: bool, max_steps: int, timeout: float = 0.0):
        self.make = make
        self.envs = [make() for _ in range(episodes)]
        self.spec = spec
        self.max_steps = max_steps
        self.timeout = float(timeout)
        self.failures: list[dict[str, Any]] = []  # of the last returns() call
        self._policy = _host_policy(int(period), bool(deterministic))

    def episode(self, actor: FeudalActor, env: Any, seed: int, key: jax.Array) -> float:
        from feudal_es.host import (
            EnvTimeout,
            _team_reward,
            _zeros_like_space,
            check_reset,
            check_step,
            deadline,
        )

        spec = self.spec
        budget, used = self.timeout, 0.0
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
        zero = _zeros_like_space(spec.observation_space)
        held = actor.initial_skill(spec.num_agents)
        graph = getattr(env, "comm_graph", None)
        total, t = 0.0, 0
        while env.agents and t < self.max_steps:
            rows = [obs.get(a, zero) for a in spec.agents]
            alive = np.array([a in obs for a in spec.agents], np.float32)
            stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x, np.float32)
                                                         for x in xs]), *rows)
            adj = (np.asarray(call(graph), np.float32) if callable(graph)
                   else 1.0 - np.eye(spec.num_agents, dtype=np.float32))
            adj = adj * alive[:, None] * alive[None, :]
            key, sub = jax.random.split(key)
            held, out = self._policy(actor, sub, stacked, adj, held, np.asarray(t, np.int32))
            act = np.asarray(out.env_action)
            discrete = not hasattr(spec.action_space, "low")
            acts = {a: (int(act[i]) if discrete else act[i].astype(spec.action_space.dtype))
                    for i, a in enumerate(spec.agents) if a in obs}
            live = list(env.agents)
            obs, rew, _, _, infos = check_step(env, acts, call(env.step, acts), spec, live)
            mean_reward = float(np.mean(list(rew.values()))) if rew else 0.0
            total += _team_reward(infos, rew, mean_reward)
            t += 1
        return total

    def returns(self, actor: FeudalActor, thetas: np.ndarray, seed: int,
                key: jax.Array, episodes: int | None = None) -> np.ndarray:
        """``[P, E]`` team returns; episode ``e`` is reset with ``seed + e`` for every
        member (common random numbers). A failed member's row is NaN."""
        from feudal_es.host import deadline

        count = len(self.envs) if episodes is None else int(episodes)
        while len(self.envs) < count:
            self.envs.append(self.make())
        out = np.zeros((len(thetas), count), np.float64)
        self.failures = []
        for p, theta in enumerate(thetas):
            a = set_selector_theta(actor, jnp.asarray(theta))
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


# ---------------------------------------------------------------------------------------
# run directory helpers
# ---------------------------------------------------------------------------------------
def _clean(x: Any) -> Any:
    """JSON-safe: numpy -> Python, NaN/inf -> None."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.generic, jax.Array)):
        x = np.asarray(x).item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def default_run_dir(env_id: str, mode: str, root: str | os.PathLike = "runs") -> Path:
    """``runs/<env>-<mode>-<UTC timestamp>`` (env id made path-safe)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", env_id.split("/")[-1].split(":")[-1]) or "env"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{name}-{mode}-{stamp}"
    i = 1
    while path.exists():
        path = Path(root) / f"{name}-{mode}-{stamp}-{i}"
        i += 1
    return path


def plot_history(history: list[dict], path: Path, title: str) -> Path | None:
    """Learning curve PNG (matplotlib, Agg). Returns None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rounds = [h["round"] + 1 for h in history]

    def series(name):
        return [np.nan if h.get(name) is None else h[name] for h in history]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.plot(rounds, series("selector_fitness"), "o-", label="selector (mean θ)", ms=3)
    if any(h.get("fitness_best") is not None for h in history):
        ax1.plot(rounds, series("fitness_best"), "--", label="population best", lw=1)
        ax1.plot(rounds, series("fitness_mean"), ":", label="population mean", lw=1)
    ax1.set_xlabel("outer round")
    ax1.set_ylabel("team fitness")
    ax1.set_title("ES: team fitness")
    ax1.legend(fontsize=8)
    for name, label in (("mappo/team_return", "team return (training)"),
                        ("mappo/episode_return", "mean agent return (training)"),
                        ("mappo/skill_reward", "skill reward / step")):
        vals = series(name)
        if any(np.isfinite(vals)):
            ax2.plot(rounds, vals, ".-", label=label)
    ax2.set_xlabel("outer round")
    ax2.set_title("MAPPO rollouts")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------------------
# the trainer
# ---------------------------------------------------------------------------------------
class ESTrainer:
    """Builds everything a run needs from a :class:`TrainerConfig` and runs it.

    Attributes: ``config``, ``env`` (:class:`ResolvedEnv`), ``ts`` (the MAPPO
    :class:`~feudal_es.mappo.TrainState`, whose actor holds the current selector),
    ``es_state``, ``round`` (rounds completed), ``history`` (one dict per round, the rows
    of ``metrics.jsonl``), ``run_dir`` (set on the first :meth:`run`).
    """

    def __init__(self, config: TrainerConfig, run_dir: str | os.PathLike | None = None,
                 resolved: ResolvedEnv | None = None):
        if not isinstance(config, TrainerConfig):
            raise TypeError(f"config must be a TrainerConfig, got {type(config).__name__}")
        self.config = config
        self.es_cfg = config.es_config
        self.mappo_cfg = config.mappo_config
        self.env = resolved or resolve_env(config.env, config.env_kwargs)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        k_init, self._es_key, self._eval_key = root_keys(config.seed)
        k_actor, k_critic, k_state = jax.random.split(k_init, 3)
        acfg, ccfg = config.actor_config, config.critic_config
        period = self.mappo_cfg.selector_period
        if self.env.kind == "jax":
            core = self.env.core
            actor = FeudalActor.from_env(k_actor, core, acfg)
            critic = CentralCritic.from_env(k_critic, core, ccfg)
            fns = _jax_fns(config, core)
            self.ts = fns.init_state(k_state, core, actor, critic, self.mappo_cfg)
            self._train_step, self._rollouts, self._generation = fns.train_step, \
                fns.rollouts, fns.generation
            self._fns = fns
            self.num_agents = core.num_agents
            self.skill_names = tuple(core.skill_names)
        else:
            from feudal_es.host import HostCollector, HostEnvSpec, probe_env

            probe = self.env.make()
            spec = HostEnvSpec(probe, num_skills=config.num_skills)
            probe_env(probe, spec, seed=config.seed)  # a broken env fails here, before compute
            actor = FeudalActor(k_actor, spec.observation_space, spec.action_space,
                                spec.num_skills, acfg)
            critic = CentralCritic(k_critic, spec.global_state_size, spec.num_agents,
                                   spec.num_skills, ccfg)
            self.ts = mappo.init_learner(k_state, actor, critic, self.mappo_cfg)
            envs_ = [probe] + [self.env.make() for _ in range(self.mappo_cfg.num_envs - 1)]
            self._collector = HostCollector(envs_, spec, self.mappo_cfg, seed=config.seed,
                                            step_timeout=config.episode_timeout)
            self._update = _host_update(self.mappo_cfg)
            self._host_eval = _HostEvaluator(self.env.make, spec, config.episodes, period,
                                             config.deterministic_eval,
                                             config.max_episode_steps, config.episode_timeout)
            self._population_eval = self._host_eval  # evaluates populations (P > 1)
            if config.backend == "ray":
                import functools

                from feudal_es.ray_backend import RayEvaluator

                self._population_eval = RayEvaluator(
                    functools.partial(_HostEvaluator, self.env.make, spec, config.episodes,
                                      period, config.deterministic_eval,
                                      config.max_episode_steps, config.episode_timeout),
                    episodes=config.episodes, env_id=config.env,
                    num_workers=config.ray_workers)
            self._generation = self._host_generation
            self.num_agents = spec.num_agents
            self.skill_names = spec.skill_names
        self.es_state = es.init(selector_theta(self.ts.actor), self.es_cfg)
        self.round = 0
        self.history: list[dict] = []
        self.best_fitness = -math.inf
        self._round_metrics: list[dict] = []
        self._tb = None
        self._pbar = None
        self._t_start = 0.0
        self._t_round = 0.0
        self._wall_offset = 0.0
        self._fresh = True  # built from a config, not loaded from a checkpoint
        self._stop_signal: int | None = None  # set by the SIGINT/SIGTERM handler of run()
        self._failures: list[dict] = []  # host path: this round's failed evaluations

    # --- fitness -------------------------------------------------------------------
    @property
    def selector_size(self) -> int:
        return int(selector_theta(self.ts.actor).shape[0])

    def round_eval_key(self, round_: int | None = None) -> jax.Array:
        """The key of round ``round_``'s per-member ``eval_fn`` episodes."""
        return jax.random.fold_in(self._eval_key, self.round if round_ is None else round_)

    def rollout_stats(self, thetas: jax.Array, key: jax.Array, actor: FeudalActor | None = None,
                      episodes: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Team returns ``[P, E]`` and final-step env metrics ``{name: [P, E]}`` of
        ``thetas[P, D]`` on the ``E`` episodes derived from ``key`` (same for all)."""
        actor = self.ts.actor if actor is None else actor
        thetas = jnp.atleast_2d(jnp.asarray(thetas, jnp.float32))
        e = self.config.episodes if episodes is None else int(episodes)
        if self.env.kind == "jax":
            ret, metrics = self._rollouts(actor, thetas, jax.random.split(key, e))
            return np.asarray(ret), {k: np.asarray(v) for k, v in metrics.items()}
        seed = int(jax.random.randint(key, (), 0, 2**30))
        ev = self._population_eval if len(thetas) > 1 else self._host_eval
        return ev.returns(actor, np.asarray(thetas), seed, key, episodes=e), {}

    def _host_generation(self, key: jax.Array, state: es.ESState, actor: FeudalActor
                         ) -> tuple[es.ESState, dict]:
        """Host path: one ES generation exactly as :func:`feudal_es.es.es_step` makes it
        (same ask, tell and per-member fitness as ``eval_fn`` on this round's key), with
        the executor of the current train state. Failed members rank last; if every
        member fails the run stops naming the first failure, before anything is written."""
        population, noise = es._ask_jit(key, state, self.es_cfg)
        ret, _ = self.rollout_stats(population, self.round_eval_key(), actor=actor)
        failures = [{**f, "phase": "population"} for f in self._population_eval.failures]
        self._failures += failures
        fitness = ret.mean(axis=1).astype(np.float32)
        if not np.isfinite(fitness).any():
            first = failures[0] if failures else None
            cause = (f"; first failure (member {first['member']}, episode {first['episode']}):"
                     f" {first['error']} at {first['where']}" if first else "")
            raise FloatingPointError(
                f"ES generation: all {fitness.size} candidates failed or returned non-finite "
                f"fitness{cause}; refusing to update the parameters")
        return es._tell_jit(state, noise, jnp.asarray(fitness), self.es_cfg)

    def population_fitness(self, thetas: jax.Array, key: jax.Array) -> jax.Array:
        """``[P]`` team fitness of ``thetas[P, D]`` with the current executor, all members
        on the same ``episodes`` episodes (one jitted call on the JAX path)."""
        return jnp.asarray(self.rollout_stats(thetas, key)[0].mean(axis=1), jnp.float32)

    def eval_fn(self, theta: jax.Array, key: jax.Array | None = None) -> float:
        """Reference-compatible team fitness of one selector: mean team return over
        ``episodes`` episodes (default key: this round's :meth:`round_eval_key`)."""
        key = self.round_eval_key() if key is None else key
        return float(self.rollout_stats(jnp.asarray(theta)[None], key)[0].mean())

    # --- the sync hooks (the one selector partition) ----------------------------------
    @staticmethod
    def sync_in(ts: mappo.TrainState, theta: jax.Array) -> jax.Array:
        """The gradient learner's selector, read out of ``ts.actor`` (MERL injection)."""
        del theta
        return selector_theta(ts.actor)

    @staticmethod
    def sync_out(ts: mappo.TrainState, theta: jax.Array) -> mappo.TrainState:
        """``ts`` with the evolved selector written into its actor."""
        return ts._replace(actor=set_selector_theta(ts.actor, theta))

    # --- gradient side ---------------------------------------------------------------
    def gradient_step(self, ts: mappo.TrainState) -> mappo.TrainState:
        """One MAPPO train step (identity in ``es`` mode); metrics are kept for the log."""
        if self.config.mode == "es":
            return ts
        t0 = time.perf_counter()
        before = ts
        if self.env.kind == "jax":
            ts, metrics = self._train_step(ts)
        else:
            ts, batch, stats = self._collector.collect(ts)
            ts, metrics = self._update(ts, batch)
            metrics = {**metrics, **stats, "env_steps": ts.env_steps}
        metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
        bad = [k for k in _LOSS_KEYS if k in metrics and not math.isfinite(metrics[k])]
        skipped = bool(bad) or not bool(_all_finite(_learned(ts)))
        if skipped:
            # keep the last good learner (networks, optimizer and value-norm statistics);
            # the rollout (env states, key, step counter) moves on, so the next step sees
            # new data instead of repeating the same blow-up
            ts = ts._replace(**_learned(before)._asdict(), update_step=before.update_step)
            log.warning("round %d: MAPPO update skipped: non-finite %s; the executor and "
                        "critic keep their last finite parameters", self.round,
                        ", ".join(bad) if bad else "parameters after the update")
        metrics["skipped_updates"] = float(skipped)
        metrics["sps"] = self.mappo_cfg.batch_size / (time.perf_counter() - t0)
        self._round_metrics.append(metrics)
        return ts

    # --- run ---------------------------------------------------------------------------
    def _ensure_run_dir(self) -> Path:
        if self.run_dir is None:
            self.run_dir = default_run_dir(self.config.env, self.config.mode)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        cfg_path = self.run_dir / "config.json"
        if not cfg_path.exists():
            _write_text_atomic(cfg_path, json.dumps(self.config.to_dict(), indent=2) + "\n")
        return self.run_dir

    @property
    def paths(self) -> dict[str, Path]:
        """Where the run's artefacts live."""
        d = self.run_dir if self.run_dir is not None else Path(".")
        return {"run_dir": d, "config": d / "config.json", "metrics": d / "metrics.jsonl",
                "plot": d / "learning_curve.png", "best_selector": d / "best_selector.npz",
                "gif": d / "episode.gif"}

    def _metadata(self) -> dict[str, Any]:
        return {"env": self.config.env, "config": self.config.to_dict(),
                "selector_size": self.selector_size, "skill_names": list(self.skill_names)}

    def checkpoint_expect(self) -> dict[str, Any]:
        c = self.config.to_dict()
        keep = ("env", "env_kwargs", "seed", "es", "mappo", "actor", "critic", "num_skills")
        return {"env": self.config.env, "config": {k: c[k] for k in keep}}

    def checkpoint_tree(self) -> dict[str, Any]:
        return {"train_state": self.ts, "es_state": self.es_state, "round": int(self.round),
                "best_fitness": float(self.best_fitness)}

    def save_checkpoint(self) -> Path:
        """Checkpoint the whole state (TrainState, ESState, round, best fitness, history)."""
        mgr = checkpoint.CheckpointManager(self._ensure_run_dir(),
                                           keep=self.config.keep_checkpoints)
        meta = {**self._metadata(), "history": _clean(self.history),
                "wall_time": self._wall()}
        return mgr.save(self.round, self.checkpoint_tree(), meta)

    def _wall(self) -> float:
        return self._wall_offset + (time.perf_counter() - self._t_start if self._t_start else 0.0)

    def run(self, rounds: int | None = None, progress: bool = False,
            on_round: Callable[[dict], None] | None = None) -> list[dict]:
        """Run up to ``rounds`` more outer rounds (default: until ``config.n_outer``).

        Writes ``config.json``, one ``metrics.jsonl`` row per round, the learning curve,
        checkpoints every ``checkpoint_every`` rounds and at the end, ``best_selector.npz``
        whenever the selector's fitness improves, and (when the run reaches ``n_outer``)
        the final episode GIF. Returns the history (all rounds so far).

        Ctrl-C (SIGINT) or SIGTERM, on the main thread: the current round is finished and
        checkpointed, then :class:`TrainingInterrupted` (a ``KeyboardInterrupt``) is
        raised; a second signal stops at once, keeping every completed round. A fresh
        trainer refuses a run directory that already holds checkpoints (resume it).
        """
        cfg = self.config
        start = self.round
        end = cfg.n_outer if rounds is None else min(cfg.n_outer, start + int(rounds))
        if end <= start:
            return self.history
        if self._fresh and start == 0:
            self._start_fresh_run_dir()
        self._fresh = False
        self._ensure_run_dir()
        self._open_tensorboard()
        self._t_start = self._t_round = time.perf_counter()
        self._end = end
        if progress:
            from tqdm import tqdm

            self._pbar = tqdm(total=cfg.n_outer, initial=start, unit="round",
                              dynamic_ncols=True, desc=f"{cfg.mode}")
        self._user_on_round = on_round
        self._stop_signal = None
        restore = self._install_stop_handlers()
        try:
            if cfg.mode == "mappo":
                ts = self.ts
                for r in range(start, end):
                    for _ in range(cfg.grad_steps_per_outer):
                        ts = self.gradient_step(ts)
                    self._on_round(r - start, ts, self.es_state, None)
            else:
                es.merl_coexist(
                    theta0=selector_theta(self.ts.actor),
                    eval_fn=self.eval_fn,
                    gradient_step_fn=self.gradient_step,
                    sync_in=self.sync_in,
                    sync_out=self.sync_out,
                    n_outer=end - start,
                    grad_steps_per_outer=cfg.grad_steps_per_outer,
                    es_cfg=self.es_cfg,
                    key=chain_key(self._es_key, start),
                    gstate0=self.ts,
                    on_round=self._on_round,
                    es_state0=self.es_state,
                    generation_fn=(None if self._generation is None else
                                   lambda k, s, ts: self._generation(k, s, ts.actor)),
                )
        except KeyboardInterrupt:
            # keep every completed round: checkpoint it unless the last one already is
            mgr = checkpoint.CheckpointManager(self.run_dir)
            if self.round > start and mgr.latest() != mgr.path(self.round):
                self.save_checkpoint()
            raise
        except FloatingPointError as e:  # every ES member non-finite: nothing was written
            latest = checkpoint.CheckpointManager(self.run_dir).latest()
            cause = re.sub(r"^ES round \d+: ", "", str(e))  # merl_coexist counts from 0
            raise FloatingPointError(
                f"round {self.round}: {cause}. The run stopped without writing this round; "
                f"{'the last checkpoint is ' + str(latest) if latest else 'no checkpoint yet'}"
            ) from None
        finally:
            restore()
            self._wall_offset = self._wall()
            self._t_start = 0.0
            if self._pbar is not None:
                self._pbar.close()
                self._pbar = None
            if self._tb is not None:
                self._tb.flush()
        if self.round >= cfg.n_outer and cfg.gif:
            self.write_gif(self.paths["gif"])
        return self.history

    def _start_fresh_run_dir(self) -> None:
        """Before round 0 of a new run: refuse a directory holding another run's
        checkpoints, and start config.json / metrics.jsonl afresh (rows left by a run
        killed before its first checkpoint belong to nothing that can be resumed)."""
        if self.run_dir is None:
            return
        latest = checkpoint.CheckpointManager(self.run_dir).latest()
        if latest is not None:
            raise ValueError(
                f"run directory {self.run_dir} already holds a run (checkpoint {latest.name});"
                f" continue it with `feudal-es train --resume {self.run_dir}` "
                "(ESTrainer.resume) or choose another directory")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _write_text_atomic(self.paths["config"],
                           json.dumps(self.config.to_dict(), indent=2) + "\n")
        _write_text_atomic(self.paths["metrics"], "")

    def _install_stop_handlers(self) -> Callable[[], None]:
        """SIGINT/SIGTERM -> finish the round, checkpoint, stop (a second signal: stop now).

        Installed only on the main thread and only over the default handlers (a handler
        the caller installed is left alone). Returns the function restoring them."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
        previous = {s: signal.getsignal(s) for s in defaults}

        def on_signal(signum: int, frame: Any) -> None:
            if self._stop_signal is not None:
                raise TrainingInterrupted(signum, self.round, graceful=False)
            self._stop_signal = signum
            print(f"\nfeudal-es: {signal.Signals(signum).name}: finishing the round in "
                  f"progress ({self.round} done so far), then checkpointing and stopping "
                  "(send it again to stop at once)", file=sys.stderr, flush=True)

        installed = [s for s in defaults if previous[s] is defaults[s]]
        for s in installed:
            signal.signal(s, on_signal)

        def restore() -> None:
            for s in installed:
                signal.signal(s, previous[s])

        return restore

    def _open_tensorboard(self) -> None:
        if self._tb is not None:
            return
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            return
        self._tb = SummaryWriter(str(self.run_dir / "tb"))

    def _on_round(self, outer: int, ts: mappo.TrainState, es_state: es.ESState,
                  info: dict | None) -> None:
        """After each round: fitness of the current selector, log row, artefacts."""
        cfg = self.config
        r = self.round
        theta = selector_theta(ts.actor)
        ret, env_metrics = self.rollout_stats(theta[None], self._eval_key, actor=ts.actor)
        fitness = float(ret.mean())
        now = time.perf_counter()
        dt = now - self._t_round
        self._t_round = now
        row: dict[str, Any] = {"round": r, "env_steps": int(ts.env_steps)}
        row["selector_fitness"] = fitness
        row["selector_fitness_std"] = float(ret.std())
        for k, v in env_metrics.items():
            row[f"env/{k}"] = float(np.mean(v))
        if info is not None:
            row.update(fitness_best=info["best_fitness"], fitness_mean=info["mean_fitness"],
                       sigma=info["sigma"], num_invalid=info["num_invalid"])
        else:
            row.update(fitness_best=None, fitness_mean=None, sigma=None, num_invalid=None)
        if self._round_metrics:
            keys = self._round_metrics[0]
            for k in keys:
                vals = [m[k] for m in self._round_metrics]
                row[f"mappo/{k}"] = vals[-1] if k == "env_steps" else sum(vals) if \
                    k == "skipped_updates" else float(np.nanmean(vals)) \
                    if np.isfinite(vals).any() else None
        self._round_metrics = []
        if self.env.kind == "host":
            failures = self._failures + [{**f, "phase": "selector_eval"}
                                         for f in self._host_eval.failures]
            self._failures = []
            row["failed_members"] = sum(f["phase"] == "population" for f in failures)
            self._log_failures(r, failures)
        steps = self._round_env_steps(info is not None)
        row["sps"] = steps / dt if steps else None
        row["round_time"] = dt
        row["wall_time"] = self._wall()
        row = _clean(row)
        # commit the round in one statement (an interrupt sees all of it or none)
        self.ts, self.es_state, self.round, self.history = ts, es_state, r + 1, [
            *self.history, row]
        improved = fitness > self.best_fitness
        if improved:
            self.best_fitness = fitness
            checkpoint.save_selector(self.paths["best_selector"], theta,
                                     {**self._metadata(), "fitness": fitness, "round": r})
        with open(self.paths["metrics"], "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for k, v in row.items():
                if isinstance(v, (int, float)) and k != "round":
                    self._tb.add_scalar(k, v, r)
        last = self.round >= self._end
        if self.round % cfg.plot_every == 0 or last:
            plot_history(self.history, self.paths["plot"],
                         f"{cfg.env} ({cfg.mode}, seed {cfg.seed})")
        if self.round % cfg.checkpoint_every == 0 or last:
            self.save_checkpoint()
        if self._pbar is not None:
            post = {"gen": r + 1, "fit": f"{fitness:.3g}"}
            if row.get("fitness_best") is not None:
                post["best"] = f"{row['fitness_best']:.3g}"
            if row.get("sps") is not None:
                post["sps"] = f"{row['sps']:.0f}"
            self._pbar.set_postfix(post)
            self._pbar.update(1)
        if self._user_on_round is not None:
            self._user_on_round(row)
        if self._stop_signal is not None and self.round < self._end:
            mgr = checkpoint.CheckpointManager(self.run_dir)
            if mgr.latest() != mgr.path(self.round):
                self.save_checkpoint()
            raise TrainingInterrupted(self._stop_signal, self.round, graceful=True)

    def _log_failures(self, round_: int, failures: list[dict]) -> None:
        """Host path: warn about each failed evaluation episode and append it to
        ``env_failures.jsonl`` in the run directory."""
        if not failures:
            return
        with open(self.run_dir / "env_failures.jsonl", "a") as f:
            for x in failures:
                who = (f"population member {x['member']}" if x["phase"] == "population"
                       else "the current selector's evaluation")
                log.warning("round %d: %s failed in episode %d (env seed %d) and ranks last: "
                            "%s (at %s)", round_, who, x["episode"], x["env_seed"], x["error"],
                            x["where"])
                f.write(json.dumps({"round": round_, **x}) + "\n")

    def _round_env_steps(self, es_ran: bool) -> int:
        """Swarm steps simulated in a round (MAPPO + ES + selector eval), JAX path."""
        cfg = self.config
        if self.env.kind != "jax":
            return 0
        t = self.env.core.max_steps
        steps = cfg.episodes * t
        if cfg.mode != "es":
            steps += cfg.grad_steps_per_outer * self.mappo_cfg.batch_size
        if es_ran:
            steps += self.es_cfg.num_candidates * cfg.episodes * t
        return steps

    # --- episodes to pictures ------------------------------------------------------------
    def episode_frames(self, theta: jax.Array | None = None, seed: int | None = None,
                       actor: FeudalActor | None = None) -> list[np.ndarray]:
        """Frames of one deterministic episode with ``actor`` (default: the current one)
        and selector ``theta`` (default: the actor's)."""
        actor = self.ts.actor if actor is None else actor
        if theta is not None:
            actor = set_selector_theta(actor, jnp.asarray(theta))
        key = jax.random.key(self.config.seed if seed is None else seed)
        if self.env.kind == "jax":
            core = self.env.core
            period = self.mappo_cfg.selector_period
            if self._fns.gif_episode is None:
                self._fns.gif_episode = eqx.filter_jit(
                    lambda a, k: _episode(core, a, k, period, True, keep_states=True))
            _, _, states = jax.device_get(self._fns.gif_episode(actor, key))
            count = jax.tree.leaves(states)[0].shape[0]
            return [core.render(jax.tree.map(lambda s, i=i: s[i], states))
                    for i in range(count)]
        try:
            env = self.env.make(render_mode="rgb_array")
        except TypeError as e:
            raise ValueError(f"env {self.config.env!r} cannot render (no render_mode "
                             f"'rgb_array': {e})") from None
        frames = []
        ev = self._host_eval
        saved = ev.envs
        try:
            class _Recording:
                def __init__(self, env):
                    self._env = env

                def __getattr__(self, name):
                    return getattr(self._env, name)

                def reset(self, **kw):
                    out = self._env.reset(**kw)
                    frames.append(np.asarray(self._env.render()))
                    return out

                def step(self, actions):
                    out = self._env.step(actions)
                    frames.append(np.asarray(self._env.render()))
                    return out

            ev.episode(actor, _Recording(env), int(self.config.seed if seed is None else seed),
                       key)
        finally:
            ev.envs = saved
        if not frames or frames[0] is None or frames[0].ndim != 3:
            raise ValueError(f"env {self.config.env!r} did not return rgb frames from render()")
        return frames

    def write_gif(self, path: str | os.PathLike, theta: jax.Array | None = None,
                  seed: int | None = None) -> Path | None:
        """Write a deterministic episode GIF; returns None (and says why) if the env
        cannot render."""
        from envs.render import write_gif

        try:
            frames = self.episode_frames(theta, seed)
        except (ValueError, NotImplementedError, AttributeError) as e:
            print(f"feudal-es: no GIF: {e}")
            return None
        return write_gif(frames, path)

    # --- resume ---------------------------------------------------------------------------
    @classmethod
    def resume(cls, run_dir: str | os.PathLike, n_outer: int | None = None,
               env: str | None = None) -> ESTrainer:
        """A trainer continuing ``run_dir`` from its newest checkpoint.

        The config comes from the checkpoint (``n_outer`` may be raised); the template is
        a freshly built trainer, so a checkpoint of another env or architecture is
        refused naming the difference. ``metrics.jsonl`` is rewritten to the checkpoint's
        history (rounds after the checkpoint will be recomputed identically).

        The checkpoint is data: a ``"module:attr"`` env it names is not imported unless
        the caller names the same id as ``env`` (:class:`UntrustedEnvError` otherwise).
        """
        run_dir = Path(run_dir)
        mgr = checkpoint.CheckpointManager(run_dir)
        latest = mgr.latest()
        if latest is None:
            raise ValueError(f"cannot resume {run_dir}: no checkpoint (ckpt_*.npz) in it")
        try:
            meta = checkpoint.read_metadata(latest)
        except checkpoint.CheckpointError as e:  # say what is left rather than skip silently
            older = ", ".join(p.name for p in reversed(mgr.all()[:-1]))
            raise checkpoint.CheckpointError(
                f"{e}" + (f" (older checkpoints in this run: {older}; move the damaged one "
                          "away to resume from the previous)" if older else "")) from None
        if "config" not in meta:
            raise checkpoint.CheckpointError(f"{latest} has no trainer config in its metadata")
        config = TrainerConfig.from_dict(meta["config"])
        if env is not None and env != config.env:
            raise ValueError(f"{run_dir} is a run of env {config.env!r}; resuming continues "
                             f"that env (env={env!r} may only repeat it)")
        if n_outer is not None:
            config = dataclasses.replace(config, n_outer=int(n_outer))
        resolved = resolve_env(config.env, config.env_kwargs,
                               source=None if env is not None else f"checkpoint {latest}")
        trainer = cls(config, run_dir, resolved=resolved)
        tree, meta = mgr.load_latest(trainer.checkpoint_tree(),
                                     expect=trainer.checkpoint_expect())
        if n_outer is not None:  # the run's config.json says what it now runs to
            _write_text_atomic(trainer.paths["config"],
                               json.dumps(config.to_dict(), indent=2) + "\n")
        trainer.ts = tree["train_state"]
        trainer.es_state = tree["es_state"]
        trainer.round = int(tree["round"])
        trainer.best_fitness = float(tree["best_fitness"])
        trainer.history = list(meta.get("history", []))
        trainer._wall_offset = float(meta.get("wall_time") or 0.0)
        trainer._fresh = False
        _write_text_atomic(trainer.paths["metrics"],
                           "".join(json.dumps(h) + "\n" for h in trainer.history))
        return trainer

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, env: str | None = None) -> ESTrainer:
        """A trainer holding the state of one checkpoint file (for eval / render).

        ``env`` evaluates on another env id; its networks must have the same shapes (the
        checkpoint's structure is still checked leaf by leaf). The checkpoint is data: a
        ``"module:attr"`` env it names is imported only when the caller passes that id as
        ``env`` (:class:`UntrustedEnvError` otherwise)."""
        path = Path(path)
        meta = checkpoint.read_metadata(path)
        if "config" not in meta:
            raise checkpoint.CheckpointError(f"{path} has no trainer config in its metadata")
        config = TrainerConfig.from_dict(meta["config"])
        same_env = env is None or env == config.env
        if env is not None:
            config = dataclasses.replace(config, env=env)
        resolved = resolve_env(config.env, config.env_kwargs,
                               source=None if env is not None else f"checkpoint {path}")
        trainer = cls(config, path.parent, resolved=resolved)
        expect = trainer.checkpoint_expect() if same_env else None
        tree, meta = checkpoint.load(path, trainer.checkpoint_tree(), expect=expect)
        trainer.ts = tree["train_state"]
        trainer.es_state = tree["es_state"]
        trainer.round = int(tree["round"])
        trainer.best_fitness = float(tree["best_fitness"])
        trainer.history = list(meta.get("history", []))
        trainer._fresh = False
        return trainer
