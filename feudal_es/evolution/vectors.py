"""Pytrees and Equinox modules as the flat parameter vectors ES works on, and back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

__all__ = ["flatten", "module_theta", "set_module_theta"]


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
