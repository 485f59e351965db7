"""What MAPPO threads from one train step to the next: the learner (actor, critic,
optimizer states, value-norm statistics), the rollout state of the env copies, and the
batch a collection hands the update; plus the guard that skips a non-finite update.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from agents import CentralCritic, FeudalActor, GoalOption, RecurrentOption, executor_filter
from envs.base import SwarmEnv
from feudal_es.mappo.config import MAPPOConfig

__all__ = ["LOSS_KEYS", "Batch", "Learned", "RolloutState", "TrainState", "ValueNorm",
           "all_finite", "init_learner", "init_rollout", "init_train_state", "keep_finite",
           "learned", "make_optimizers", "option_skills", "trainable", "uses_sequences"]


class ValueNorm(NamedTuple):
    """Running mean/variance of the value targets (exact, count-weighted merging)."""

    mean: jax.Array  # []
    var: jax.Array  # []
    count: jax.Array  # [] number of (unmasked) targets seen

    @classmethod
    def create(cls) -> ValueNorm:
        return cls(jnp.zeros(()), jnp.ones(()), jnp.zeros(()))

    def update(self, x: jax.Array, mask: jax.Array, axis: str | None = None) -> ValueNorm:
        """Merge the masked values ``x`` (Chan et al.'s parallel algorithm): after any
        sequence of updates, ``mean``/``var`` equal numpy's over all values seen.
        ``axis``: a mesh axis whose devices each hold a share of the values (their union
        is merged, identically on every device)."""
        total = (lambda v: v) if axis is None else (lambda v: jax.lax.psum(v, axis))
        mask = mask.astype(jnp.float32)
        n = total(mask.sum())
        batch_mean = total((x * mask).sum()) / jnp.maximum(n, 1.0)
        batch_var = total((((x - batch_mean) ** 2) * mask).sum()) / jnp.maximum(n, 1.0)
        total = self.count + n
        delta = batch_mean - self.mean
        mean = self.mean + delta * n / jnp.maximum(total, 1.0)
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / jnp.maximum(
            total, 1.0)
        var = jnp.where(self.count > 0, m2 / jnp.maximum(total, 1.0), batch_var)
        fresh = ValueNorm(mean, var, total)
        return jax.tree.map(lambda a, b: jnp.where(n > 0, a, b), fresh, self)

    def normalize(self, x: jax.Array) -> jax.Array:
        return (x - self.mean) / jnp.sqrt(self.var + 1e-8)

    def denormalize(self, x: jax.Array) -> jax.Array:
        return x * jnp.sqrt(self.var + 1e-8) + self.mean


# ---------------------------------------------------------------------------------------
# state and batch
# ---------------------------------------------------------------------------------------
class RolloutState(NamedTuple):
    """Where the collection left the ``E`` env copies (batched, env axis first)."""

    env_state: Any  # the env's own state pytree, [E, ...]
    obs: Any  # current observation pytree, [E, N, ...]
    option: Any  # the options the agents pursue, [E, N] skills (or a GoalOption)
    ep_t: jax.Array  # [E] int32 steps into the current episode
    ep_return: jax.Array  # [E] running mean-over-agents dense return of the episode
    ep_team_return: jax.Array  # [E] running team return of the episode
    # a recurrent critic's GRU state after the last step, [E, H] (None for a
    # feed-forward critic, whose rollout state and checkpoints are as before)
    critic_hidden: jax.Array | None = None


class TrainState(NamedTuple):
    """Everything a train step reads and writes."""

    actor: FeudalActor
    critic: CentralCritic
    actor_opt_state: optax.OptState  # over the executor's leaves only
    critic_opt_state: optax.OptState
    value_norm: ValueNorm
    rollout: RolloutState | None  # None for the host (PettingZoo) path
    key: jax.Array
    update_step: jax.Array  # [] int32 train steps done
    env_steps: jax.Array  # [] int32 swarm steps collected (one per env copy and step)
    # the executor's leaves as the run started them (``trainable(actor)[0]``), which the
    # L2-SP term of the loss pulls toward (MAPPOConfig.anchor_coef); None without one, so
    # a run without an anchor stores nothing more
    anchor: Any = None


class Learned(NamedTuple):
    """What a MAPPO update learns: the part of a :class:`TrainState` that a skipped
    (non-finite) update keeps from before it."""

    actor: FeudalActor
    critic: CentralCritic
    actor_opt_state: optax.OptState
    critic_opt_state: optax.OptState
    value_norm: ValueNorm


def learned(ts: TrainState) -> Learned:
    """The learner part of ``ts`` (see :class:`Learned`)."""
    return Learned(ts.actor, ts.critic, ts.actor_opt_state, ts.critic_opt_state, ts.value_norm)


def all_finite(tree: Any) -> jax.Array:
    """True iff every floating-point leaf of ``tree`` is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(
        eqx.filter(tree, eqx.is_inexact_array))]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


LOSS_KEYS = ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm")


def keep_finite(before: TrainState, after: TrainState, metrics: dict
                ) -> tuple[TrainState, jax.Array]:
    """``(ts, skipped)``: ``after``, or, when its learner or a loss is non-finite, ``after``
    with the learner (networks, optimizer and value-norm statistics) and update counter
    of ``before`` — the rollout (env states, key, step counter) moves on, so the next
    step sees new data instead of repeating the same blow-up. Pure (vmap it over seeds)."""
    finite = all_finite(learned(after))
    for k in LOSS_KEYS:
        if k in metrics:
            finite = finite & jnp.isfinite(metrics[k])
    pick = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)
    kept = pick(learned(after), learned(before))
    ts = after._replace(**kept._asdict(),
                        update_step=jnp.where(finite, after.update_step, before.update_step))
    return ts, ~finite


