"""The experts an imitation labels with (:func:`feudal_es.pretrain.imitate`): a bundled
env's reference policy by name, and the labels of agents holding different options, each
by the expert of its own option (the feudal split's imitation, on an option schedule)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from envs.base import SwarmEnv

__all__ = ["Expert", "expert_policy", "labeller", "scheduled_expert"]


def expert_policy(env_id: str, name: str = "reference") -> tuple[str, Callable]:
    """``(name, policy)`` of a bundled env's reference policy (``envs.gif.POLICIES``)."""
    from envs.gif import resolve_policy
    from envs.registration import BUNDLED_ENVS

    env_name = env_id.rpartition("/")[2].rpartition("-v")[0]
    if env_name not in BUNDLED_ENVS:
        raise ValueError(f"imitation needs a bundled env with reference policies, got "
                         f"{env_id!r}")
    return resolve_policy(env_name, name)


#: an imitation's expert: one policy for the option held, or one per option (``None``
#: where no option schedule reaches it)
Expert = Callable | Sequence[Callable | None]


def labeller(env: SwarmEnv, expert: Expert) -> Callable:
    """``label(key, state, option [N]) -> [N, ...]``: each agent's action by the expert
    of the option it holds."""
    if callable(expert):
        return lambda key, state, option: expert(key, env, state)
    experts = tuple(expert)

    def label(key: jax.Array, state: Any, option: jax.Array) -> jax.Array:
        acts = [e(key, env, state) if e is not None else None for e in experts]
        like = next(a for a in acts if a is not None)
        acts = jnp.stack([jnp.zeros_like(like) if a is None else a for a in acts])
        return jnp.take_along_axis(acts, option.reshape(1, -1, *([1] * (like.ndim - 1))),
                                   axis=0)[0]

    return label


def scheduled_expert(experts: Sequence[Callable | None], schedule: Sequence[int],
                     period: int) -> Callable:
    """The policy an option schedule of experts plays: at step ``state.t`` every agent
    acts by the expert of ``schedule[min(t // period, len - 1)]`` (what :func:`imitate`
    labels with, as one env policy; e.g. the reference row of :func:`pretrain`)."""
    sched = jnp.asarray(schedule, jnp.int32)

    def policy(key: jax.Array, env: SwarmEnv, state: Any) -> jax.Array:
        o = sched[jnp.minimum(state.t // period, len(schedule) - 1)]
        return labeller(env, experts)(key, state, jnp.full((env.num_agents,), o))

    return policy
