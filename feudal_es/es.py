"""Evolution Strategies for the feudal selector: the reference API over a pure core.

The selector (which skill each agent pursues) is small and its objective — whole-mission
team return — is sparse, so it is evolved by ES, while the large executor under it is
trained by gradient (CTDE-MAPPO). The two touch disjoint leaves of one actor and are
interleaved MERL-style by :func:`merl_coexist` (Khadka & Tumer 2019; Khadka et al. 2019).

This module is the reference ES API the user specified (the seed's ``es`` module): the
same names, signatures, defaults and semantics — :class:`ESConfig`, :func:`flatten`,
:func:`module_theta`, :func:`set_module_theta`, :func:`es_step` (a per-member ``eval_fn``
on the host) and :func:`merl_coexist` (a thin wrapper over the one MERL round,
:func:`feudal_es.loop.merl_round`). Underneath is the pure, jittable core of
:mod:`feudal_es.evolution` — :func:`init`, :func:`ask`, :func:`tell` and whole
generations (:func:`generation`, :func:`evolve`) that evaluate the population with one
``fitness_fn(thetas[P, D], key) -> fitness[P]`` call under a single ``jit`` — re-exported
here.

Estimators: ``kind='nes'`` is OpenAI-ES (Salimans et al. 2017): antithetic Gaussian
directions, centered-rank fitness shaping to ``[-0.5, 0.5]`` and the step
``θ ← θ + lr/(P·σ) · Σ_i f̃_i ε_i``. ``kind='cem'`` is the cross-entropy method of CEM-RL
(Pourchot & Sigaud 2019): the mean becomes the elite mean and σ shrinks to the elite std.
Fitness is maximized; non-finite fitness (NaN, ±inf) ranks last and is counted; tied
fitness shares its average rank, so a generation without a ranking (all tied, or all
non-finite) leaves the search distribution where it was.

Like the reference, this module and everything it imports use only jax / jax.numpy /
equinox / optax / numpy: no dependency on the networks or the environments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from feudal_es.evolution import (
    ESConfig,
    ESState,
    FitnessFn,
    ask,
    ask_jit,
    centered_rank,
    evolve,
    flatten,
    generation,
    host_generation,
    init,
    make_generation,
    module_theta,
    set_module_theta,
    tell,
    tell_jit,
)
from feudal_es.evolution.generation import host_info, per_member
from feudal_es.loop import EveryCandidateFailed, RoundFns, RoundState, merl_round

__all__ = [
    "ESConfig",
    "ESState",
    "FitnessFn",
    "ask",
    "ask_jit",
    "centered_rank",
    "es_step",
    "evolve",
    "flatten",
    "generation",
    "host_generation",
    "init",
    "make_generation",
    "merl_coexist",
    "module_theta",
    "set_module_theta",
    "tell",
    "tell_jit",
]


def es_step(
    theta: jax.Array, eval_fn: Callable[[jax.Array], float], es_cfg: ESConfig, key: jax.Array
) -> tuple[jax.Array, dict]:
    """One ES update of the mean parameter vector ``theta`` (reference API).

    Draws ``P = 2 * (pop_size // 2)`` antithetic candidates ``θ + σ·ε_i``, evaluates each
    with ``eval_fn(theta_i) -> float`` on the host (higher is better), then

    * ``kind='nes'``: ``θ ← θ + lr/(P·σ) · Σ_i f̃_i ε_i`` with centered ranks ``f̃`` in
      ``[-0.5, 0.5]``, minus ``lr·wd·θ`` when ``weight_decay`` is set; σ unchanged;
    * ``kind='cem'``: ``θ ← mean(elites)``; ``info['sigma']`` is the elite std (the
      shrunk σ; :func:`merl_coexist` and :func:`generation` apply it next generation).

    Returns ``(theta_next, info)`` with ``info['best_fitness']``, ``info['mean_fitness']``
    (over finite values), ``info['num_invalid']`` and ``info['sigma']`` (for CEM the
    shrunk elite std; for NES the unchanged σ).
    Raises ``FloatingPointError`` if no candidate has a finite fitness.
    """
    state, info = host_generation(key, init(theta, es_cfg), per_member(eval_fn), es_cfg)
    return state.mean, info


def merl_coexist(
    *,
    theta0: jax.Array,
    eval_fn: Callable[[jax.Array], float],
    gradient_step_fn: Callable[[Any], Any],
    sync_in: Callable[[Any, jax.Array], jax.Array],
    sync_out: Callable[[Any, jax.Array], Any],
    n_outer: int,
    grad_steps_per_outer: int,
    es_cfg: ESConfig,
    key: jax.Array,
    gstate0: Any = None,
    population_fn: FitnessFn | None = None,
    on_round: Callable[[int, Any, ESState, dict], None] | None = None,
    es_state0: ESState | None = None,
    generation_fn: Callable[[jax.Array, ESState, Any], tuple[ESState, dict]] | None = None,
) -> tuple[jax.Array, Any, list]:
    """The MERL interleave of gradient and ES on disjoint leaves (reference API).

    Each outer round is :func:`feudal_es.loop.merl_round`, in this order:
      (a) ``gstate = gradient_step_fn(gstate)``, ``grad_steps_per_outer`` times;
      (b) ``theta = sync_in(gstate, theta)`` — inject the gradient learner's selector
          into the ES mean;
      (c) one ES generation on ``theta`` by team fitness (``eval_fn`` per member, or the
          batched ``population_fn(thetas[P, D], key) -> [P]`` when given);
      (d) ``gstate = sync_out(gstate, theta)`` — write the evolved selector back.

    ``(outer, info)`` is appended to ``history``. The round keys are
    ``key, key_round = split(key)`` per round. The ES state's σ and optimizer state
    persist across rounds (so CEM's σ shrink and Adam's moments take effect; NES with
    the default ``'sgd'`` is exactly the reference). ``on_round(outer, gstate,
    es_state, info)``, if given, runs after each round (logging, checkpoints).

    Two optional extensions (defaults keep the reference behaviour):

    * ``es_state0`` — start from this :class:`ESState` instead of ``init(theta0, es_cfg)``
      (resume: σ, optimizer moments and the generation counter carry over; the mean is
      still replaced by ``sync_in`` at step (b));
    * ``generation_fn(key, es_state, gstate) -> (es_state, info)`` — a prebuilt batched
      generation (e.g. ``jit`` of :func:`generation` with the fitness reading the current
      executor out of ``gstate`` as an argument, so it is compiled once and never bakes a
      stale executor in as a constant). It takes precedence over ``population_fn``.

    Raises ``FloatingPointError`` (nothing written back) when every candidate of a
    generation has non-finite fitness. Returns ``(theta_final, gstate_final, history)``.
    """
    if generation_fn is not None:
        gen = generation_fn
    elif population_fn:
        batched = make_generation(population_fn, es_cfg)
        gen = lambda k, state, gstate: batched(k, state)
    else:
        gen = lambda k, state, gstate: host_generation(k, state, per_member(eval_fn), es_cfg)
    fns = RoundFns(num_candidates=es_cfg.num_candidates,
                   grad_steps=int(grad_steps_per_outer),
                   step=lambda gstate: (gradient_step_fn(gstate), None),
                   sync_in=sync_in, generation=gen, sync_out=sync_out)
    state = RoundState(gstate0, init(theta0, es_cfg) if es_state0 is None else es_state0)
    history: list = []
    for outer in range(int(n_outer)):
        key, key_round = jax.random.split(key)
        try:
            state, out = merl_round(fns, state, key_round)
        except EveryCandidateFailed:
            raise FloatingPointError(
                f"ES round {outer}: every candidate returned non-finite fitness") from None
        info = host_info(out.info)
        history.append((outer, info))
        if on_round is not None:
            on_round(outer, state.learner, state.es, info)
    return state.es.mean, state.learner, history
