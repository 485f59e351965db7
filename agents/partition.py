"""The one definition of which actor leaves the selector owns.

ES flattening, the masked gradient optimizer and the trainer's sync hooks all go through
:func:`selector_filter`; nothing else may decide the split. The selector's leaves are the
inexact-array leaves of ``actor.selector``; every other inexact leaf is the executor's
(backbone included). The two filters cover every inexact leaf exactly once.

Leaf order: :func:`selector_theta` ravels the selector's leaves in the actor's tree order,
which is the tree order of ``actor.selector``. It therefore equals
``feudal_es.es.module_theta(actor.selector)`` (``eqx.partition`` by
``eqx.is_inexact_array`` + ``ravel_pytree``), so the two compose.
"""

from __future__ import annotations

from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

M = TypeVar("M", bound=eqx.Module)


def selector_filter(actor: eqx.Module) -> eqx.Module:
    """A pytree of bools shaped like ``actor``: True exactly on the selector's inexact
    array leaves (those of ``actor.selector``)."""
    spec = jax.tree.map(lambda _: False, actor)
    return eqx.tree_at(
        lambda a: a.selector, spec, jax.tree.map(eqx.is_inexact_array, actor.selector)
    )


def executor_filter(actor: eqx.Module) -> eqx.Module:
    """The complement over inexact leaves: True on every inexact array leaf that is not
    the selector's. Use it as the gradient side's trainable filter
    (``eqx.partition(actor, executor_filter(actor))``)."""
    inexact = jax.tree.map(eqx.is_inexact_array, actor)
    return jax.tree.map(lambda i, s: i and not s, inexact, selector_filter(actor))


ES_PARAMS = ("selector", "actor")  # what ES may evolve: the selector, or the whole actor


def es_filter(actor: eqx.Module, params: str = "selector") -> eqx.Module:
    """The leaves ES evolves: the selector's (:func:`selector_filter`), or with
    ``params="actor"`` every inexact leaf of the actor (whole-policy ES, MERL's EA-only
    ablation)."""
    if params == "selector":
        return selector_filter(actor)
    if params == "actor":
        return jax.tree.map(eqx.is_inexact_array, actor)
    raise ValueError(f"params must be one of {ES_PARAMS}, got {params!r}")


def es_theta(actor: eqx.Module, params: str = "selector") -> jax.Array:
    """The leaves of :func:`es_filter` as one 1-D vector (tree order)."""
    theta, _ = ravel_pytree(eqx.filter(actor, es_filter(actor, params)))
    return theta


def set_es_theta(actor: M, theta: jax.Array, params: str = "selector") -> M:
    """A copy of ``actor`` with the leaves of :func:`es_filter` rebuilt from ``theta``;
    all other leaves are the same objects. Inverse of :func:`es_theta` (exact)."""
    values, rest = eqx.partition(actor, es_filter(actor, params))
    flat, unflatten = ravel_pytree(values)
    theta = jnp.asarray(theta)
    if theta.shape != flat.shape:
        raise ValueError(
            f"{params} theta must have shape {flat.shape} (the {params}'s parameter count), "
            f"got {theta.shape}"
        )
    return eqx.combine(unflatten(theta.astype(flat.dtype)), rest)


def selector_theta(actor: eqx.Module) -> jax.Array:
    """The selector's parameters as one 1-D vector (tree order)."""
    return es_theta(actor, "selector")


def set_selector_theta(actor: M, theta: jax.Array) -> M:
    """A copy of ``actor`` with the selector's leaves rebuilt from ``theta``; all other
    leaves are the same objects. Inverse of :func:`selector_theta` (exact round trip)."""
    return set_es_theta(actor, theta, "selector")
