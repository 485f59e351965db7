"""The jitted functions of one JAX-path setup, built once per process and shared.

:func:`jax_functions` holds what one seed needs (the MAPPO train step, the population
rollouts, one ES generation, a GIF episode); :func:`seed_functions` the same pieces for
many seeds at once, ``vmap``-ped over a leading seed axis and split over the devices.
Both are cached under :func:`compile_key`, the one statement of what shapes a compiled
program, so a resumed trainer, the CLI's eval or a second arm of a study reuse the
compiled code instead of compiling it again (the networks are jit *arguments*).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax

from envs.base import SwarmEnv
from feudal_es import es, group_fitness, mappo, migration, sharding
from feudal_es.rollout import (
    episode,
    make_population_rollouts,
    population_chunk,
    population_devices,
)
from feudal_es.theta import es_theta, set_es_theta

if TYPE_CHECKING:
    from feudal_es.config import TrainerConfig

__all__ = ["JaxFunctions", "SeedFunctions", "compile_key", "fused_update", "jax_functions",
           "seed_functions"]

# the config entries that shape the compiled programs (the networks are arguments)
_SHAPING = ("env", "env_kwargs", "pad_agents", "groups", "team", "others", "mappo", "es",
            "episodes", "deterministic_eval", "mode", "selector_stage_rounds",
            "data_parallel", "grad_steps_per_outer")


def fused_update(config: TrainerConfig, core: SwarmEnv) -> bool:
    """Whether this setup's MAPPO update is the fused one-program update
    (:func:`feudal_es.mappo.uses_fused_update` of the config's actor and the env's
    observations): decided here, once per setup."""
    return mappo.uses_fused_update(config.mappo, core.observation_space, config.actor)


def data_devices(config: TrainerConfig, core: SwarmEnv, seed_devices: int = 1) -> int:
    """How many devices one seed's MAPPO step runs on data-parallel
    (:mod:`feudal_es.mappo.parallel`): those of ``jax.devices()`` that ``seed_devices``
    (the devices a many-seed program splits its seeds over) leave per seed, as many as
    fit ``config.mappo``, or exactly ``config.data_parallel``. Only the fused update runs
    data-parallel: ``data_parallel > 1`` with the split update is a ``ValueError``."""
    if not fused_update(config, core):
        if config.data_parallel > 1:
            raise ValueError(
                f"data_parallel={config.data_parallel}: only the fused MAPPO update runs "
                "data-parallel, and this actor's CNN uses the split one (set "
                "mappo.update=fused, or data_parallel=0)")
        return 1
    left = len(jax.devices()) // seed_devices
    if config.data_parallel > left:
        raise ValueError(f"data_parallel={config.data_parallel}: JAX sees "
                         f"{len(jax.devices())} devices" + (
                             f", {seed_devices} of them split the seeds, leaving {left} "
                             "per seed" if seed_devices > 1 else ""))
    return mappo.data_devices(config.mappo, left, config.data_parallel,
                              config.actor.recurrent or config.critic.recurrent)


def compile_key(config: TrainerConfig, core: SwarmEnv, **extra: Any) -> str:
    """Everything that shapes the compiled programs of ``config`` on ``core``: the
    :data:`_SHAPING` entries, the population chunk, what ES evolves, the update kind, and
    ``extra`` (devices, seed count)."""
    c = config.to_dict()
    return json.dumps({**{k: c[k] for k in _SHAPING}, "chunk": population_chunk(config),
                       "params": config.es_params, "fused": fused_update(config, core),
                       **extra}, sort_keys=True)


@dataclasses.dataclass
class JaxFunctions:
    """The jitted functions of one seed's setup."""

    init_state: Callable  # jitted mappo.init_train_state (one compile, not ~150 eager ops)
    train_step: Callable  # mappo.make_train_step: ts -> (ts, metrics)
    guarded_step: Callable  # mappo.make_guarded_train_step: ts -> (ts, metrics, skipped)
    # ts -> ts as the host reads it, after a round's steps (a data-parallel step keeps
    # its state on the devices between steps: mappo.data_parallel_step); else the identity
    settle: Callable
    # ts -> (ts, metrics, skipped), each stacked over the round's grad_steps_per_outer
    # guarded steps run as one program (mappo.repeated); None with one step a round (the
    # guarded step is that one call) or the split update (its pieces jitted apart)
    round_steps: Callable | None
    rollouts: Callable  # jitted make_population_rollouts (unsharded, at the config's chunk)
    generation: Callable  # (key, es_state, actor) -> (es_state, info): one ES generation
    # fitness(thetas[P, D], actor, keys[E]) -> [P]: the population's team fitness exactly
    # as generation evaluates it (chunked, sharded; inputs placed as generation places them;
    # [P, G], every group's, when each group trains on its own: others="train")
    fitness: Callable
    # (actor, key) -> Episode with states and outs {"team_reward", "metrics"} per step: one
    # deterministic episode (the GIF's frames and header)
    gif_episode: Callable


