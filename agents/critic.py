"""``CentralCritic``: the centralized value function of CTDE-MAPPO.

One value per agent from an agent-specific global state (as the MAPPO paper recommends):
``MLP([global_state, one_hot(agent id, N), one_hot(current skill, K)])``.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from agents.config import CriticConfig
from agents.layers import MLP, VALUE_GAIN, KeyLike


class CentralCritic(eqx.Module):
    """``critic(global_state [G], skill [N]) -> values [N]``."""

    mlp: MLP
    num_agents: int = eqx.field(static=True)
    num_skills: int = eqx.field(static=True)

    def __init__(
        self,
        key: KeyLike,
        global_state_size: int,
        num_agents: int,
        num_skills: int,
        config: CriticConfig | None = None,
    ):
        for name, v in (("global_state_size", global_state_size), ("num_agents", num_agents),
                        ("num_skills", num_skills)):  # fmt: skip
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        config = CriticConfig() if config is None else config
        if not isinstance(config, CriticConfig):
            raise TypeError(f"config must be a CriticConfig, got {type(config).__name__}")
        in_size = global_state_size + num_agents + num_skills
        self.mlp = MLP(key, in_size, config.hidden, 1, out_gain=VALUE_GAIN,
                       layer_norm=config.layer_norm)  # fmt: skip
        self.num_agents = num_agents
        self.num_skills = num_skills

    @classmethod
    def from_env(cls, key: KeyLike, env: Any, config: CriticConfig | None = None) -> Any:
        """Build from an env's ``global_state_size``, ``num_agents`` and ``skill_names``."""
        return cls(key, env.global_state_size, env.num_agents, len(env.skill_names), config)

    def inputs(self, global_state: jax.Array, skill: jax.Array) -> jax.Array:
        """The per-agent critic inputs [N, G + N + K]."""
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
