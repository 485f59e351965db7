"""The memory a run needs, estimated from its config and its env's shapes before anything
is allocated, and the refusal of a run that cannot fit.

Why: an absurd size (``es.pop_size=10**9``, ``mappo.num_envs=10**9``,
``actor.embed_dim=10**9``, a million agents, ``eval --episodes 10**8``) otherwise compiles
for a minute and dies in XLA's or numpy's allocator with a traceback, or pushes the
machine into swap. :func:`check` compares the estimate with what the machine has
available (``MemAvailable``, a cgroup limit, an accelerator's free memory) and raises
:class:`MemoryBudgetError` (a ``ValueError``: the CLI's one-line error) naming the term
that dominates, its factors and the field to change.

Every figure is a lower bound: arrays the run certainly holds at once, from shapes only
(``jax.eval_shape`` of the env's ``reset`` and ``comm_graph``, the networks' parameter
counts from their configs), never the activations XLA may or may not keep. So a refusal
is never a false alarm; a run that passes may still need more. The parameter counts
mirror :mod:`agents` (whose layers are initialised eagerly in numpy, so ``eval_shape``
of their constructors would allocate); ``tests/test_size_guards.py`` pins them to the
built networks. ``FEUDAL_ES_MEMORY_CHECK=0`` in the environment skips the check.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents import ActorConfig, CriticConfig

__all__ = ["CHECK_ENV", "MemoryBudgetError", "NetworkSizes", "Term", "available_memory",
           "check", "format_bytes", "network_sizes"]

CHECK_ENV = "FEUDAL_ES_MEMORY_CHECK"  # "0": never refuse
FLOOR = 64 * 2**20  # estimates below this are never compared (no /proc read per call)
F32 = 4


class MemoryBudgetError(ValueError):
    """A run (or an evaluation) whose arrays cannot fit in the memory available; the
    message names the dominating term, its factors and the field to change."""

    def __init__(self, term: Term, total: int, available: int, where: str):
        rest = (f"; with the rest of the run about {format_bytes(total)} in all"
                if total > 1.1 * term.nbytes else "")
        super().__init__(
            f"{term.what} would take about {format_bytes(term.nbytes)} ({term.detail}){rest}; "
            f"{where} has {format_bytes(available)} available: {term.advice} "
            f"({CHECK_ENV}=0 skips this check)")
        self.term, self.total, self.available = term, total, available


@dataclasses.dataclass(frozen=True)
class Term:
    """One part of a run's memory: what it is, its bytes (a lower bound), the factors
    they come from and what to change to shrink it."""

    what: str  # e.g. "the ES population"
    nbytes: int
    detail: str  # e.g. "es.pop_size=1000000000 candidates x 79 parameters x ..."
    advice: str  # e.g. "lower es.pop_size"


def format_bytes(n: float) -> str:
    """Decimal units, three significant digits: ``316 GB``."""
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if n < 999.5 or unit == "PB":
            return f"{n:.3g} {unit}" if unit != "bytes" else f"{int(n)} bytes"
        n /= 1000.0
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------
# what the machine has
# ---------------------------------------------------------------------------------------
def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """Room left under this process's cgroup memory limit (v2, else v1), if any."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:  # "max" / a huge v1 default: no limit
            return max(int(limit) - usage, 0)
    return None


def _sysconf_available() -> int | None:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), no such name
        return None


def host_available() -> int | None:
    """Bytes this process can still allocate without swapping: ``MemAvailable`` (else
    free physical pages), capped by a cgroup memory limit; None when unknown."""
    known = [x for x in (_meminfo_available() or _sysconf_available(), _cgroup_available())
             if x is not None]
    return min(known) if known else None


def device_available(device: Any) -> int | None:
    """Free bytes of an accelerator (``memory_stats()``'s limit minus use); None for a
    CPU device or when the backend does not say."""
    if device is None or getattr(device, "platform", "cpu") == "cpu":
        return None
    try:
        stats = device.memory_stats() or {}
    except Exception:  # a backend without memory statistics
        return None
    if "bytes_limit" not in stats:
        return None
    return max(int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), 0)


