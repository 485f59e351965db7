"""The cross-entropy method of CEM-RL (Pourchot & Sigaud 2019): elite mean, σ shrink."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from feudal_es.evolution.config import ESConfig
from feudal_es.evolution.state import ESState

__all__ = ["update"]


def update(state: ESState, noise: jax.Array, fitness: jax.Array, cfg: ESConfig
           ) -> tuple[jax.Array, jax.Array, optax.OptState]:
    """``(mean, sigma, opt_state)``: the mean of the ``num_elites`` best candidates and
    their std (averaged over dimensions) as the next σ; non-finite fitness ranks last.
    Among equal fitness at the elite boundary the later candidate is kept, as in an
    ascending sort's tail (the reference's elite choice)."""
    num = noise.shape[0]
    ranked = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
    elite_idx = num - 1 - jax.lax.top_k(ranked[::-1], cfg.num_elites)[1]
    elites = state.mean[None, :] + state.sigma * noise[elite_idx]
    sigma = jnp.mean(jnp.std(elites, axis=0)) if cfg.num_elites > 1 else state.sigma
    return jnp.mean(elites, axis=0), sigma, state.opt_state
