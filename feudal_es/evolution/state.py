"""The search distribution a run threads between generations, and sampling from it."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from feudal_es.evolution.config import ESConfig

__all__ = ["ESState", "ask", "init", "mean_optimizer"]


class ESState(NamedTuple):
    """What a run threads from one generation to the next."""

    mean: jax.Array  # [D] float32, the search distribution's centre θ
    sigma: jax.Array  # [] float32, current perturbation std (CEM shrinks it)
    opt_state: optax.OptState  # state of the NES mean optimizer (empty for 'sgd'), the
    # GA's population (kind 'ga') or an evosax strategy's state (kind 'evosax:...')
    generation: jax.Array  # [] int32, generations told so far


def mean_optimizer(cfg: ESConfig) -> optax.GradientTransformation:
    """How the NES gradient estimate moves the mean (``ESConfig.optimizer``)."""
    if cfg.optimizer == "adam":
        return optax.adam(cfg.lr)
    return optax.sgd(cfg.lr)


def init(theta: jax.Array, cfg: ESConfig, sigma: float | None = None) -> ESState:
    """A fresh ES state centred on ``theta`` with ``sigma`` (default ``cfg.sigma``)."""
    mean = jnp.asarray(theta, jnp.float32)
    if mean.ndim != 1:
        raise ValueError(f"ES mean must be a 1-D vector, got shape {mean.shape}")
    sigma = cfg.sigma if sigma is None else sigma
    if cfg.is_evosax:  # the evosax state rides in opt_state (see evosax_kind)
        from feudal_es.evolution import evosax_kind

        opt_state = evosax_kind.init(mean, cfg)
    elif cfg.kind == "ga":  # the evaluated population rides in opt_state (see ga)
        from feudal_es.evolution import ga

        opt_state = ga.init(mean, cfg)
    else:
        opt_state = mean_optimizer(cfg).init(mean)
    return ESState(
        mean=mean,
        sigma=jnp.asarray(sigma, jnp.float32),
        opt_state=opt_state,
        generation=jnp.zeros((), jnp.int32),
    )


def ask(key: jax.Array, state: ESState, cfg: ESConfig, mask: jax.Array | None = None
        ) -> tuple[jax.Array, jax.Array]:
    """Sample the antithetic population: ``(population[P, D], noise[P, D])``.

    ``noise = [ε; -ε]`` with ``ε ~ N(0, I)`` of shape ``[P/2, D]``, so row ``i`` and row
    ``i + P/2`` are exact negatives; ``population = mean + sigma * noise``. ``mask[D]``
    (0 or 1) zeroes the noise of the coordinates it holds at 0: every candidate keeps
    the mean's value there and the update's gradient estimate is exactly 0 there (ES on
    a subset of θ, e.g. the selector's coordinates of a whole-actor θ).
    """
    if cfg.is_evosax:
        from feudal_es.evolution import evosax_kind

        return evosax_kind.ask(key, state, cfg, mask)
    if cfg.kind == "ga":
        from feudal_es.evolution import ga

        return ga.ask(key, state, cfg, mask)
    half = cfg.num_candidates // 2
    eps = jax.random.normal(key, (half, state.mean.shape[0]), jnp.float32)
    if mask is not None:
        eps = eps * jnp.asarray(mask, jnp.float32)
    noise = jnp.concatenate([eps, -eps], axis=0)
    return state.mean[None, :] + state.sigma * noise, noise
