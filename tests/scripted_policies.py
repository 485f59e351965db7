"""Scripted policies for the groups other than the team (``others="module:function"``):
plain JAX functions of a key and the group's observations."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def stand_still(key: jax.Array, obs: jax.Array) -> jax.Array:
    """MPE's no-op (action 0) for every agent of the group."""
    return jnp.zeros(obs.shape[0], jnp.int32)


def by_sign(key: jax.Array, obs: jax.Array) -> jax.Array:
    """Action 1 or 2 by the sign of the first observation, 3 where a coin says so: a
    policy of what the agent sees and of its key."""
    coin = jax.random.bernoulli(key, 0.3, (obs.shape[0],))
    return jnp.where(coin, 3, jnp.where(obs[:, 0] > 0, 1, 2)).astype(jnp.int32)


def wrong_shape(key: jax.Array, obs: jax.Array) -> jax.Array:
    """Not a policy: one action for the whole group."""
    return jnp.zeros((), jnp.int32)
