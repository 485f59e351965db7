"""A genetic algorithm as an ES kind (``ESConfig(kind="ga")``): MERL's SSNE (Khadka et al.
2019, ``core/neuroevolution.py`` of ShawK91/MERL) on a flat parameter vector, vectorized.

The population is the last generation's candidates with their fitness
(:class:`GAState`, in ``ESState.opt_state``); ``ESState.mean`` is its best member, the
elite the loop reports, migrates into and syncs. A generation:

- ask: the ``E = ESConfig.num_elites`` best members of the population are kept unchanged
  (re-evaluated on new episodes, as MERL does); each of the other ``P - E`` candidates is
  a child of two parents chosen by tournaments of :data:`TOURNAMENT` (MERL's size 3),
  uniform crossover with probability ``ESConfig.crossover_prob`` (else a copy of the first
  parent), then Gaussian mutation ``sigma * N(0, I)`` of every coordinate. If the loop
  moved the mean away from the best member (a learner migrated in, or synced), the last
  child is replaced by the mean: MERL's inheritance of the gradient learner into the
  population, which keeps its elites. ``mask`` holds the other coordinates at the mean.
- tell: the candidates and their fitness become the population; the mean becomes the
  best candidate (non-finite fitness ranks last; among ties the lowest index, so an elite
  stays the mean when a child only ties it). A generation whose fitness is all tied still
  moves the population (selection among equals, mutation goes on), as a GA does.

Where this differs from SSNE: a flat vector has no layers, so crossover swaps single
coordinates (uniform) rather than weight-matrix rows; mutation is additive Gaussian on
every coordinate rather than SSNE's sparse multiplicative one with super-mutations and
resets, and no weight clamp. Its state rides in checkpoints like any kind's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["TOURNAMENT", "GAState", "ask", "init", "update"]

TOURNAMENT = 3  # MERL's tournament size


class GAState(NamedTuple):
    """The evaluated population: candidates ``[P, D]`` and their fitness ``[P]``."""

    population: jax.Array
    fitness: jax.Array


def init(mean: jax.Array, cfg: Any) -> GAState:
    """A population of ``P`` copies of ``mean``, not yet evaluated (fitness ``-inf``): the
    first ``ask`` keeps ``E`` copies and mutates the rest."""
    p = cfg.num_candidates
    return GAState(jnp.broadcast_to(mean, (p, mean.shape[0])).astype(jnp.float32),
                   jnp.full((p,), -jnp.inf, jnp.float32))


def _order(fitness: jax.Array) -> jax.Array:
    """Indices from best to worst; non-finite last; ties by lowest index (stable)."""
    ranked = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
    return jnp.argsort(-ranked, stable=True)


def _tournament(key: jax.Array, rank: jax.Array, n: int) -> jax.Array:
    """``n`` winners (population indices): each the best-ranked of TOURNAMENT draws."""
    draws = jax.random.randint(key, (n, TOURNAMENT), 0, rank.shape[0])
    return rank[jnp.min(draws, axis=1)]


def ask(key: jax.Array, state: Any, cfg: Any, mask: jax.Array | None = None
        ) -> tuple[jax.Array, jax.Array]:
    """``(candidates[P, D], candidates[P, D])`` (the loop's ``(population, noise)``;
    :func:`update` reads the candidates themselves)."""
    ga: GAState = state.opt_state
    p, d = ga.population.shape
    e = min(cfg.num_elites, p - 1)
    k_a, k_b, k_cross, k_coin, k_mut = jax.random.split(key, 5)
    rank = _order(ga.fitness)
    elites = ga.population[rank[:e]]
    a = ga.population[_tournament(k_a, rank, p - e)]
    b = ga.population[_tournament(k_b, rank, p - e)]
    swap = jax.random.bernoulli(k_cross, 0.5, (p - e, d))
    cross = jax.random.bernoulli(k_coin, cfg.crossover_prob, (p - e, 1))
    children = jnp.where(cross & swap, b, a)
    children = children + state.sigma * jax.random.normal(k_mut, (p - e, d), jnp.float32)
    moved = jnp.any(state.mean != ga.population[rank[0]])
    children = children.at[-1].set(jnp.where(moved, state.mean, children[-1]))
    candidates = jnp.concatenate([elites, children], axis=0)
    if mask is not None:
        candidates = jnp.where(jnp.asarray(mask) > 0, candidates, state.mean[None, :])
    return candidates, candidates


def update(state: Any, candidates: jax.Array, fitness: jax.Array, cfg: Any
           ) -> tuple[jax.Array, jax.Array, GAState]:
    """``(mean, sigma, GAState)``: the evaluated candidates become the population and the
    best of them the mean; ``sigma`` (the mutation scale) is constant."""
    fitness = jnp.asarray(fitness, jnp.float32)
    best = _order(fitness)[0]
    return candidates[best], state.sigma, GAState(candidates, fitness)
