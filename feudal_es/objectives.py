"""Classic black-box test functions, as ES fitness (higher is better).

Used by the ES tests and ``bench/es_core.py``. Each ``*_fitness``
takes one parameter vector ``[D]`` and returns the negated loss; :func:`batched` turns
one into a population fitness ``f(thetas[P, D], key) -> [P]`` for
:func:`feudal_es.es.generation`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def sphere_fitness(theta: jax.Array) -> jax.Array:
    """``-Σ θ_i²``; optimum 0 at the origin."""
    return -jnp.sum(theta**2)


def rosenbrock_fitness(theta: jax.Array) -> jax.Array:
    """``-Σ [100 (θ_{i+1} - θ_i²)² + (1 - θ_i)²]``; optimum 0 at all-ones."""
    x, y = theta[:-1], theta[1:]
    return -jnp.sum(100.0 * (y - x**2) ** 2 + (1.0 - x) ** 2)


def rastrigin_fitness(theta: jax.Array) -> jax.Array:
    """``-(10 D + Σ [θ_i² - 10 cos(2π θ_i)])``; optimum 0 at the origin, many local optima."""
    return -(10.0 * theta.shape[0] + jnp.sum(theta**2 - 10.0 * jnp.cos(2 * jnp.pi * theta)))


OBJECTIVES: dict[str, Callable[[jax.Array], jax.Array]] = {
    "sphere": sphere_fitness,
    "rosenbrock": rosenbrock_fitness,
    "rastrigin": rastrigin_fitness,
}


def batched(
    fitness: Callable[[jax.Array], jax.Array],
) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """Lift a per-member fitness to the population signature ``f(thetas, key) -> [P]``."""
    return lambda thetas, key: jax.vmap(fitness)(thetas)
