"""Selector heads (ES parameters) and executor heads (gradient parameters).

All heads act on the whole swarm of one env: inputs carry the agent axis first.

Box actions (any shape, any bounds). The policy is a diagonal Gaussian whose mean comes
from the network in the canonical range ``[-1, 1]`` and is rescaled to the bounds with
``center = (high + low) / 2``, ``half = (high - low) / 2`` (unbounded dimensions use
center 0, half 1). The log-std is a state-independent learned vector in canonical units.
Two ways to respect the bounds, chosen by ``ActorConfig.squash``:

- **clip** (default, common PPO practice): the Gaussian ``N(center + half*mu,
  half*exp(log_std))`` lives in env units; ``ActOut.action`` is the raw, unclipped sample
  and ``log_prob``/``entropy`` are exactly those of that Gaussian. ``ActOut.env_action`` is
  the sample clipped to ``[low, high]``. Store ``action`` for the PPO update.
- **squash**: ``u ~ N(mu, exp(log_std))``, ``action = env_action = center + half*tanh(u)``;
  ``log_prob`` includes the change of variables ``-sum log(half * (1 - tanh(u)^2))``.
  ``entropy`` is that of the pre-squash Gaussian in env units (``+ sum log half``), an
  upper bound of the true entropy, which has no closed form. Needs finite bounds.

Discrete actions: a Categorical over ``n`` logits; ``env_action = action + space.start``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from agents.config import ActorConfig
from agents.layers import MLP, POLICY_GAIN, KeyLike, as_rng, gru_cell

_LOG_2PI = math.log(2.0 * math.pi)
_ATANH_EPS = 1e-6


class ActOut(NamedTuple):
    """What ``act`` returns; every field has the agent axis first."""

    action: jax.Array  # the policy sample that log_prob is of: store it for the update
    env_action: jax.Array  # the action to feed env.step (clipped / shifted into the space)
    log_prob: jax.Array  # [N]
    entropy: jax.Array  # [N]


# --------------------------------------------------------------------------- selector
class SkillSelector(eqx.Module):
    """h [N, E] -> skill logits [N, K]; the skill is their argmax at decision steps."""

    mlp: MLP

    def __init__(self, key: KeyLike, embed_dim: int, num_skills: int, hidden: tuple[int, ...]):
        self.mlp = MLP(key, embed_dim, hidden, num_skills, out_gain=POLICY_GAIN)

    def __call__(self, h: jax.Array) -> jax.Array:
        return jax.vmap(self.mlp)(h)


class GoalSelector(eqx.Module):
    """h [N, E] -> bounded sub-goal [N, G] in (-1, 1) (tanh)."""

    mlp: MLP

    def __init__(self, key: KeyLike, embed_dim: int, goal_dim: int, hidden: tuple[int, ...]):
        self.mlp = MLP(key, embed_dim, hidden, goal_dim, out_gain=POLICY_GAIN,
                       final_activation="tanh")  # fmt: skip

    def __call__(self, h: jax.Array) -> jax.Array:
        return jax.vmap(self.mlp)(h)


class Selector(eqx.Module):
    """Everything the ES evolves: a ``SkillSelector`` and an optional ``GoalSelector``."""

    skill: SkillSelector
    goal: GoalSelector | None


# --------------------------------------------------------------------------- executor
class GaussianHead(eqx.Module):
    """Diagonal Gaussian over a ``Box`` action space (see the module docstring)."""

    mean: MLP
    log_std: jax.Array  # [A], canonical units, state-independent
    shape: tuple[int, ...] = eqx.field(static=True)
    low: tuple[float, ...] = eqx.field(static=True)
    high: tuple[float, ...] = eqx.field(static=True)
    squash: bool = eqx.field(static=True)

    def __init__(self, key: KeyLike, in_size: int, space: gym.spaces.Box, config: ActorConfig):
        self.shape = tuple(int(d) for d in space.shape)
        size = int(np.prod(self.shape))
        low = np.broadcast_to(np.asarray(space.low, np.float64), self.shape).reshape(-1)
        high = np.broadcast_to(np.asarray(space.high, np.float64), self.shape).reshape(-1)
        if config.squash and not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError("ActorConfig.squash=True needs an action space with finite bounds")
        self.low, self.high = tuple(low.tolist()), tuple(high.tolist())
        self.squash = config.squash
        self.mean = MLP(key, in_size, config.executor_hidden, size, out_gain=POLICY_GAIN)
        self.log_std = jnp.asarray(np.full((size,), config.log_std_init, np.float32))

    def _affine(self) -> tuple[jax.Array, jax.Array]:
        low, high = np.asarray(self.low), np.asarray(self.high)
        finite = np.isfinite(low) & np.isfinite(high)
        center = np.where(finite, (high + low) / 2.0, 0.0)
        half = np.where(finite, (high - low) / 2.0, 1.0)
        return jnp.asarray(center, jnp.float32), jnp.asarray(half, jnp.float32)

    def _params(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Canonical mean [N, A] and log-std [A]."""
        return jax.vmap(self.mean)(x), self.log_std

    def _unflat(self, a: jax.Array) -> jax.Array:
        return a.reshape(a.shape[:1] + self.shape)

    def sample(self, key: jax.Array, x: jax.Array, deterministic: bool = False) -> ActOut:
        """Sample (mode if ``deterministic``, which may be traced) for head input x."""
        mu, log_std = self._params(x)
        center, half = self._affine()
        eps = jnp.where(deterministic, 0.0, jax.random.normal(key, mu.shape))
        if self.squash:
            u = mu + jnp.exp(log_std) * eps
            action = center + half * jnp.tanh(u)
            log_prob = _normal_logp(u, mu, log_std) - _tanh_log_det(u, half)
            env_action = action
        else:
            action = center + half * (mu + jnp.exp(log_std) * eps)
            log_prob = _normal_logp(action, center + half * mu, log_std + jnp.log(half))
            low, high = jnp.asarray(self.low, jnp.float32), jnp.asarray(self.high, jnp.float32)
            env_action = jnp.clip(action, low, high)
        ent = self._entropy(mu.shape[0], log_std, half)
        return ActOut(self._unflat(action), self._unflat(env_action), log_prob, ent)

    def evaluate(self, x: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(log_prob [N], entropy [N])`` of stored ``action`` [N, *shape]."""
        mu, log_std = self._params(x)
        center, half = self._affine()
        a = action.reshape(action.shape[0], -1).astype(jnp.float32)
        if self.squash:
            y = jnp.clip((a - center) / half, -1.0 + _ATANH_EPS, 1.0 - _ATANH_EPS)
            u = jnp.arctanh(y)
            log_prob = _normal_logp(u, mu, log_std) - _tanh_log_det(u, half)
        else:
            log_prob = _normal_logp(a, center + half * mu, log_std + jnp.log(half))
        return log_prob, self._entropy(mu.shape[0], log_std, half)

    @staticmethod
    def _entropy(n: int, log_std: jax.Array, half: jax.Array) -> jax.Array:
        ent = jnp.sum(0.5 + 0.5 * _LOG_2PI + log_std + jnp.log(half))
        return jnp.full((n,), ent)


def _normal_logp(x: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    z = (x - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * _LOG_2PI, axis=-1)


def _tanh_log_det(u: jax.Array, half: jax.Array) -> jax.Array:
    """``sum log(half * (1 - tanh(u)^2))``, computed stably."""
    log_1m_tanh2 = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.sum(jnp.log(half) + log_1m_tanh2, axis=-1)


class CategoricalHead(eqx.Module):
    """Categorical over a ``Discrete(n, start)`` action space."""

    logits: MLP
    start: int = eqx.field(static=True)

    def __init__(self, key: KeyLike, in_size: int, space: gym.spaces.Discrete, config: ActorConfig):
        self.start = int(space.start)
        self.logits = MLP(key, in_size, config.executor_hidden, int(space.n), out_gain=POLICY_GAIN)

    def sample(self, key: jax.Array, x: jax.Array, deterministic: bool = False) -> ActOut:
        logp_all = jax.nn.log_softmax(jax.vmap(self.logits)(x))
        sampled = jax.random.categorical(key, logp_all, axis=-1)
        action = jnp.where(deterministic, jnp.argmax(logp_all, axis=-1), sampled)
        action = action.astype(jnp.int32)
        log_prob = jnp.take_along_axis(logp_all, action[:, None], axis=-1)[:, 0]
        return ActOut(action, action + self.start, log_prob, _cat_entropy(logp_all))

    def evaluate(self, x: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
        logp_all = jax.nn.log_softmax(jax.vmap(self.logits)(x))
        # the action's log-prob by a one-hot product, not an index: the gradient of an
        # index is a scatter-add, which XLA:CPU runs serially (PPO's update differentiates
        # this; same values, a faster step: bench/RESULTS.md, "Design choices measured")
        pick = jax.nn.one_hot(action.astype(jnp.int32), logp_all.shape[-1], dtype=logp_all.dtype)
        return jnp.sum(logp_all * pick, axis=-1), _cat_entropy(logp_all)


def _cat_entropy(logp: jax.Array) -> jax.Array:
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


class Executor(eqx.Module):
    """The gradient-trained action head: input ``[h, skill code, sub-goal]`` -> action
    distribution. The skill code is a one-hot or (``skill_embed_dim > 0``) a learned
    embedding; the head is Gaussian for ``Box`` and Categorical for ``Discrete``. A
    recurrent executor (``ActorConfig.recurrent``) runs that input through a GRU first
    (:meth:`recur`) and the head reads the GRU's state."""

    skill_embed: jax.Array | None  # [K, D] learned skill codes, or None for one-hot
    head: GaussianHead | CategoricalHead
    gru: eqx.nn.GRUCell | None  # ActorConfig.recurrent: input -> GRU -> head
    num_skills: int = eqx.field(static=True)
    option_features: int = eqx.field(static=True)  # F of the env's OPTION_OBS, 0 without

    def __init__(
        self,
        key: KeyLike,
        embed_dim: int,
        num_skills: int,
        action_space: gym.Space,
        config: ActorConfig,
        option_features: int = 0,
    ):
        rng = as_rng(key)
        self.num_skills = num_skills
        self.option_features = option_features
        if config.skill_embed_dim > 0:
            codes = rng.standard_normal((num_skills, config.skill_embed_dim))
            self.skill_embed = jnp.asarray(codes.astype(np.float32))
            code = config.skill_embed_dim
        else:
            self.skill_embed = None
            code = num_skills
        in_size = embed_dim + code + config.goal_dim + option_features
        self.gru = gru_cell(rng, in_size, config.gru_hidden) if config.recurrent else None
        if config.recurrent:
            in_size = config.gru_hidden
        if isinstance(action_space, gym.spaces.Box):
            self.head = GaussianHead(rng, in_size, action_space, config)
        elif isinstance(action_space, gym.spaces.Discrete):
            self.head = CategoricalHead(rng, in_size, action_space, config)
        else:
            raise TypeError(
                f"action space must be gymnasium Box or Discrete, got {type(action_space).__name__}"
            )

    def inputs(self, h: jax.Array, skill: jax.Array, goal: jax.Array,
               option_obs: jax.Array | None = None) -> jax.Array:
        """Head input [N, E + code + G (+ F)]: with ``option_features``, each agent's row of
        ``option_obs`` ``[N, K, F]`` (the env's ``OPTION_OBS``) for the option it holds."""
        skill = skill.astype(jnp.int32)
        onehot = jax.nn.one_hot(skill, self.num_skills, dtype=h.dtype)
        if self.skill_embed is None:
            code = onehot
        else:
            # a one-hot product, not an index, for the same reason as CategoricalHead.evaluate
            code = onehot @ self.skill_embed
        parts = [h, code, goal.astype(h.dtype)]
        if self.option_features:
            if option_obs is None:
                raise ValueError(f"this executor reads the observation's per-option features "
                                 f"[N, {self.num_skills}, {self.option_features}]; the "
                                 "observation has none")
            parts.append(jnp.einsum("nk,nkf->nf", onehot, option_obs.astype(h.dtype)))
        return jnp.concatenate(parts, axis=-1)

    def recur(self, x: jax.Array, hidden: jax.Array) -> jax.Array:
        """The GRU's next state ``[N, H]`` from head inputs ``x`` ``[N, ...]`` (see
        :meth:`inputs`) and the state ``hidden`` ``[N, H]`` entering this step."""
        return jax.vmap(self.gru)(x, hidden.astype(x.dtype))
