"""The keys of a run, all derived from its seed, so that a resumed run repeats exactly
what the uninterrupted one would have done (JAX path, same machine).

``jax.random.key(seed)`` splits into the network/env init key, the start of the ES key
chain that :func:`feudal_es.es.merl_coexist` consumes (round ``r`` uses the chain advanced
``r`` times, recomputed from the seed on resume: :func:`chain_key`) and a fixed
evaluation key (the current selector's per-round episodes).
"""

from __future__ import annotations

from typing import NamedTuple

import jax

__all__ = ["KeySchedule", "chain_key", "root_keys", "round_key"]


class KeySchedule(NamedTuple):
    """The three keys a run derives from its seed (a fixed derivation)."""

    init: jax.Array  # networks and env copies
    es: jax.Array  # start of the ES key chain (see chain_key)
    eval: jax.Array  # the current selector's per-round evaluation episodes


def root_keys(seed: int) -> KeySchedule:
    """The :class:`KeySchedule` of ``seed``."""
    return KeySchedule(*jax.random.split(jax.random.key(seed), 3))


def chain_key(key: jax.Array, rounds: int) -> jax.Array:
    """The key :func:`feudal_es.es.merl_coexist` holds after ``rounds`` rounds
    (``key, _ = split(key)`` per round), recomputed from the start key."""
    for _ in range(int(rounds)):
        key = jax.random.split(key)[0]
    return key


def round_key(keys: KeySchedule, round_: int) -> jax.Array:
    """The key of round ``round_``'s ES generation (what ``merl_coexist`` passes it)."""
    return jax.random.split(chain_key(keys.es, round_))[1]
