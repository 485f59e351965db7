"""Team fitness on the pure-JAX path: episodes as scans, the population as vmap x chunks x
shards, and the cache of the jitted functions one setup needs.

Team fitness of a selector ``theta`` = the mean team return (sum of ``team_reward``) over
``episodes`` full episodes with the *current* executor. The whole population is evaluated
in one jitted call (``vmap`` over members x episodes, ``lax.scan`` over the episode), and
every member of a generation sees the same env reset keys (common random numbers). On a
CPU the members run a few at a time (:func:`population_chunk`), and with several devices
the population is split over them (:mod:`feudal_es.sharding`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax

from agents import FeudalActor, set_es_theta
from envs.base import SwarmEnv
from envs.episode import Episode, run_episode
from feudal_es import es, mappo

__all__ = [
    "CPU_POPULATION_CHUNK",
    "JaxFunctions",
    "episode",
    "jax_functions",
    "make_population_rollouts",
    "population_chunk",
    "population_devices",
]

CPU_POPULATION_CHUNK = 8  # population_chunk=0 on a CPU backend (bench/perf.py measures it)


def episode(env: SwarmEnv, actor: FeudalActor, key: jax.Array, period: int,
            deterministic: bool, keep_states: bool = False) -> Episode:
    """One full episode of the feudal actor from ``env.reset(key)`` (skills re-chosen every
    ``period`` steps); ``outs`` holds each step's env metrics."""

    def act(k, obs, state, held, t):
        held, out = actor.step(k, obs, env.comm_graph(state), held, t, period, deterministic)
        return out.env_action, held

    return run_episode(key, env, act, actor.initial_skill(env.num_agents),
                       keep_states=keep_states, record=lambda out: out.metrics)


def make_population_rollouts(env: SwarmEnv, period: int, deterministic: bool,
                             chunk: int = 0, params: str = "selector") -> Callable:
    """``rollouts(actor, thetas[P, D], keys[E]) -> (team_return[P, E], metrics[P, E])``.

    Every member ``p`` runs episode ``e`` from ``keys[e]`` (common random numbers) with
    ``set_es_theta(actor, thetas[p], params)`` (``params``: the selector, or the whole
    actor); ``metrics`` are the env's at the last step.
    Pure; ``vmap`` x ``vmap`` x ``lax.scan``. ``0 < chunk < P`` evaluates the members
    ``chunk`` at a time instead, ``lax.map(batch_size=chunk)`` (a ``lax.scan`` over
    ``P // chunk`` vmapped chunks, then one vmap over the ``P % chunk`` remainder): same
    program per member, activations bounded by ``chunk``.
    """

    def one(actor: FeudalActor, key: jax.Array):
        ep = episode(env, actor, key, period, deterministic)
        return ep.team_return, jax.tree.map(lambda m: m[-1], ep.outs)

    def rollouts(actor: FeudalActor, thetas: jax.Array, keys: jax.Array):
        def member(theta):
            a = set_es_theta(actor, theta, params)
            return jax.vmap(lambda k: one(a, k))(keys)

        if 0 < chunk < thetas.shape[0]:
            return jax.lax.map(member, thetas, batch_size=chunk)
        return jax.vmap(member)(thetas)

    return rollouts


def population_devices(config: Any) -> list:
    """The devices the ES population is sharded over (one device: no sharding)."""
    devices = jax.devices()
    n = config.population_devices or len(devices)
    if n > len(devices):
        raise ValueError(f"TrainerConfig.population_devices={n} but JAX sees only "
                         f"{len(devices)} device(s): {devices}")
    return devices[:n]


def population_chunk(config: Any) -> int:
    """Members evaluated together per chunk on the JAX path (0 = the whole population):
    ``config.population_chunk``, or for 0 :data:`CPU_POPULATION_CHUNK` when
    ``jax.default_backend()`` is ``"cpu"`` and full width on an accelerator."""
    if config.population_chunk:
        return config.population_chunk
    return CPU_POPULATION_CHUNK if jax.default_backend() == "cpu" else 0


@dataclasses.dataclass
class JaxFunctions:
    """The jitted functions of one JAX-path setup (built once, shared by trainers)."""

    init_state: Callable  # jitted mappo.init_train_state (one compile, not ~150 eager ops)
    train_step: Callable  # mappo.make_train_step
    guarded_step: Callable  # mappo.make_guarded_train_step: ts -> (ts, metrics, skipped)
    rollouts: Callable  # jitted make_population_rollouts (unsharded, at the config's chunk)
    generation: Callable  # (key, es_state, actor) -> (es_state, info): one ES generation
    # fitness(thetas[P, D], actor, keys[E]) -> [P]: the population's team fitness exactly
    # as generation evaluates it (chunked, sharded; inputs placed as generation places them)
    fitness: Callable
    gif_episode: Callable  # (actor, key) -> Episode with states: one deterministic episode


_CACHE: dict[str, JaxFunctions] = {}


def jax_functions(config: Any, core: SwarmEnv) -> JaxFunctions:
    """The jitted train step, population rollouts and ES generation for ``config``.

    Cached per process by everything that shapes them (env id and kwargs, MAPPO/ES
    configs, episodes, determinism, devices, population chunk), so a resumed trainer or
    the CLI's eval reuses the compiled code instead of compiling it again; the networks
    are jit *arguments*.
    """
    c = config.to_dict()
    devices = population_devices(config)
    chunk = population_chunk(config)
    key = json.dumps({**{k: c[k] for k in ("env", "env_kwargs", "mappo", "es", "episodes",
                                           "deterministic_eval")},
                      "devices": [d.id for d in devices], "chunk": chunk,
                      "params": config.es_params,
                      "fused": mappo.uses_fused_update(config.mappo, core.observation_space,
                                                       config.actor)}, sort_keys=True)
    if key in _CACHE:
        return _CACHE[key]
    mcfg, es_cfg, eps = config.mappo, config.es, config.episodes
    period = mcfg.selector_period
    rollouts = make_population_rollouts(core, period, config.deterministic_eval, chunk,
                                        config.es_params)

    def team_fitness(thetas, actor, keys):
        return rollouts(actor, thetas, keys)[0].mean(axis=1)

    place = lambda *args: args
    if len(devices) > 1:  # the population axis split over a device mesh
        from feudal_es import sharding

        mesh = sharding.population_mesh(devices)
        team_fitness = sharding.shard_population(team_fitness, mesh)
        place = lambda *args: sharding.replicate(args, mesh)

    @eqx.filter_jit
    def generation_jit(key, state, actor):
        def fitness(thetas, k):
            return team_fitness(thetas, actor, jax.random.split(k, eps))

        return es.generation(key, state, fitness, es_cfg)

    fitness_jit = eqx.filter_jit(team_fitness)
    local = (lambda x: x) if len(devices) == 1 else sharding.to_local

    def generation(key, state, actor):
        return local(generation_jit(*place(key, state, actor)))

    def fitness(thetas, actor, keys):
        return local(fitness_jit(*place(thetas, actor, keys)))

    gif = eqx.filter_jit(lambda actor, k: episode(core, actor, k, period, True,
                                                  keep_states=True))
    fns = JaxFunctions(eqx.filter_jit(mappo.init_train_state),
                       mappo.make_train_step(core, mcfg, config.actor),
                       mappo.make_guarded_train_step(core, mcfg, config.actor),
                       eqx.filter_jit(rollouts), generation, fitness, gif)
    _CACHE[key] = fns
    return fns
