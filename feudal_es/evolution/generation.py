"""``tell`` and whole generations: ask, the population's fitness, tell.

A generation's fitness comes from one ``fitness_fn(population[P, D], key) -> [P]`` call
(typically a ``vmap`` over members of a ``lax.scan`` episode rollout), so the whole
population is one jitted program (:func:`generation`, :func:`make_generation`,
:func:`evolve`); or from a host loop (:func:`host_generation`: host envs, Ray, the
reference's per-member ``eval_fn``). Both draw the same candidates for the same key.
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

__all__ = ["FitnessFn", "ask_jit", "evolve", "generation", "host_generation", "host_info",
           "make_generation", "per_member", "tell", "tell_jit"]

FitnessFn = Callable[[jax.Array, jax.Array], jax.Array]
_UPDATES = {"nes": nes.update, "cem": cem.update, "ga": ga.update}


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


def generation(
    key: jax.Array, state: ESState, fitness_fn: FitnessFn, cfg: ESConfig,
    mask: jax.Array | None = None,
) -> tuple[ESState, dict[str, jax.Array]]:
    """One ES generation: ask, ``fitness_fn(population[P, D], key) -> [P]``, tell
    (``mask``: :func:`~feudal_es.evolution.state.ask`'s, the coordinates that move).

    ``fitness_fn`` receives ONE key per generation, so every member can see the same env
    seeds (common random numbers). Jit it with ``fitness_fn`` and ``cfg`` static (see
    :func:`make_generation`) or scan it (:func:`evolve`). The noise key is the same split
    :func:`host_generation` uses, so both produce the same ``theta_next`` for the same key
    and fitness.
    """
    key_ask, key_eval = jax.random.split(key)
    population, noise = ask(key_ask, state, cfg, mask)
    fitness = fitness_fn(population, key_eval)
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


def host_info(info: dict[str, Any]) -> dict[str, Any]:
    """A generation's info as Python scalars, in the reference's key layout."""
    return {
        "best_fitness": float(info["best_fitness"]),
        "mean_fitness": float(info["mean_fitness"]),
        "num_invalid": int(info["num_invalid"]),
        "sigma": float(info["sigma"]),
    }


def host_generation(
    key: jax.Array, state: ESState, fitness_fn: Callable[[jax.Array], Any], cfg: ESConfig
) -> tuple[ESState, dict[str, Any]]:
    """One generation whose fitness is computed outside JAX (the reference's loop path,
    host envs, Ray): :func:`ask_jit`, ``fitness_fn(population[P, D]) -> [P]``,
    :func:`tell_jit`. Same candidates and update as :func:`generation` for the same key
    and fitness. Raises ``FloatingPointError`` (state untouched) if no candidate has a
    finite fitness. ``info`` holds Python scalars."""
    population, noise = ask_jit(key, state, cfg)
    fitness = np.asarray(fitness_fn(population), np.float32).reshape(-1)
    if not np.isfinite(fitness).any():
        raise FloatingPointError(
            f"ES generation: all {fitness.size} candidates returned non-finite fitness "
            f"({fitness[:4].tolist()}...); refusing to update the parameters"
        )
    new_state, info = tell_jit(state, noise, jnp.asarray(fitness), cfg)
    return new_state, host_info(info)


def per_member(eval_fn: Callable[[jax.Array], float]) -> Callable[[jax.Array], np.ndarray]:
    """A population fitness from the reference's per-member ``eval_fn`` (a host loop)."""
    return lambda population: np.array(
        [float(eval_fn(population[i])) for i in range(population.shape[0])], np.float32)