@dataclasses.dataclass
class SeedFunctions:
    """The jitted, seed-batched functions of one setup (every argument and result has a
    leading seed axis)."""

    guarded_step: Callable  # ts -> (ts, metrics, skipped): mappo.guarded's, batched
    settle: Callable  # ts -> ts where the seeds live, after a round's steps (JaxFunctions)
    generation: Callable  # (key, es_state, actor) -> (es_state, info)
    returns: Callable  # (actor, thetas[P, D], keys[E]) -> (team_return[P, E], metrics)
    selector: Callable  # actor -> theta[D] (what ES evolves: config.es_params)
    with_selector: Callable  # (ts, theta[D]) -> ts with theta written into its actor
    with_mean_selector: Callable  # (ts, theta[D]) -> ts with theta's selector only
    place: Callable  # a stacked pytree -> where the seeds live (split over the mesh)
    unstack: Callable  # a stacked pytree -> one tree per seed (one jitted call)
    devices: int  # devices the seeds are split over


_CACHE: dict[str, Any] = {}


def jax_functions(config: TrainerConfig, core: SwarmEnv) -> JaxFunctions:
    """The jitted train step, population rollouts and ES generation for ``config``, the
    population sharded over :func:`~feudal_es.rollout.population_devices` (cached by
    :func:`compile_key`)."""
    devices = population_devices(config)
    data = data_devices(config, core)
    key = compile_key(config, core, devices=[d.id for d in devices], data=data)
    if key in _CACHE:
        return _CACHE[key]
    mcfg, eps = config.mappo, config.episodes
    fused = fused_update(config, core)
    rollouts = make_population_rollouts(core, config.deterministic_eval,
                                        population_chunk(config), config.es_params)
    scored = _scored(config, core, rollouts)

    def team_fitness(thetas, actor, keys):
        return scored(actor, thetas, keys)[0].mean(axis=1)

    place = lambda *args: args
    if len(devices) > 1:  # the population axis split over a device mesh
        mesh = sharding.population_mesh(devices)
        team_fitness = sharding.shard_population(team_fitness, mesh)
        place = lambda *args: sharding.replicate(args, mesh)

    evolve = _evolve(config)

    @eqx.filter_jit
    def generation_jit(key, state, actor):
        def fitness(thetas, k):
            return team_fitness(thetas, actor, jax.random.split(k, eps))

        return evolve(key, state, actor, fitness)

    fitness_jit = eqx.filter_jit(team_fitness)
    local = (lambda x: x) if len(devices) == 1 else sharding.to_local

    def generation(key, state, actor):
        return local(generation_jit(*place(key, state, actor)))

    def fitness(thetas, actor, keys):
        return local(fitness_jit(*place(thetas, actor, keys)))

    gif = eqx.filter_jit(lambda actor, k: episode(
        core, actor, k, True, keep_states=True,
        record=lambda out: {"team_reward": out.team_reward, "metrics": out.metrics}))
    n, round_steps = config.grad_steps_per_outer, None
    if data == 1:
        guarded, settle = mappo.make_guarded_train_step(core, mcfg, fused), _same
        if fused and n > 1:
            round_steps = eqx.filter_jit(mappo.repeated(mappo.guarded(
                lambda ts: mappo.fused_train_step(core, ts, mcfg)), n))
    else:
        guarded, settle = mappo.data_parallel_step(core, mcfg, jax.devices()[:data])
        if n > 1:  # the round's settle is its steps' (it knows what they left placed)
            round_steps, settle = mappo.data_parallel_step(core, mcfg, jax.devices()[:data],
                                                           repeat=n)
    fns = JaxFunctions(eqx.filter_jit(mappo.init_train_state),
                       mappo.make_train_step(core, mcfg, fused), guarded, settle,
                       round_steps, eqx.filter_jit(rollouts), generation, fitness, gif)
    _CACHE[key] = fns
    return fns


def _same(ts: Any) -> Any:
    return ts


