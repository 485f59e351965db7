"""The imitation loss: how far an executor's action is from its expert's label.

``"mse"`` is LPAC's: the mean squared error over agents and action dimensions. Where the
expert's direction is not fully determined by what a robot observes (Coverage: the
density and the other robots beyond its sensor), the MSE-optimal action is the mean of
the labels it cannot tell apart, and that mean is shorter than any of them: the imitator
moves slower than its expert in exactly the states it is unsure of.

``"direction"`` fits the speed and the heading apart, so that uncertainty about the
heading does not shrink the speed: per agent, ``(|a| - |y|)^2 + |y| * (1 - cos(a, y))``.
Its optimum is the expected speed along the (speed-weighted) mean heading. The heading
term is weighted by the label's speed, so a label that stands still asks only for speed
zero; a near-zero action's heading is smoothed (``EPS``) to keep its gradient bounded.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["EPS", "IMITATION_LOSSES", "action_loss"]

IMITATION_LOSSES = ("mse", "direction")
EPS = 1e-2  # speed below which a predicted action's heading is smoothed toward zero


def _mse(action: jax.Array, label: jax.Array) -> jax.Array:
    return jnp.mean(jnp.square(action - label))


def _direction(action: jax.Array, label: jax.Array) -> jax.Array:
    speed = jnp.sqrt(jnp.sum(jnp.square(action), axis=-1) + EPS**2)
    target = jnp.linalg.norm(label, axis=-1)
    cos = jnp.sum(action * label, axis=-1) / (speed * jnp.maximum(target, EPS))
    per_agent = jnp.square(speed - target) + target * (1.0 - cos)
    return jnp.mean(per_agent)


def action_loss(kind: str, action: jax.Array, label: jax.Array) -> jax.Array:
    """The mean imitation loss ``kind`` (:data:`IMITATION_LOSSES`) of ``action`` against
    ``label``, both ``[..., action_dim]`` (the last axis one agent's action)."""
    if kind == "mse":
        return _mse(action, label)
    if kind == "direction":
        return _direction(action, label)
    raise ValueError(f"imitation loss must be one of {IMITATION_LOSSES}, got {kind!r}")