def available_memory(device: Any = None, host: bool = True) -> tuple[int | None, str]:
    """``(bytes, where)``: the memory the run's arrays can use. On an accelerator
    ``device`` its free memory (and with ``host``, the least of it and the host's: the
    host path holds its batches in both); otherwise the host's."""
    dev = device_available(device)
    mem = host_available() if host or dev is None else None
    if dev is not None and (mem is None or dev <= mem):
        return dev, f"device {device}"
    return mem, "this machine"


def check(terms: Iterable[Term], device: Any = None, host: bool = True) -> None:
    """Raise :class:`MemoryBudgetError` when the terms together exceed the memory
    available (:func:`available_memory`); quiet below :data:`FLOOR`, when the memory
    is unknown, or with ``FEUDAL_ES_MEMORY_CHECK=0``."""
    terms = [t for t in terms if t.nbytes > 0]
    total = sum(t.nbytes for t in terms)
    if total < FLOOR or os.environ.get(CHECK_ENV, "1").strip() == "0":
        return
    available, where = available_memory(device, host)
    if available is None or total <= available:
        return
    raise MemoryBudgetError(max(terms, key=lambda t: t.nbytes), total, available, where)


def culprit(factors: Sequence[tuple[str, int, int]]) -> str:
    """The field of the factor furthest above its typical size: ``(field, value,
    typical)`` triples (what a message tells the user to lower)."""
    return max(factors, key=lambda f: f[1] / max(f[2], 1))[0]


# ---------------------------------------------------------------------------------------
# the networks' parameter counts (a mirror of agents' constructors; pinned by a test)
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NetworkSizes:
    """Parameter counts of the actor, its selector (what ES evolves by default) and the
    critic."""

    actor: int
    selector: int
    critic: int

    def es_dim(self, params: str) -> int:
        """Length of the ES vector (``TrainerConfig.es_params``)."""
        return self.actor if params == "actor" else self.selector


def _mlp(n_in: int, hidden: Sequence[int], n_out: int, layer_norm: bool = False) -> int:
    sizes = [n_in, *hidden, n_out]
    return sum(a * b + b for a, b in itertools.pairwise(sizes)) + (
        2 * sum(hidden) if layer_norm else 0)


def _obs_shapes(space: Any) -> list[tuple[int, ...]]:
    if isinstance(space, gym.spaces.Dict):
        return [tuple(int(d) for d in space.spaces[k].shape) for k in sorted(space.spaces)]
    return [tuple(int(d) for d in getattr(space, "shape", None) or ())]


