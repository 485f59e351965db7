"""Evolution Strategies for the feudal selector: the reference API over a pure, jittable core.

The selector (which skill each agent pursues) is small and its objective — whole-mission
team return — is sparse, so it is evolved by ES, while the large executor under it is
trained by gradient (CTDE-MAPPO). The two touch disjoint leaves of one actor and are
interleaved MERL-style by :func:`merl_coexist` (Khadka & Tumer 2019; Khadka et al. 2019).

Two layers live here:

* the user's reference API, same names, signatures, defaults and semantics —
  :class:`ESConfig`, :func:`flatten`, :func:`module_theta`, :func:`set_module_theta`,
  :func:`es_step` (per-member ``eval_fn`` on the host) and :func:`merl_coexist`;
* underneath, a pure core — :func:`init`, :func:`ask`, :func:`tell` — and a batched
  generation (:func:`generation`, :func:`evolve`) that evaluates the whole population
  with one ``fitness_fn(thetas[P, D], key) -> fitness[P]`` call under a single ``jit``.

Estimators: ``kind='nes'`` is OpenAI-ES (Salimans et al. 2017): antithetic Gaussian
directions, centered-rank fitness shaping to ``[-0.5, 0.5]`` and the step
``θ ← θ + lr/(P·σ) · Σ_i f̃_i ε_i``. ``kind='cem'`` is the cross-entropy method of CEM-RL
(Pourchot & Sigaud 2019): the mean becomes the elite mean and σ shrinks to the elite std.
Fitness is maximized; non-finite fitness (NaN, ±inf) ranks last and is counted; tied
fitness shares its average rank, so a generation without a ranking (all tied, or all
non-finite) leaves the search distribution where it was.

This module imports only jax / jax.numpy / equinox / optax / numpy, so it stays
import-safe and free of any dependency on the networks or the environments.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

__all__ = [
    "ESConfig",
    "ESState",
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

_KINDS = ("nes", "cem")
_OPTIMIZERS = ("sgd", "adam")


# ---------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ESConfig:
    """Hyper-parameters of the ES step and the coexistence loop (frozen, validated).

    Attributes:
      pop_size: population size; with antithetic sampling ``2 * (pop_size // 2)``
        candidates are evaluated per generation.
      sigma: Gaussian perturbation std (search radius around the mean θ).
      lr: NES learning rate (``kind='nes'`` only).
      kind: ``'nes'`` (OpenAI-ES, rank-shaped gradient estimate) or ``'cem'`` (elite mean
        and σ shrink).
      elite_frac: fraction of the candidates kept as elites (``kind='cem'`` only), in (0, 1].
      weight_decay: L2 pull of θ toward 0 added to the NES step (``-lr·wd·θ``); 0 disables.
      optimizer: how the NES gradient estimate moves the mean: ``'sgd'`` is the plain
        reference step; ``'adam'`` uses ``optax.adam(lr)`` as in most ES practice (its
        moments persist only where the ES state is threaded: :func:`generation`,
        :func:`evolve`, :func:`merl_coexist`).
    """

    pop_size: int = 16
    sigma: float = 0.05
    lr: float = 0.05
    kind: str = "nes"
    elite_frac: float = 0.25
    weight_decay: float = 0.0
    optimizer: str = "sgd"

    def __post_init__(self) -> None:
        _check_int("pop_size", self.pop_size, minimum=2)
        _check_real("sigma", self.sigma, positive=True)
        _check_real("lr", self.lr, positive=True)
        _check_real("weight_decay", self.weight_decay, positive=False)
        _check_real("elite_frac", self.elite_frac, positive=True)
        if self.elite_frac > 1.0:
            raise ValueError(f"ESConfig.elite_frac must be in (0, 1], got {self.elite_frac}")
        if self.kind not in _KINDS:
            raise ValueError(f"ESConfig.kind must be one of {_KINDS}, got {self.kind!r}")
        if self.optimizer not in _OPTIMIZERS:
            raise ValueError(
                f"ESConfig.optimizer must be one of {_OPTIMIZERS}, got {self.optimizer!r}"
            )

    @property
    def num_candidates(self) -> int:
        """``P = 2 * (pop_size // 2)``: the antithetic population actually evaluated."""
        return 2 * max(1, self.pop_size // 2)

    @property
    def num_elites(self) -> int:
        """Elites kept by CEM: ``max(1, round(elite_frac * P))``."""
        return max(1, round(self.elite_frac * self.num_candidates))


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"ESConfig.{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"ESConfig.{name} must be >= {minimum}, got {value}")


def _check_real(name: str, value: Any, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"ESConfig.{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f"ESConfig.{name} must be finite and {'> 0' if positive else '>= 0'}, got {value}"
        )


# ---------------------------------------------------------------------------------------
# parameter vectors
# ---------------------------------------------------------------------------------------
def flatten(pytree: Any) -> tuple[jax.Array, Callable[[jax.Array], Any]]:
    """Ravel any pytree to a 1-D vector; return ``(theta, unflatten)``.

    A thin wrapper over :func:`jax.flatten_util.ravel_pytree` (leaves in tree order), so
    the ES core only ever sees flat vectors.
    """
    return ravel_pytree(pytree)


def module_theta(module: eqx.Module) -> jax.Array:
    """The inexact-array (float/complex) leaves of ``module`` as one 1-D vector.

    Integer/bool leaves, static fields and callables are left out, exactly the leaf set
    ``eqx.is_inexact_array`` selects — the set gradient and ES both act on.
    """
    params, _ = eqx.partition(module, eqx.is_inexact_array)
    return ravel_pytree(params)[0]


def set_module_theta(module: eqx.Module, theta: jax.Array) -> eqx.Module:
    """A copy of ``module`` with its inexact-array leaves replaced by ``theta``.

    The inverse of :func:`module_theta`: ``set_module_theta(m, module_theta(m))`` has
    identical leaves to ``m``; every non-float leaf is passed through untouched.
    """
    params, static = eqx.partition(module, eqx.is_inexact_array)
    flat, unflatten = ravel_pytree(params)
    theta = jnp.asarray(theta)
    if theta.shape != flat.shape:
        raise ValueError(
            f"set_module_theta: theta has shape {theta.shape}, the module has "
            f"{flat.shape[0]} inexact parameters"
        )
    return eqx.combine(unflatten(theta), static)


# ---------------------------------------------------------------------------------------
# pure core: init / ask / tell
# ---------------------------------------------------------------------------------------
class ESState(NamedTuple):
    """What a run threads from one generation to the next."""

    mean: jax.Array  # [D] float32, the search distribution's centre θ
    sigma: jax.Array  # [] float32, current perturbation std (CEM shrinks it)
    opt_state: optax.OptState  # state of the NES mean optimizer (empty for 'sgd')
    generation: jax.Array  # [] int32, generations told so far


def _mean_optimizer(cfg: ESConfig) -> optax.GradientTransformation:
    if cfg.optimizer == "adam":
        return optax.adam(cfg.lr)
    return optax.sgd(cfg.lr)


def init(theta: jax.Array, cfg: ESConfig, sigma: float | None = None) -> ESState:
    """A fresh ES state centred on ``theta`` with ``sigma`` (default ``cfg.sigma``)."""
    mean = jnp.asarray(theta, jnp.float32)
    if mean.ndim != 1:
        raise ValueError(f"ES mean must be a 1-D vector, got shape {mean.shape}")
    sigma = cfg.sigma if sigma is None else sigma
    return ESState(
        mean=mean,
        sigma=jnp.asarray(sigma, jnp.float32),
        opt_state=_mean_optimizer(cfg).init(mean),
        generation=jnp.zeros((), jnp.int32),
    )


def ask(key: jax.Array, state: ESState, cfg: ESConfig) -> tuple[jax.Array, jax.Array]:
    """Sample the antithetic population: ``(population[P, D], noise[P, D])``.

    ``noise = [ε; -ε]`` with ``ε ~ N(0, I)`` of shape ``[P/2, D]``, so row ``i`` and row
    ``i + P/2`` are exact negatives; ``population = mean + sigma * noise``.
    """
    half = cfg.num_candidates // 2
    eps = jax.random.normal(key, (half, state.mean.shape[0]), jnp.float32)
    noise = jnp.concatenate([eps, -eps], axis=0)
    return state.mean[None, :] + state.sigma * noise, noise


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


def tell(
    state: ESState, noise: jax.Array, fitness: jax.Array, cfg: ESConfig
) -> tuple[ESState, dict[str, jax.Array]]:
    """Update the search distribution from the candidates' fitness (pure, jittable).

    ``noise`` is the one :func:`ask` returned; ``fitness[P]`` is maximized. A generation
    that ranks nothing — every candidate tied, or every candidate non-finite
    (``info['num_invalid'] == P``) — returns the state unchanged but for the generation
    count: no step, no weight decay, no optimizer-moment update, no σ change.

    CEM keeps the ``num_elites`` best; among equal fitness at the elite boundary the
    later candidate is kept (the tail of a stable ascending sort, as the reference).
    """
    fitness = jnp.asarray(fitness, jnp.float32)
    valid = jnp.isfinite(fitness)
    ranked = jnp.where(valid, fitness, -jnp.inf)
    informative = jnp.max(ranked) > jnp.min(ranked)  # some candidate beats another
    info = {
        "best_fitness": jnp.max(jnp.where(valid, fitness, -jnp.inf)),
        "mean_fitness": jnp.sum(jnp.where(valid, fitness, 0.0)) / jnp.maximum(valid.sum(), 1),
        "num_invalid": jnp.sum(~valid).astype(jnp.int32),
    }
    num = noise.shape[0]
    if cfg.kind == "cem":
        # the best num_elites; among equal fitness the later candidate wins, as in an
        # ascending sort's tail (the reference's elite choice)
        elite_idx = num - 1 - jax.lax.top_k(ranked[::-1], cfg.num_elites)[1]
        elites = state.mean[None, :] + state.sigma * noise[elite_idx]
        mean = jnp.mean(elites, axis=0)
        sigma = jnp.mean(jnp.std(elites, axis=0)) if cfg.num_elites > 1 else state.sigma
        opt_state = state.opt_state
    else:
        shaped = centered_rank(fitness)
        grad = (shaped @ noise) / (num * state.sigma)
        # optax minimizes: feed the negative ascent direction plus the L2 term, so that
        # sgd gives exactly θ + lr·grad − lr·wd·θ (the reference step).
        descent = -grad + cfg.weight_decay * state.mean if cfg.weight_decay else -grad
        updates, opt_state = _mean_optimizer(cfg).update(descent, state.opt_state, state.mean)
        mean = optax.apply_updates(state.mean, updates)
        sigma = state.sigma
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(informative, a, b), new, old)
    new_state = ESState(
        mean=keep(mean, state.mean),
        sigma=keep(sigma, state.sigma),
        opt_state=keep(opt_state, state.opt_state),
        generation=state.generation + 1,
    )
    info["sigma"] = new_state.sigma
    return new_state, info


# ---------------------------------------------------------------------------------------
# batched generation: the whole population in one jitted call
# ---------------------------------------------------------------------------------------
FitnessFn = Callable[[jax.Array, jax.Array], jax.Array]


def generation(
    key: jax.Array, state: ESState, fitness_fn: FitnessFn, cfg: ESConfig
) -> tuple[ESState, dict[str, jax.Array]]:
    """One ES generation: ask, ``fitness_fn(population[P, D], key) -> [P]``, tell.

    ``fitness_fn`` evaluates the whole population at once (typically a ``vmap`` over
    members of a ``lax.scan`` episode rollout) and receives ONE key per generation, so
    every member can see the same env seeds (common random numbers). Jit it with
    ``fitness_fn`` and ``cfg`` static (see :func:`make_generation`) or scan it
    (:func:`evolve`). The noise key is the same split :func:`es_step` uses, so both
    paths produce the same ``theta_next`` for the same key and fitness.
    """
    key_ask, key_eval = jax.random.split(key)
    population, noise = ask(key_ask, state, cfg)
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


# ---------------------------------------------------------------------------------------
# the reference API on top of the core
# ---------------------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnames="cfg")
def ask_jit(key: jax.Array, state: ESState, cfg: ESConfig) -> tuple[jax.Array, jax.Array]:
    """Jitted :func:`ask` with the key split :func:`generation` uses (its first half)."""
    return ask(jax.random.split(key)[0], state, cfg)


tell_jit = jax.jit(tell, static_argnames="cfg")
tell_jit.__doc__ = "Jitted :func:`tell` (``cfg`` static)."
_ask_jit, _tell_jit = ask_jit, tell_jit  # earlier names


def _host_info(info: dict[str, jax.Array]) -> dict[str, Any]:
    """Device info -> Python scalars, in the reference's key layout."""
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
    return new_state, _host_info(info)


def _per_member(eval_fn: Callable[[jax.Array], float]) -> Callable[[jax.Array], np.ndarray]:
    """A population fitness from the reference's per-member ``eval_fn``."""
    return lambda population: np.array(
        [float(eval_fn(population[i])) for i in range(population.shape[0])], np.float32)


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
    state, info = host_generation(key, init(theta, es_cfg), _per_member(eval_fn), es_cfg)
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

    Each outer round, in this order:
      (a) ``gstate = gradient_step_fn(gstate)``, ``grad_steps_per_outer`` times;
      (b) ``theta = sync_in(gstate, theta)`` — inject the gradient learner's selector
          into the ES mean;
      (c) one ES generation on ``theta`` by team fitness (``eval_fn`` per member, or the
          batched ``population_fn(thetas[P, D], key) -> [P]`` when given);
      (d) ``gstate = sync_out(gstate, theta)`` — write the evolved selector back.

    ``(outer, info)`` is appended to ``history``. The ES state's σ and optimizer state
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

    Returns ``(theta_final, gstate_final, history)``.
    """
    state = init(theta0, es_cfg) if es_state0 is None else es_state0
    gstate = gstate0
    history: list = []
    step_batched = None
    if generation_fn is not None:
        step_batched = lambda key, state: generation_fn(key, state, gstate)
    elif population_fn:
        step_batched = make_generation(population_fn, es_cfg)
    for outer in range(int(n_outer)):
        key, key_round = jax.random.split(key)
        for _ in range(int(grad_steps_per_outer)):
            gstate = gradient_step_fn(gstate)
        state = state._replace(mean=jnp.asarray(sync_in(gstate, state.mean), jnp.float32))
        if step_batched is None:
            state, info = host_generation(key_round, state, _per_member(eval_fn), es_cfg)
        else:
            state, dev_info = step_batched(key_round, state)
            info = _host_info(dev_info)
            if info["num_invalid"] == es_cfg.num_candidates:
                raise FloatingPointError(
                    f"ES round {outer}: every candidate returned non-finite fitness"
                )
        gstate = sync_out(gstate, state.mean)
        history.append((outer, info))
        if on_round is not None:
            on_round(outer, gstate, state, info)
    return state.mean, gstate, history
