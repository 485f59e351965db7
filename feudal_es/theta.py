"""The vector ES evolves: the selector's leaves of a feudal actor, or all of its leaves.

Which leaves are the selector's is said once, by :func:`agents.selector_filter`
(:func:`agents.es_filter` picks the selector or the whole actor); this module only turns
those leaves into the flat ``theta`` of :mod:`feudal_es.es` and back, with the reference's
:func:`~feudal_es.es.module_theta` / :func:`~feudal_es.es.set_module_theta` on the
filtered actor. The trainer's sync hooks (MERL's inject and write-back), the population
rollouts and the checkpointed selector files all go through it.
"""

from __future__ import annotations

from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from agents import es_filter
from feudal_es.evolution.vectors import module_theta, set_module_theta

__all__ = ["es_theta", "selector_theta", "set_es_theta", "set_selector_theta", "theta_size"]

M = TypeVar("M", bound=eqx.Module)


def es_theta(actor: eqx.Module, params: str = "selector") -> jax.Array:
    """The leaves of :func:`agents.es_filter` (``params``: ``"selector"`` or ``"actor"``)
    as one 1-D vector, in the actor's tree order."""
    return module_theta(eqx.filter(actor, es_filter(actor, params)))


def theta_size(actor: eqx.Module, params: str = "selector") -> int:
    """The length of :func:`es_theta` (computed from shapes, nothing is copied)."""
    leaves = jax.tree.leaves(eqx.filter(actor, es_filter(actor, params)))
    return int(sum(np.prod(x.shape, dtype=int) for x in leaves))


def set_es_theta(actor: M, theta: jax.Array, params: str = "selector") -> M:
    """A copy of ``actor`` with the leaves of :func:`agents.es_filter` rebuilt from
    ``theta``; every other leaf is the same object. Inverse of :func:`es_theta` (exact)."""
    values, rest = eqx.partition(actor, es_filter(actor, params))
    theta = jnp.asarray(theta)
    size = theta_size(actor, params)
    if theta.shape != (size,):
        raise ValueError(f"{params} theta must have shape ({size},) (the {params}'s "
                         f"parameter count), got {theta.shape}")
    dtype = jnp.result_type(*jax.tree.leaves(values))
    return eqx.combine(set_module_theta(values, theta.astype(dtype)), rest)


def selector_theta(actor: eqx.Module) -> jax.Array:
    """The selector's parameters as one 1-D vector (tree order)."""
    return es_theta(actor, "selector")


def set_selector_theta(actor: M, theta: jax.Array) -> M:
    """A copy of ``actor`` with the selector's leaves rebuilt from ``theta``; all other
    leaves are the same objects. Inverse of :func:`selector_theta` (exact round trip)."""
    return set_es_theta(actor, theta, "selector")
