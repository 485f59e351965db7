"""OpenAI-ES (Salimans et al. 2017): the rank-shaped antithetic gradient step of the mean."""

from __future__ import annotations

import jax
import optax

from feudal_es.evolution.config import ESConfig
from feudal_es.evolution.ranks import centered_rank
from feudal_es.evolution.state import ESState, mean_optimizer

__all__ = ["update"]


def update(state: ESState, noise: jax.Array, fitness: jax.Array, cfg: ESConfig
           ) -> tuple[jax.Array, jax.Array, optax.OptState]:
    """``(mean, sigma, opt_state)`` after one NES step: ``θ + lr/(P·σ) · Σ f̃_i ε_i``
    (minus ``lr·wd·θ``) with the plain ``'sgd'`` optimizer, or that gradient estimate
    fed to Adam; σ unchanged. ``fitness[P]`` is float32, maximized."""
    shaped = centered_rank(fitness)
    grad = (shaped @ noise) / (noise.shape[0] * state.sigma)
    # optax minimizes: feed the negative ascent direction plus the L2 term, so that
    # sgd gives exactly θ + lr·grad − lr·wd·θ (the reference step).
    descent = -grad + cfg.weight_decay * state.mean if cfg.weight_decay else -grad
    updates, opt_state = mean_optimizer(cfg).update(descent, state.opt_state, state.mean)
    return optax.apply_updates(state.mean, updates), state.sigma, opt_state