def _cnn(shape: tuple[int, ...], cfg: ActorConfig) -> int:
    c, h, w = (1, *shape) if len(shape) == 2 else shape
    k, total = cfg.cnn_kernel, 0
    for out_c, stride in zip(cfg.cnn_channels, cfg.cnn_strides, strict=True):
        total += out_c * c * k * k + out_c
        c = out_c
        h = max((h + 2 * (k // 2) - k) // stride + 1, 0)
        w = max((w + 2 * (k // 2) - k) // stride + 1, 0)
    return total + c * h * w * cfg.cnn_out + cfg.cnn_out


def network_sizes(obs_space: Any, action_space: Any, num_skills: int, global_state_size: int,
                  num_agents: int, actor: ActorConfig, critic: CriticConfig) -> NetworkSizes:
    """Parameter counts of ``FeudalActor(key, obs_space, action_space, num_skills,
    actor)`` and ``CentralCritic(key, global_state_size, num_agents, num_skills,
    critic)``, from the configs alone (Python ints: nothing is allocated)."""
    feat = backbone = 0
    for shape in _obs_shapes(obs_space):
        if len(shape) in (2, 3):
            backbone += _cnn(shape, actor)
            feat += actor.cnn_out
        else:
            backbone += _mlp(int(np.prod(shape, dtype=object)), actor.vec_hidden, actor.vec_out)
            feat += actor.vec_out
    for _ in range(actor.gnn_layers):
        backbone += (actor.gnn_hops + 1) * feat * actor.gnn_features + actor.gnn_features
        feat = actor.gnn_features
    backbone += _mlp(feat, actor.embed_hidden, actor.embed_dim)
    e = actor.embed_dim
    selector = _mlp(e, actor.selector_hidden, num_skills)
    if actor.goal_dim:
        selector += _mlp(e, actor.selector_hidden, actor.goal_dim)
    code = actor.skill_embed_dim or num_skills
    executor = num_skills * actor.skill_embed_dim
    head_in = e + code + actor.goal_dim
    if actor.recurrent:  # a GRU between the executor's input and its head (see below)
        executor += _gru(head_in, actor.gru_hidden)
        head_in = actor.gru_hidden
    if isinstance(action_space, gym.spaces.Discrete):
        executor += _mlp(head_in, actor.executor_hidden, int(action_space.n))
    else:
        size = int(np.prod(getattr(action_space, "shape", None) or (1,), dtype=object))
        executor += _mlp(head_in, actor.executor_hidden, size) + size
    state_size = global_state_size + int(critic.time_input)
    h = critic.gru_hidden
    # a recurrent critic's GRU feeds the MLP in the state's place
    gru = _gru(state_size, h) if critic.recurrent else 0
    critic_in = (h if critic.recurrent else state_size) + num_agents + num_skills
    return NetworkSizes(actor=backbone + selector + executor, selector=selector,
                        critic=gru + _mlp(critic_in, critic.hidden, 1, critic.layer_norm))


def _gru(in_size: int, h: int) -> int:
    """Parameters of a GRU cell: input, recurrent and bias weights of its three gates, and
    the candidate's recurrent bias (``agents.layers.gru_cell``)."""
    return 3 * h * (in_size + h + 1) + h


def largest_size_field(actor: ActorConfig, critic: CriticConfig) -> tuple[str, int]:
    """The actor or critic size field with the largest value (``("actor.embed_dim",
    10**9)``): what a message about the networks' memory tells the user to lower."""
    best = ("actor.embed_dim", actor.embed_dim)
    for prefix, cfg in (("actor", actor), ("critic", critic)):
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            values = value if isinstance(value, tuple) else (value,)
            ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
            if f.name not in ("selector_period", "fixed_option", "gnn_hops", "cnn_strides") \
                    and ints and max(ints) > best[1]:
                best = (f"{prefix}.{f.name}", max(ints))
    return best


def bytes_of(tree: Any) -> int:
    """Bytes of a pytree of arrays or ``jax.ShapeDtypeStruct`` (typed PRNG keys count
    their key data)."""
    import jax

    total = 0
    for leaf in jax.tree.leaves(tree):
        shape, dtype = getattr(leaf, "shape", ()), getattr(leaf, "dtype", None)
        if dtype is None:
            continue
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            size = 8
        else:
            size = np.dtype(dtype).itemsize
        total += math.prod(int(d) for d in shape) * size
    return total


# ---------------------------------------------------------------------------------------
# a run's terms
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EnvFootprint:
    """What one env copy / one episode / one collected step holds, in bytes."""

    num_agents: int
    agents_field: str  # what sets the number of agents, e.g. "env_kwargs.num_agents"
    obs: int  # one step's observations of all agents
    state: int  # one env state (0 when unknown: a host env's Python objects)
    adj: int  # one [N, N] comm graph
    step: int  # one collected MAPPO transition of one env copy (all agents)

    @property
    def episode(self) -> int:
        """A running episode: its state, the step's observations and comm graph."""
        return self.state + self.obs + self.adj


def _agents_field(config: Any) -> str:
    return ("env_kwargs.num_agents" if "num_agents" in config.env_kwargs
            else "the env's number of agents (env_kwargs)")


def _step_bytes(n: int, obs: int, adj: int, gstate: int, action: int, goal: int) -> int:
    """A MAPPO transition (``mappo.Batch``'s fields for one env copy): observations, comm
    graph, global state, and per agent the option (+ sub-goal), action, log-prob, value,
    reward, done and alive flags."""
    return obs + adj + gstate * F32 + n * (action + goal + 6) * F32


def jax_footprint(core: Any, config: Any) -> EnvFootprint:
    """A functional env's footprint from ``jax.eval_shape`` of its ``reset`` and
    ``comm_graph`` (nothing is allocated, nothing compiled)."""
    import jax

    obs, state = jax.eval_shape(core.reset, jax.random.key(0))
    adj = bytes_of(jax.eval_shape(core.comm_graph, state))
    n = int(core.num_agents)
    action = math.prod(int(d) for d in core.action_space.shape)
    o = bytes_of(obs)
    return EnvFootprint(n, _agents_field(config), o, bytes_of(state), adj,
                        _step_bytes(n, o, adj, int(core.global_state_size), action,
                                    config.actor.goal_dim))


def host_footprint(spec: Any, config: Any) -> EnvFootprint:
    """A PettingZoo env's footprint from its spaces (observations stacked as float32,
    the comm graph a float32 ``[N, N]``); its own state is unknown (0)."""
    n = spec.num_agents
    per_agent = sum(math.prod(s) for s in _obs_shapes(spec.observation_space))
    action = math.prod(int(d) for d in getattr(spec.action_space, "shape", None) or (1,))
    obs, adj = n * per_agent * F32, n * n * F32
    return EnvFootprint(n, _agents_field(config), obs, 0, adj,
                        _step_bytes(n, obs, adj, spec.global_state_size, action,
                                    config.actor.goal_dim))


def run_terms(config: Any, env: EnvFootprint, sizes: NetworkSizes, members_at_once: int,
              seeds: int = 1, host: bool = False) -> list[Term]:
    """The terms of a run of ``config`` (``seeds`` seeds in one program): the ES
    population, its fitness episodes (JAX path: ``members_at_once`` members x
    ``episodes`` running together), MAPPO's env copies and batch, and the networks with
    their gradients and optimizer moments."""
    s = max(int(seeds), 1)
    n_field, n = env.agents_field, env.num_agents
    seeds_x = f"{s} seeds x " if s > 1 else ""
    terms = []
    if config.runs_es:
        p, d = config.es.num_candidates, sizes.es_dim(config.es_params)
        field = "es.pop_size" if p >= d else largest_size_field(config.actor, config.critic)[0]
        terms.append(Term(
            "the ES population", s * 2 * p * d * F32,
            f"{seeds_x}es.pop_size={config.es.pop_size}: {p} candidates x {d} parameters "
            f"x 2 arrays (candidates, noise) x {F32} bytes", f"lower {field}"))
        if not host:
            e, m = config.episodes, members_at_once
            chunk_field = "population_chunk" if config.population_chunk else "es.pop_size"
            terms.append(Term(
                "the fitness episodes", s * m * e * env.episode,
                f"{seeds_x}{m} members at a time x {e} episodes x "
                f"{format_bytes(env.episode)} per episode (env state, observations and comm "
                f"graph of {n} agents)",
                "lower " + culprit([(chunk_field, m, 8), ("episodes", e, 4),
                                    (n_field, n, 8)])))
    if config.trains_executor:
        mc = config.mappo
        copies = 0 if host else mc.num_envs * (env.state + env.obs)
        stacked = 2 if host else 1  # the host path holds the steps, then stacks them
        terms.append(Term(
            "MAPPO's env copies and batch",
            s * (copies + stacked * mc.num_steps * mc.num_envs * env.step),
            f"{seeds_x}mappo.num_steps={mc.num_steps} x mappo.num_envs={mc.num_envs} x "
            f"{format_bytes(env.step)} per transition of {n} agents"
            + (" x 2 (collected, then stacked)" if host else ""),
            "lower " + culprit([("mappo.num_envs", mc.num_envs, 8),
                                ("mappo.num_steps", mc.num_steps, 32),
                                (n_field, n, 8)])))
    copies = 4 if config.trains_executor else 1
    field, value = largest_size_field(config.actor, config.critic)
    terms.append(Term(
        "the actor and critic", s * (sizes.actor + sizes.critic) * copies * F32,
        f"{seeds_x}{sizes.actor} actor + {sizes.critic} critic parameters x {copies} "
        f"({'weights, gradients, 2 Adam moments' if copies > 1 else 'weights'}) x {F32} "
        "bytes", "lower " + culprit([(field, value, 256), (n_field, n, 8)])))
    return terms


def evaluation_term(members: int, episodes: int, per_episode: int, at_once: int,
                    result: int) -> Term:
    """Evaluation episodes of ``members`` selectors: ``at_once`` of them run their
    ``episodes`` together, each running episode holding ``per_episode`` bytes, and every
    member keeps a ``result``-byte return per episode."""
    run = at_once * episodes * per_episode
    return Term(
        "the evaluation", run + members * episodes * result,
        f"{members} selector{'s' * (members != 1)} x {episodes} episodes"
        + (f", {at_once} at a time x {format_bytes(per_episode)} per running episode"
           if run else f" x {result} bytes per result"),
        "lower the episodes: --episodes of feudal-es eval, TrainerConfig.episodes in "
        "training")