class Batch(NamedTuple):
    """``T x E`` transitions, time-major; what :func:`update` learns from."""

    obs: Any  # [T, E, N, ...]
    adj: jax.Array  # [T, E, N, N] comm graph at the observation
    global_state: jax.Array  # [T, E, S] the critic's state (CentralCritic.state)
    option: Any  # [T, E, N] the options (skills, or a GoalOption) the action pursued
    action: jax.Array  # [T, E, N, ...] the policy sample (ActOut.action)
    log_prob: jax.Array  # [T, E, N] behaviour log-prob
    value: jax.Array  # [T, E, N] critic output (normalized units when value_norm)
    reward: jax.Array  # [T, E, N] the current-skill dense reward
    done: jax.Array  # [T, E, N] float, 1 = the agent's episode ended after this step
    alive: jax.Array  # [T, E, N] 1 = agent present (death masking)
    last_value: jax.Array  # [E, N] critic output at the state after the last step
    # a recurrent executor's sequences (None for a feed-forward one): which steps began
    # an episode (the GRU state is zeroed there), and the state entering step 0
    # ``first`` is stored for a recurrent critic too
    first: jax.Array | None = None  # [T, E] bool
    hidden: jax.Array | None = None  # [E, N, H]
    # a recurrent critic's GRU state entering each step (None for a feed-forward one),
    # so the update can re-run any piece of a sequence from where the collection was
    critic_hidden: jax.Array | None = None  # [T, E, H]


def option_skills(option: Any) -> jax.Array:
    """The skill indices of options (an array of skills, or a GoalOption; either in a
    RecurrentOption)."""
    if isinstance(option, RecurrentOption):
        option = option.option
    return option.skill if isinstance(option, GoalOption) else option


def uses_sequences(actor: FeudalActor, critic: CentralCritic) -> bool:
    """Whether MAPPO trains on sequences (a recurrent executor or critic): the batch
    stores each step's ``first`` flag and minibatches are whole sequences, re-run from
    the states the collection had (``MAPPOConfig.sequence_length``)."""
    return bool(actor.recurrent or critic.recurrent)


def trainable(actor: FeudalActor) -> tuple[Any, Any]:
    """Split the actor into (executor params, the rest) with the one selector filter."""
    return eqx.partition(actor, executor_filter(actor))


def make_optimizers(cfg: MAPPOConfig) -> tuple[optax.GradientTransformation, ...]:
    """Adam (eps 1e-5, as in MAPPO) after global-norm clipping, for actor and critic."""

    def make(lr: float) -> optax.GradientTransformation:
        if cfg.anneal_lr:
            lr = optax.linear_schedule(lr, 0.0, cfg.anneal_updates * cfg.epochs * cfg.minibatches)
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(lr, eps=1e-5))

    return make(cfg.lr), make(cfg.critic_lr)


def init_learner(key: jax.Array, actor: FeudalActor, critic: CentralCritic,
                 cfg: MAPPOConfig, rollout: RolloutState | None = None) -> TrainState:
    """A fresh :class:`TrainState` (optimizer state for executor leaves and critic only;
    with ``cfg.anchor_coef`` the executor's leaves as the anchor)."""
    actor_tx, critic_tx = make_optimizers(cfg)
    params, _ = trainable(actor)
    return TrainState(
        actor=actor,
        critic=critic,
        actor_opt_state=actor_tx.init(params),
        critic_opt_state=critic_tx.init(eqx.filter(critic, eqx.is_inexact_array)),
        value_norm=ValueNorm.create(),
        rollout=rollout,
        key=key,
        update_step=jnp.zeros((), jnp.int32),
        env_steps=jnp.zeros((), jnp.int32),
        anchor=params if cfg.anchor_coef > 0 else None,
    )


def init_rollout(key: jax.Array, env: SwarmEnv, actor: FeudalActor, num_envs: int,
                 critic: CentralCritic | None = None) -> RolloutState:
    """Reset ``num_envs`` copies of a functional env (and, for a recurrent ``critic``,
    give each copy its zero GRU state)."""
    obs, env_state = jax.vmap(env.reset)(jax.random.split(key, num_envs))
    copies = lambda x: jnp.broadcast_to(x, (num_envs, *x.shape))
    option = jax.tree.map(copies, actor.initial_option(env.num_agents))
    zeros = jnp.zeros((num_envs,), jnp.float32)
    critic_hidden = (copies(critic.initial_hidden()) if critic is not None and critic.recurrent
                     else None)
    return RolloutState(env_state, obs, option, jnp.zeros((num_envs,), jnp.int32), zeros, zeros,
                        critic_hidden)


def init_train_state(key: jax.Array, env: SwarmEnv, actor: FeudalActor, critic: CentralCritic,
                     cfg: MAPPOConfig) -> TrainState:
    """Learner plus ``cfg.num_envs`` freshly reset env copies."""
    key_env, key_run = jax.random.split(key)
    return init_learner(key_run, actor, critic, cfg, init_rollout(key_env, env, actor,
                                                                   cfg.num_envs, critic))


# ---------------------------------------------------------------------------------------
# GAE
