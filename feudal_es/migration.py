"""Team fitness that reaches the executor: whole-actor ES with the gradient learner
migrated into it (MERL's own design, Khadka et al. 2019, section 4).

Mode ``merl`` evolves only the selector, so team fitness never shapes the executor. Mode
``merl-actor`` evolves the *whole* actor on team fitness and feeds it the MAPPO learner:

* **stage 1** (the first ``TrainerConfig.selector_stage_rounds`` generations): the
  ``merl`` round, written on the whole-actor θ: the mean's executor coordinates are the
  learner's (MERL's inject) and the noise is masked to the selector's coordinates, so
  only the selector moves;
* **stage 2**: elitist migration, then whole-actor ES. The mean and the learner's actor
  are scored on the same team-fitness episodes; the mean *becomes* the learner's actor
  only when the learner scores higher. Every coordinate moves.

The learner keeps training from its own parameters: only the mean's selector is written
back into it (the options it practises are the evolved selector's); its executor is never
overwritten by ES. The run's result is the ES mean (its whole actor).

Stage 1 with ``selector_stage_rounds`` at least the run's length is mode ``merl``; stage
2 from round 0 is MERL's migration. Pure JAX (no Python loop over members): one jitted
generation per round, as every other mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp

from feudal_es.evolution.config import ESConfig
from feudal_es.evolution.generation import generation
from feudal_es.evolution.state import ESState
from feudal_es.theta import es_theta, set_es_theta, theta_size

__all__ = ["actor_generation", "migration_env_steps", "selector_mask", "with_mean_selector"]

M = TypeVar("M", bound=eqx.Module)

# candidates scored for the elitist comparison each round: the mean and the learner
MIGRATION_CANDIDATES = 2


def selector_mask(actor: eqx.Module) -> jax.Array:
    """``[D]`` float32 over the whole-actor θ (:func:`~feudal_es.theta.es_theta` with
    ``"actor"``): 1 on the selector's coordinates, 0 on every other."""
    zeros = set_es_theta(actor, jnp.zeros(theta_size(actor, "actor"), jnp.float32), "actor")
    ones = set_es_theta(zeros, jnp.ones(theta_size(actor, "selector"), jnp.float32))
    return es_theta(ones, "actor").astype(jnp.float32)


def with_mean_selector(actor: M, mean: jax.Array) -> M:
    """``actor`` with its selector's leaves taken from the whole-actor θ ``mean``; every
    other leaf (the learner's executor) is the same object."""
    evolved = set_es_theta(actor, mean, "actor")
    return set_es_theta(actor, es_theta(evolved, "selector"))


def migration_env_steps(episodes: int, max_steps: int) -> int:
    """Env steps the elitist comparison spends each round (the mean and the learner, on
    ``episodes`` episodes each)."""
    return MIGRATION_CANDIDATES * episodes * max_steps


def actor_generation(key: jax.Array, state: ESState, actor: eqx.Module,
                     fitness: Callable[[jax.Array, jax.Array], jax.Array], cfg: ESConfig,
                     mask: jax.Array, stage_rounds: int) -> tuple[ESState, dict[str, Any]]:
    """One ``merl-actor`` generation (see the module docstring) with the learner's
    ``actor``; ``fitness(thetas[P, D], key) -> [P]`` is the team fitness ES uses and
    ``mask`` is :func:`selector_mask`. The stage is read from ``state.generation``.

    ``info`` adds to the generation's: ``migrated`` (1.0 when the mean became the
    learner's actor this round), ``learner_fitness`` and ``incumbent_fitness`` (the two
    scores of the comparison, on the same episodes).
    """
    k_cmp, k_gen = jax.random.split(key)
    learner = es_theta(actor, "actor").astype(jnp.float32)
    first = state.generation < stage_rounds
    scores = fitness(jnp.stack([state.mean, learner]), k_cmp)
    better = scores[1] > scores[0]  # a tie or a non-finite learner keeps the mean
    migrated = ~first & better
    injected = jnp.where(mask > 0, state.mean, learner)  # stage 1: MERL's inject
    mean = jnp.where(first, injected, jnp.where(migrated, learner, state.mean))
    moving = jnp.where(first, mask, jnp.ones_like(mask))
    new_state, info = generation(k_gen, state._replace(mean=mean), fitness, cfg, moving)
    info = {**info, "migrated": migrated.astype(jnp.float32),
            "learner_fitness": scores[1], "incumbent_fitness": scores[0]}
    return new_state, info
