"""Centered-rank fitness shaping (OpenAI-ES), safe for ties and non-finite fitness."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["centered_rank"]


def centered_rank(fitness: jax.Array) -> jax.Array:
    """Centered ranks in ``[-0.5, 0.5]`` (best = 0.5); non-finite values rank last.

    Tied values share the average of their ranks (``rankdata(method="average")``), so a
    tie carries no signal: a tied antithetic pair ``+ε, -ε`` contributes nothing to the
    NES step, and an all-tied generation shapes every candidate to 0. Team fitness is
    often discrete (targets found: 0, 1, 2, ...), so ties are common; breaking them by
    index would make ``ask``'s second half (``-ε``) win every tie and walk the mean along
    ``-Σε`` exactly when there is no signal. For distinct values the result is
    bit-identical to the plain ``i / (P - 1) - 0.5`` of the ``i``-th smallest.
    """
    num = fitness.shape[0]
    fitness = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
    _, ascending = jax.lax.top_k(-fitness, num)  # one top_k: cheaper than argsort on CPU
    ranks = jnp.arange(num, dtype=jnp.float32) / (num - 1) - 0.5
    by_index = jnp.zeros(num, jnp.float32).at[ascending].set(ranks, unique_indices=True)
    # a tie group holds ranks below..upto-1; centered ranks are linear in the rank, so the
    # group's mean is the mean of its two ends. Only tied members take it: untied ones keep
    # the by-index value bit for bit.
    below = jnp.searchsorted(fitness[ascending], fitness, side="left")
    upto = jnp.searchsorted(fitness[ascending], fitness, side="right")
    return jnp.where(upto - below > 1, (ranks[below] + ranks[upto - 1]) / 2, by_index)
