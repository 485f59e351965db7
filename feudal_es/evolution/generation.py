"""``tell`` and whole generations: ask, the population's fitness, tell.

A generation's fitness comes from one ``fitness_fn(population[P, D], key) -> [P]`` call
(typically a ``vmap`` over members of a ``lax.scan`` episode rollout), so the whole
population is one jitted program (:func:`generation`, :func:`make_generation`,
:func:`evolve`); or from a host loop (:func:`host_generation`: host envs, Ray, the
reference's per-member ``eval_fn``). Both draw the same candidates for the same key.

Groups that each train on their own fitness (``TrainerConfig.others="train"``): the
fitness is ``[P, G]``, one column per group, and :func:`tell_groups` moves each group's
coordinates of θ with its own column (``coord_group[D]``: the group of each coordinate).
That is one :func:`tell` per group, exactly, for the updates that are separable per
coordinate (:data:`GROUP_KINDS`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from feudal_es.evolution import cem, evosax_kind, ga, nes
from feudal_es.evolution.config import ESConfig
from feudal_es.evolution.state import ESState, ask

__all__ = ["GROUP_KINDS", "FitnessFn", "ask_jit", "check_group_kind", "evolve", "generation",
           "host_generation", "host_info", "make_generation", "per_member", "tell",
           "tell_groups", "tell_groups_jit", "tell_jit"]

FitnessFn = Callable[[jax.Array, jax.Array], jax.Array]
_UPDATES = {"nes": nes.update, "cem": cem.update, "ga": ga.update}
# the kinds whose update of a coordinate reads only that coordinate's noise, mean and
# optimizer moments, and the fitness (NES, with 'sgd' or 'adam'): per-group fitness
# (tell_groups) needs them. CEM and the evosax strategies share σ (and elites, or a
# covariance) over every coordinate, the GA whole candidates.
GROUP_KINDS = ("nes",)


def tell(
    state: ESState, noise: jax.Array, fitness: jax.Array, cfg: ESConfig
) -> tuple[ESState, dict[str, jax.Array]]:
    """Update the search distribution from the candidates' fitness (pure, jittable).

    ``noise`` is the one :func:`~feudal_es.evolution.state.ask` returned; ``fitness[P]``
    is maximized. A generation that ranks nothing — every candidate tied, or every
    candidate non-finite (``info['num_invalid'] == P``) — returns the state unchanged but
    for the generation count: no step, no weight decay, no optimizer-moment update, no σ
    change. The GA (``kind='ga'``) is the exception for ties: a population of equals
    still selects and mutates (only an all non-finite generation is skipped).
    """
    fitness = jnp.asarray(fitness, jnp.float32)
    valid = jnp.isfinite(fitness)
    ranked = jnp.where(valid, fitness, -jnp.inf)
    informative = jnp.max(ranked) > jnp.min(ranked)  # some candidate beats another
    if cfg.kind == "ga":
        informative = jnp.any(valid)
    info = {
        "best_fitness": jnp.max(ranked),
        "mean_fitness": jnp.sum(jnp.where(valid, fitness, 0.0)) / jnp.maximum(valid.sum(), 1),
        "num_invalid": jnp.sum(~valid).astype(jnp.int32),
    }
    update = evosax_kind.update if cfg.is_evosax else _UPDATES[cfg.kind]
    mean, sigma, opt_state = update(state, noise, fitness, cfg)
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(informative, a, b), new, old)
    new_state = ESState(
        mean=keep(mean, state.mean),
        sigma=keep(sigma, state.sigma),
        opt_state=keep(opt_state, state.opt_state),
        generation=state.generation + 1,
    )
    info["sigma"] = new_state.sigma
    return new_state, info


def check_group_kind(cfg: ESConfig, where: str = "per-group fitness") -> None:
    """``ValueError`` unless ``cfg.kind`` is separable per coordinate
    (:data:`GROUP_KINDS`), as :func:`tell_groups` needs; ``where`` names what asks."""
    if cfg.is_evosax or cfg.kind not in GROUP_KINDS:
        raise ValueError(
            f"{where} moves each group's coordinates of the ES mean with that group's own "
            f"fitness, which needs an ES update separable per coordinate: es.kind "
            f"{list(GROUP_KINDS)} (optimizer 'sgd' or 'adam'); got es.kind={cfg.kind!r}, "
            "whose update shares its step size (and elites, covariance or whole "
            "candidates) over every coordinate")


def _group_leaf(d: int, coord_group: jax.Array, *leaves: jax.Array) -> jax.Array:
    """One state leaf out of every group's :func:`tell`: a per-coordinate leaf ``[D]``
    takes coordinate ``i`` from group ``coord_group[i]``'s; a scalar (Adam's step count)
    the largest (a step was taken if any group's column was informative)."""
    first = leaves[0]
    if first.shape == (d,):
        return jnp.stack(leaves)[coord_group, jnp.arange(d)]
    if first.ndim == 0:
        return functools.reduce(jnp.maximum, leaves)
    raise ValueError(f"tell_groups: an ES state leaf of shape {first.shape} is neither "
                     f"per coordinate ({d},) nor a scalar; the update is not separable")


def tell_groups(
    state: ESState, noise: jax.Array, fitness: jax.Array, cfg: ESConfig,
    coord_group: jax.Array, report: int = 0,
) -> tuple[ESState, dict[str, jax.Array]]:
    """:func:`tell` with one fitness column per group (pure, jittable).

    ``fitness[P, G]``: column ``g`` is group ``g``'s fitness of the candidates;
    ``coord_group[D]`` (ints in ``[0, G)``): the group each coordinate of θ belongs to.
    Each group's coordinates of the new mean and of every per-coordinate optimizer-state
    leaf are exactly those of ``tell(state, noise, fitness[:, g], cfg)``, so each group
    ascends its own fitness; a group whose column ranks nothing (tied, or all
    non-finite) keeps its coordinates where they were. Scalar optimizer leaves (Adam's
    step count) take the largest over the groups. Only the kinds of
    :data:`GROUP_KINDS` qualify (``ValueError`` otherwise). ``info`` is column
    ``report``'s (the named team's: the run's team fitness).
    """
    check_group_kind(cfg)
    fitness = jnp.asarray(fitness, jnp.float32)
    if fitness.ndim != 2:
        raise ValueError(f"tell_groups: fitness must be [P, G], got shape {fitness.shape}")
    told = [tell(state, noise, fitness[:, g], cfg) for g in range(fitness.shape[1])]
    d = state.mean.shape[0]
    coord_group = jnp.asarray(coord_group, jnp.int32)
    pick = functools.partial(_group_leaf, d, coord_group)
    new_state = ESState(
        mean=pick(*[s.mean for s, _ in told]),
        sigma=told[report][0].sigma,
        opt_state=jax.tree.map(pick, *[s.opt_state for s, _ in told]),
        generation=state.generation + 1,
    )
    return new_state, told[report][1]


def generation(
    key: jax.Array, state: ESState, fitness_fn: FitnessFn, cfg: ESConfig,
    mask: jax.Array | None = None, coord_group: jax.Array | None = None, report: int = 0,
) -> tuple[ESState, dict[str, jax.Array]]:
    """One ES generation: ask, ``fitness_fn(population[P, D], key) -> [P]``, tell
    (``mask``: :func:`~feudal_es.evolution.state.ask`'s, the coordinates that move).
    With ``coord_group`` the fitness is ``[P, G]`` and the tell is :func:`tell_groups`
    (``report``: the column ``info`` describes).

    ``fitness_fn`` receives ONE key per generation, so every member can see the same env
    seeds (common random numbers). Jit it with ``fitness_fn`` and ``cfg`` static (see
    :func:`make_generation`) or scan it (:func:`evolve`). The noise key is the same split
    :func:`host_generation` uses, so both produce the same ``theta_next`` for the same key
    and fitness.
    """
    key_ask, key_eval = jax.random.split(key)
    population, noise = ask(key_ask, state, cfg, mask)
    fitness = fitness_fn(population, key_eval)
    if coord_group is not None:
        return tell_groups(state, noise, fitness, cfg, coord_group, report)
    return tell(state, noise, fitness, cfg)


def make_generation(
    fitness_fn: FitnessFn, cfg: ESConfig
) -> Callable[[jax.Array, ESState], tuple[ESState, dict[str, jax.Array]]]:
    """``generation`` closed over ``fitness_fn`` and ``cfg`` and jitted once."""
    return jax.jit(lambda key, state: generation(key, state, fitness_fn, cfg))


def evolve(
    key: jax.Array, state: ESState, fitness_fn: FitnessFn, cfg: ESConfig, num_generations: int
) -> tuple[ESState, dict[str, jax.Array]]:
    """``num_generations`` generations in one ``lax.scan``; info is stacked per generation."""

    def body(state: ESState, key: jax.Array):
        return generation(key, state, fitness_fn, cfg)

    return jax.lax.scan(body, state, jax.random.split(key, num_generations))


@functools.partial(jax.jit, static_argnames="cfg")
def ask_jit(key: jax.Array, state: ESState, cfg: ESConfig) -> tuple[jax.Array, jax.Array]:
    """Jitted ``ask`` with the key split :func:`generation` uses (its first half)."""
    return ask(jax.random.split(key)[0], state, cfg)


tell_jit = jax.jit(tell, static_argnames="cfg")
tell_jit.__doc__ = "Jitted :func:`tell` (``cfg`` static)."
tell_groups_jit = jax.jit(tell_groups, static_argnames=("cfg", "report"))
tell_groups_jit.__doc__ = "Jitted :func:`tell_groups` (``cfg`` and ``report`` static)."


def host_info(info: dict[str, Any]) -> dict[str, Any]:
    """A generation's info as Python scalars, in the reference's key layout."""
    return {
        "best_fitness": float(info["best_fitness"]),
        "mean_fitness": float(info["mean_fitness"]),
        "num_invalid": int(info["num_invalid"]),
        "sigma": float(info["sigma"]),
    }


def host_generation(
    key: jax.Array, state: ESState, fitness_fn: Callable[[jax.Array], Any], cfg: ESConfig,
    coord_group: np.ndarray | None = None, report: int = 0,
) -> tuple[ESState, dict[str, Any]]:
    """One generation whose fitness is computed outside JAX (the reference's loop path,
    host envs, Ray): :func:`ask_jit`, ``fitness_fn(population[P, D]) -> [P]``,
    :func:`tell_jit`. Same candidates and update as :func:`generation` for the same key
    and fitness. Raises ``FloatingPointError`` (state untouched) if no candidate has a
    finite fitness. ``info`` holds Python scalars. With ``coord_group`` (per-group
    fitness) ``fitness_fn`` returns ``[P, G]`` and the tell is :func:`tell_groups_jit`;
    column ``report`` (the team's) is the one that must have a finite value."""
    population, noise = ask_jit(key, state, cfg)
    fitness = np.asarray(fitness_fn(population), np.float32)
    fitness = fitness.reshape(-1) if coord_group is None else fitness.reshape(
        fitness.shape[0], -1)
    ranked = fitness if coord_group is None else fitness[:, report]
    if not np.isfinite(ranked).any():
        raise FloatingPointError(
            f"ES generation: all {ranked.size} candidates returned non-finite fitness "
            f"({ranked[:4].tolist()}...); refusing to update the parameters"
        )
    if coord_group is None:
        new_state, info = tell_jit(state, noise, jnp.asarray(fitness), cfg)
    else:
        new_state, info = tell_groups_jit(state, noise, jnp.asarray(fitness), cfg,
                                          jnp.asarray(coord_group, jnp.int32), report)
    return new_state, host_info(info)


def per_member(eval_fn: Callable[[jax.Array], float]) -> Callable[[jax.Array], np.ndarray]:
    """A population fitness from the reference's per-member ``eval_fn`` (a host loop)."""
    return lambda population: np.array(
        [float(eval_fn(population[i])) for i in range(population.shape[0])], np.float32)
