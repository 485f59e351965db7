"""evosax's strategies (RobertTLange/evosax >= 0.3) as ES kinds: ``ESConfig(kind=
"evosax:CMA_ES")`` evolves the same vector through the same loop as ``"nes"`` / ``"cem"``.

The loop keeps its own :class:`~feudal_es.evolution.state.ESState`: ``mean`` stays the
search distribution's centre (so migration, the learner sync and the selector mask work as
for the built-in kinds), ``opt_state`` holds the evosax state, ``sigma`` its mean step size
(reported only). A generation:

- ask: the evosax state with the loop's ``mean`` written in samples the ``P`` candidates
  (``P = ESConfig.num_candidates``); ``mask`` holds the other coordinates at the mean;
- tell: fitness is maximized here and minimized by evosax, so it is negated once, here;
  a non-finite candidate ranks below every finite one (it gets the worst finite value
  plus one). The evosax state is first advanced as its own ``ask`` advanced it: each
  strategy offered caches only functions of the state there (CMA-ES its eigen-
  decomposition), never the sampled noise, so recomputing it is exact.

Under ``vmap`` (seeds, or the tests' batches) evosax's ``ask`` and ``tell`` run one row at
a time (``jax.custom_batching.sequential_vmap``), not batched: a batched ``eigh`` (CMA-ES)
is jaxlib's LAPACK kernel splitting its batch over the intra-op thread pool and waiting
for it, and when every pool thread is itself such a kernel (one per CPU device, as many
devices as cores: the seeds' default) nothing is left to run the pieces and the program
waits forever. One row at a time costs nothing worth naming next to the rollouts.

What each kind takes from :class:`ESConfig`: ``sigma`` is the initial step size
(``std_init``, or OpenAI-ES's constant ``std``); ``lr`` and ``optimizer`` move the mean of
``Open_ES`` and ``ARS`` (the gradient strategies); the others keep evosax's own update
and fitness shaping (CMA-ES's and SNES's rank weights, PGPE's ClipUp), as evosax defines
them. Strategies whose ``ask`` stores the sampled noise in the state (xNES, MA-ES,
CR-FM-NES, ...) and population-based ones (GA, DE, PSO) are not offered.
"""

from __future__ import annotations

import difflib
import functools
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["PREFIX", "STRATEGIES", "ask", "check_kind", "init", "update"]

PREFIX = "evosax:"
STRATEGIES = ("ARS", "CMA_ES", "Open_ES", "PGPE", "SNES", "Sep_CMA_ES", "SimpleES")
INSTALL = "pip install 'feudal-es[evosax]'"


def check_kind(kind: str) -> None:
    """Refuse an ``evosax:`` kind that is not offered, naming the closest."""
    name = kind[len(PREFIX):]
    if name not in STRATEGIES:
        close = difflib.get_close_matches(name, STRATEGIES, n=1, cutoff=0.5)
        hint = f"; did you mean {PREFIX}{close[0]}?" if close else ""
        raise ValueError(f"ESConfig.kind {kind!r}: no such evosax strategy here{hint} "
                         f"(offered: {', '.join(PREFIX + s for s in STRATEGIES)})")


@functools.lru_cache(maxsize=64)
def _algorithm(kind: str, population: int, dim: int, sigma: float, lr: float,
               optimizer: str) -> tuple[Any, Any]:
    """``(algorithm, params)``: one instance per setting (evosax jits its methods with the
    instance static, so a cached instance compiles once)."""
    try:
        from evosax import algorithms
    except ImportError as e:
        raise ImportError(f"ESConfig.kind {kind!r} needs evosax >= 0.3: {INSTALL}") from e
    import optax

    name = kind[len(PREFIX):]
    cls = getattr(algorithms, name)
    solution = jnp.zeros((dim,), jnp.float32)
    kwargs: dict[str, Any] = {}
    if name in ("Open_ES", "ARS"):
        kwargs["optimizer"] = optax.adam(lr) if optimizer == "adam" else optax.sgd(lr)
        kwargs["std_schedule"] = optax.constant_schedule(sigma)
    algo = cls(population_size=population, solution=solution, **kwargs)
    params = algo.default_params
    if hasattr(params, "std_init"):
        params = params.replace(std_init=jnp.asarray(sigma, jnp.float32))
    return algo, params


def _of(cfg: Any, dim: int) -> tuple[Any, Any]:
    return _algorithm(cfg.kind, cfg.num_candidates, dim, float(cfg.sigma), float(cfg.lr),
                      cfg.optimizer)


def init(mean: jax.Array, cfg: Any) -> Any:
    """The evosax state of a fresh run centred on ``mean`` (deterministic)."""
    algo, params = _of(cfg, mean.shape[0])
    # strong dtypes throughout: the loop's scan carries this state and its where()s keep
    # it leaf by leaf, so every leaf keeps one type from generation to generation
    return jax.tree.map(_strong, algo.init(jax.random.key(0), mean, params))


def _strong(x: Any) -> jax.Array:
    x = jnp.asarray(x)
    return jnp.array(x, dtype=x.dtype)


def step_size(evo: Any, fallback: jax.Array) -> jax.Array:
    """The strategy's mean step size (``std``), for the loop's ``sigma`` report."""
    std = getattr(evo, "std", None)
    return fallback if std is None else jnp.mean(jnp.asarray(std, jnp.float32))


def ask(key: jax.Array, state: Any, cfg: Any, mask: jax.Array | None = None
        ) -> tuple[jax.Array, jax.Array]:
    """``(population[P, D], population[P, D])``: the candidates, twice (the loop's ``ask``
    returns ``(population, noise)``; for these kinds :func:`update` reads the candidates
    themselves)."""
    algo, params = _of(cfg, state.mean.shape[0])
    evo = state.opt_state.replace(mean=state.mean)
    impl = jax.random.key_impl(key)

    @jax.custom_batching.sequential_vmap
    def one(raw: jax.Array, evo: Any, params: Any) -> jax.Array:
        return algo.ask(jax.random.wrap_key_data(raw, impl=impl), evo, params)[0]

    population = one(jax.random.key_data(key), evo, params).astype(jnp.float32)
    if mask is not None:
        population = jnp.where(jnp.asarray(mask) > 0, population, state.mean[None, :])
    return population, population


def update(state: Any, population: jax.Array, fitness: jax.Array, cfg: Any
           ) -> tuple[jax.Array, jax.Array, Any]:
    """``(mean, sigma, evosax state)`` after telling evosax the candidates' fitness
    (maximized here; see the module doc for the negation and non-finite values)."""
    algo, params = _of(cfg, state.mean.shape[0])
    evo = state.opt_state.replace(mean=state.mean)
    valid = jnp.isfinite(fitness)
    loss = jnp.where(valid, -fitness, -jnp.inf)
    worst = jnp.max(jnp.where(valid, loss, -jnp.inf))
    loss = jnp.where(valid, loss, jnp.where(jnp.isfinite(worst), worst + 1.0, 0.0))

    @jax.custom_batching.sequential_vmap
    def tell(evo: Any, population: jax.Array, loss: jax.Array, generation: jax.Array,
             params: Any) -> Any:
        _, evo = algo.ask(jax.random.key(0), evo, params)  # the state its ask advanced
        key = jax.random.fold_in(jax.random.key(1), generation)
        return algo.tell(key, population, loss, evo, params)[0]

    evo = tell(evo, population, loss, state.generation, params)
    evo = jax.tree.map(lambda new, old: jnp.asarray(new, old.dtype), evo, state.opt_state)
    mean = jnp.asarray(evo.mean, jnp.float32)
    return mean, step_size(evo, state.sigma), evo
