"""One episode of a functional env as a single ``lax.scan``: the project's one scanner.

Reference policies, the trainer's fitness episodes and the GIF writers all play episodes
the same way, with one key derivation: ``reset`` on the first half of ``split(key)``, then
per step ``k_act, k_env = split(k_t)`` for the policy and the env. A policy is an
``act(key, obs, state, carry, t) -> (actions, carry)`` so that stateful controllers (the
feudal actor holds its skills between selector decisions) and plain
``policy(key, env, state)`` functions (:func:`stateless`) share it. Pure, jittable and
``vmap``-pable over ``key``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from envs.base import EnvOut, Obs, SwarmEnv

__all__ = ["Act", "Episode", "run_episode", "stateless"]

Act = Callable[[jax.Array, Obs, Any, Any, jax.Array], tuple[jax.Array, Any]]


class Episode(NamedTuple):
    """What :func:`run_episode` returns."""

    team_return: jax.Array  # [] sum of team_reward over the episode (team fitness)
    outs: Any  # record(EnvOut) of every step (default the whole EnvOut), stacked over time
    final_state: Any  # the env state after the last step
    carry: Any  # the policy's carry after the last step
    states: Any = None  # keep_states: [T + 1, ...] states, the reset state first


def stateless(policy: Callable[[jax.Array, Any, Any], jax.Array], env: SwarmEnv) -> Act:
    """The :data:`Act` of a reference ``policy(key, env, state) -> actions`` (no carry)."""

    def act(key: jax.Array, obs: Obs, state: Any, carry: Any, t: jax.Array):
        del obs, t
        return policy(key, env, state), carry

    return act


def run_episode(key: jax.Array, env: SwarmEnv, act: Act, carry: Any = None,
                num_steps: int | None = None, keep_states: bool = False,
                record: Callable[[EnvOut], Any] | None = None) -> Episode:
    """Play ``num_steps`` (default ``env.max_steps``, at most that) steps from
    ``env.reset``: no auto-reset, so ``final_state`` is the last step's state. ``record``
    picks what is stacked per step (e.g. ``lambda out: out.metrics``; the scan then
    carries nothing else)."""
    num_steps = env.max_steps if num_steps is None else min(int(num_steps), env.max_steps)
    k_reset, k_run = jax.random.split(key)
    obs, state = env.reset(k_reset)

    def body(c, k):
        obs, state, carry, t, ret = c
        k_act, k_env = jax.random.split(k)
        actions, carry = act(k_act, obs, state, carry, t)
        obs, state, out = env.step(k_env, state, actions)
        ys = (out if record is None else record(out), state if keep_states else None)
        return (obs, state, carry, t + 1, ret + out.team_reward), ys

    init = (obs, state, carry, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32))
    (_, final, carry, _, ret), (outs, states) = jax.lax.scan(
        body, init, jax.random.split(k_run, num_steps))
    if keep_states:
        states = jax.tree.map(lambda s0, s: jnp.concatenate([s0[None], s]), state, states)
    return Episode(ret, outs, final, carry, states)
