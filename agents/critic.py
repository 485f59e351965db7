"""``CentralCritic``: the centralized value function of CTDE-MAPPO.

One value per agent from an agent-specific global state (as the MAPPO paper recommends):
``MLP([state, one_hot(agent id, N), one_hot(current skill, K)])``, where ``state`` is the
env's global state, with ``t / horizon`` appended when ``CriticConfig.time_input`` is set
(:meth:`CentralCritic.state` builds it).

A recurrent critic (``CriticConfig.recurrent``) first runs a GRU over that state, one
GRU state per env copy (the critic sees the whole swarm, so one memory serves every
agent), and the MLP reads the GRU's output in the state's place:
``MLP([gru(state, h), one_hot(agent id), one_hot(skill)])``. Rollouts carry the state
(:meth:`CentralCritic.step`, zeroed at each episode's first step) and MAPPO re-runs it
over stored sequences (:meth:`CentralCritic.sequence`).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from agents.config import CriticConfig
from agents.layers import MLP, VALUE_GAIN, KeyLike, as_rng, gru_cell


class CentralCritic(eqx.Module):
    """``critic(state [S], skill [N]) -> values [N]``, ``state = critic.state(global_state
    [G], t)`` (``S = G``, or ``G + 1`` with the time input); a recurrent one steps a GRU
    state instead: ``critic.step(hidden [H], state, skill, first) -> (hidden, values)``."""

    mlp: MLP
    gru: eqx.nn.GRUCell | None  # CriticConfig.recurrent: state -> GRU -> value MLP
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
        state_size = global_state_size + config.time_input
        features = config.gru_hidden if config.recurrent else state_size
        # one generator for both: the MLP draws first, so a feed-forward critic's
        # parameters are those it had before the GRU option existed
        rng = as_rng(key)
        self.mlp = MLP(rng, features + num_agents + num_skills, config.hidden, 1,
                       out_gain=VALUE_GAIN, layer_norm=config.layer_norm)  # fmt: skip
        self.gru = gru_cell(rng, state_size, config.gru_hidden) if config.recurrent else None
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

    @property
    def recurrent(self) -> bool:
        """Whether the critic carries a GRU state (``CriticConfig.recurrent``)."""
        return self.gru is not None

    def initial_hidden(self) -> jax.Array:
        """A recurrent critic's GRU state before any step: zeros [H] (one env copy's)."""
        if self.gru is None:
            raise ValueError("a feed-forward critic has no GRU state (CriticConfig."
                             "recurrent=False)")
        return jnp.zeros((self.gru.hidden_size,), jnp.float32)

    def recur(self, hidden: jax.Array, state: jax.Array, first: jax.Array) -> jax.Array:
        """The GRU state [H] after reading ``state`` [S] (:meth:`state`'s) from ``hidden``
        [H], the state the previous step left; zero instead where ``first`` (a bool
        scalar: the episode's first step), so no memory crosses an episode boundary."""
        hidden = jnp.where(first, 0.0, hidden.astype(jnp.float32))
        return self.gru(state.astype(jnp.float32), hidden)

    def step(self, hidden: jax.Array, state: jax.Array, skill: jax.Array, first: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
        """One step of a recurrent critic for one env copy: ``(hidden [H], values [N])``,
        the GRU state after ``state`` (:meth:`recur`) and the values it gives the agents
        pursuing ``skill`` [N]. Rollouts carry the returned state to the next step."""
        hidden = self.recur(hidden, state, first)
        return hidden, self.values(hidden, skill)

    def sequence(self, hidden: jax.Array, state: jax.Array, skill: jax.Array,
                 first: jax.Array) -> jax.Array:
        """Values [L, N] of ``L`` consecutive steps of one env copy (``state`` [L, S],
        ``skill`` [L, N], ``first`` [L] bool) for a recurrent critic: the GRU run from
        ``hidden`` [H] (the state entering step 0), zeroed where ``first``, as the
        rollout ran it (:meth:`step`), differentiable through time (MAPPO's update)."""

        def body(h, xs):
            h = self.recur(h, *xs)
            return h, h

        _, hs = jax.lax.scan(body, hidden.astype(jnp.float32), (state, first))
        return jax.vmap(self.values)(hs, skill)

    def inputs(self, global_state: jax.Array, skill: jax.Array) -> jax.Array:
        """The per-agent critic inputs [N, S + N + K] (``global_state``: the state [S]; a
        recurrent critic's GRU output [H])."""
        n = self.num_agents
        gs = jnp.broadcast_to(global_state.astype(jnp.float32), (n, global_state.shape[-1]))
        ids = jnp.eye(n, dtype=jnp.float32)
        sk = jax.nn.one_hot(skill, self.num_skills, dtype=jnp.float32)
        return jnp.concatenate([gs, ids, sk], axis=-1)

    def __call__(self, global_state: jax.Array, skill: jax.Array) -> jax.Array:
        """Values [N] of a feed-forward critic: ``MLP(inputs(global_state, skill))`` per
        agent (:meth:`values` of the state). A recurrent critic needs its GRU state:
        :meth:`step`, :meth:`sequence`."""
        if self.gru is not None:
            raise ValueError("a recurrent critic (CriticConfig.recurrent) carries a GRU "
                             "state: CentralCritic.step or CentralCritic.sequence")
        return self.values(global_state, skill)

    def values(self, global_state: jax.Array, skill: jax.Array) -> jax.Array:
        """Values [N]: ``MLP(inputs(global_state, skill))`` per agent (``global_state``:
        the state [S], or a recurrent critic's GRU output [H]). The first layer is
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
