"""``CentralCritic``: the centralized value function of CTDE-MAPPO.

One value per agent from an agent-specific global state (as the MAPPO paper recommends):
``MLP([state, one_hot(agent id, N), one_hot(current skill, K)])``, where ``state`` is the
env's global state, with ``t / horizon`` appended when ``CriticConfig.time_input`` is set
(:meth:`CentralCritic.state` builds it).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from agents.config import CriticConfig
from agents.layers import MLP, VALUE_GAIN, KeyLike


class CentralCritic(eqx.Module):
    """``critic(state [S], skill [N]) -> values [N]``, ``state = critic.state(global_state
    [G], t)`` (``S = G``, or ``G + 1`` with the time input)."""

    mlp: MLP
    num_agents: int = eqx.field(static=True)
    num_skills: int = eqx.field(static=True)
    horizon: int = eqx.field(static=True)  # max_steps when the state carries t / horizon, else 0

    def __init__(
        self,
        key: KeyLike,
        global_state_size: int,
        num_agents: int,
        num_skills: int,
        config: CriticConfig | None = None,
        horizon: int | None = None,
    ):
        for name, v in (("global_state_size", global_state_size), ("num_agents", num_agents),
                        ("num_skills", num_skills)):  # fmt: skip
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        config = CriticConfig() if config is None else config
        if not isinstance(config, CriticConfig):
            raise TypeError(f"config must be a CriticConfig, got {type(config).__name__}")
        if config.time_input and (isinstance(horizon, bool) or not isinstance(horizon, int)
                                  or horizon < 1):
            raise ValueError("CriticConfig.time_input needs the episode horizon (the env's "
                             f"max_steps, an int >= 1), got horizon={horizon!r}")
        self.horizon = int(horizon) if config.time_input else 0
        in_size = global_state_size + config.time_input + num_agents + num_skills
        self.mlp = MLP(key, in_size, config.hidden, 1, out_gain=VALUE_GAIN,
                       layer_norm=config.layer_norm)  # fmt: skip
        self.num_agents = num_agents
        self.num_skills = num_skills

    @classmethod
    def from_env(cls, key: KeyLike, env: Any, config: CriticConfig | None = None) -> Any:
        """Build from an env's ``global_state_size``, ``num_agents``, ``skill_names`` and
        ``max_steps`` (the horizon of the time input)."""
        return cls(key, env.global_state_size, env.num_agents, len(env.skill_names), config,
                   horizon=int(env.max_steps))

    def state(self, global_state: jax.Array, t: jax.Array) -> jax.Array:
        """The critic's state of one env copy: ``global_state`` [G], with ``t / horizon``
        appended when the critic has the time input (``t``: steps taken this episode)."""
        gs = global_state.astype(jnp.float32)
        if not self.horizon:
            return gs
        frac = jnp.asarray(t, jnp.float32).reshape(1) / self.horizon
        return jnp.concatenate([gs, frac])

    def inputs(self, global_state: jax.Array, skill: jax.Array) -> jax.Array:
        """The per-agent critic inputs [N, S + N + K] (``global_state``: the state [S])."""
        n = self.num_agents
        gs = jnp.broadcast_to(global_state.astype(jnp.float32), (n, global_state.shape[-1]))
        ids = jnp.eye(n, dtype=jnp.float32)
        sk = jax.nn.one_hot(skill, self.num_skills, dtype=jnp.float32)
        return jnp.concatenate([gs, ids, sk], axis=-1)

    def __call__(self, global_state: jax.Array, skill: jax.Array) -> jax.Array:
        """Values [N]: ``MLP(inputs(global_state, skill))`` per agent. The first layer is
        evaluated as ``W_state @ global_state`` once, plus the weight columns the one-hots
        pick (agent id, skill): the same function with N-fold less work on the shared
        global state, the critic's largest input."""
        first = self.mlp.layers[0]
        g, n = global_state.shape[-1], self.num_agents
        shared = global_state.astype(jnp.float32) @ first.weight[:, :g].T + first.bias
        # the skill's columns by a one-hot matmul: an index's gradient is a scatter-add,
        # which XLA:CPU runs serially
        sk = jax.nn.one_hot(skill, self.num_skills, dtype=jnp.float32)
        per_agent = first.weight[:, g:g + n].T + sk @ first.weight[:, g + n:].T
        return jax.vmap(self.mlp.from_first)(shared[None, :] + per_agent)[:, 0]