def _scored(config: TrainerConfig, core: SwarmEnv, rollouts: Callable) -> Callable:
    """The rollouts ES scores its population with: ``rollouts`` itself, or with every
    group on its own fitness (``others="train"``) the per-group ones (``[P, E, G]``)."""
    if not group_fitness.trains_groups(config):
        return rollouts
    return make_population_rollouts(core, config.deterministic_eval,
                                    population_chunk(config), config.es_params, groups=True)


def _evolve(config: TrainerConfig) -> Callable:
    """``(key, es_state, actor, fitness) -> (es_state, info)``: the round's ES generation
    for ``config``'s mode: :func:`feudal_es.migration.actor_generation` for a mode that
    migrates the learner, :func:`feudal_es.group_fitness.evolve` when every group trains
    on its own fitness (``others="train"``), a plain :func:`feudal_es.es.generation`
    otherwise."""
    cfg = config.es
    if group_fitness.trains_groups(config):  # [P, G] fitness, each group its own column
        group_fitness.check_config(config)
        return group_fitness.evolve(config)
    if not config.plan.migrates:
        return lambda key, state, actor, fitness: es.generation(key, state, fitness, cfg)

    def evolve(key, state, actor, fitness):
        return migration.actor_generation(key, state, actor, fitness, cfg,
                                          migration.selector_mask(actor),
                                          config.selector_stage_rounds)
    return evolve


def _seed_devices(num_seeds: int) -> int:
    """The most devices (of ``jax.devices()``) that split ``num_seeds`` evenly."""
    return max(d for d in range(1, len(jax.devices()) + 1) if num_seeds % d == 0)


def seed_functions(config: TrainerConfig, core: SwarmEnv, num_seeds: int) -> SeedFunctions:
    """The seed-batched functions for ``config`` (cached by :func:`compile_key`). The
    train step is one sharded jit when the MAPPO update is fused (the seeds split over
    the devices that divide them, each seed's env copies over the devices left per seed:
    :func:`data_devices`); the split update (a CNN actor) is vmapped piece by piece, on
    one device."""
    fused = fused_update(config, core)
    devices = _seed_devices(num_seeds) if fused else 1  # the split update: one device
    data = data_devices(config, core, devices)
    key = compile_key(config, core, seeds=num_seeds, data=data)
    if key in _CACHE:
        return _CACHE[key]
    mcfg, eps = config.mappo, config.episodes
    params = config.es_params
    rollouts = make_population_rollouts(core, config.deterministic_eval,
                                        population_chunk(config), params)
    scored = _scored(config, core, rollouts)

    evolve = _evolve(config)

    def generation(key: jax.Array, state: es.ESState, actor: Any):
        def fitness(thetas: jax.Array, k: jax.Array) -> jax.Array:
            return scored(actor, thetas, jax.random.split(k, eps))[0].mean(axis=1)

        return evolve(key, state, actor, fitness)

    mesh = (sharding.population_mesh(jax.devices()[:devices], axis=sharding.SEED_AXIS)
            if devices > 1 else None)

    def batched(fn: Callable) -> Callable:
        fn = eqx.filter_vmap(fn)
        return eqx.filter_jit(fn if mesh is None else sharding.shard_batched(fn, mesh))

    # the step and its non-finite guard: one program with the fused update
    guarded_step = (batched(mappo.guarded(lambda ts: mappo.fused_train_step(core, ts, mcfg)))
                    if fused else mappo.guarded(
                        eqx.filter_vmap(mappo.make_train_step(core, mcfg, fused)),
                        batched(mappo.keep_finite)))
    if mesh is None:
        place = lambda tree: tree
    else:
        where = sharding.batch_sharding(mesh)
        place = lambda tree: jax.tree.map(
            lambda x: jax.device_put(x, where) if eqx.is_array(x) else x, tree)
    settle = _same
    if data > 1:  # seeds x devices: each seed's env copies split over `data` devices
        home = place if mesh is not None else sharding.committed
        guarded_step, settle = mappo.data_parallel_seeds_step(
            core, mcfg, jax.devices()[:devices * data], devices, home)
    fns = SeedFunctions(
        guarded_step=guarded_step, settle=settle,
        generation=batched(generation), returns=batched(rollouts),
        selector=batched(lambda actor: es_theta(actor, params)),
        with_selector=batched(lambda ts, th: ts._replace(actor=set_es_theta(ts.actor, th,
                                                                            params))),
        with_mean_selector=batched(lambda ts, th: ts._replace(
            actor=migration.with_mean_selector(ts.actor, th))),
        place=place, unstack=eqx.filter_jit(lambda tree: [
            jax.tree.map(lambda x, i=i: x[i], tree) for i in range(num_seeds)]),
        devices=devices)
    _CACHE[key] = fns
    return fns
