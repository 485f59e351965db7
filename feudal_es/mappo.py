"""CTDE-MAPPO for the executor: decentralized actor, centralized critic, selector untouched.

Follows Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
Games": clipped surrogate, value normalization, clipped (Huber) value loss, GAE,
advantage normalization, death masking, gradient-norm clipping, and an agent-specific
global state for the critic (global state + agent id + current skill).

The feudal twist: each agent's reward is the dense channel of the skill it currently
pursues (``skill_rewards[i, skill_i]``), skills are chosen by the selector every
``selector_period`` steps, and the optimizer is partitioned with
:func:`agents.executor_filter` so the selector's leaves (owned by ES) receive no gradient
and hold no optimizer state.

Two ways to collect, one update:

* :func:`make_train_step` — pure-JAX envs: ``num_steps x num_envs`` collected with
  ``lax.scan`` over time and ``vmap`` over envs, then the update, all in one ``jit``;
* ``feudal_es.host`` — any PettingZoo ``ParallelEnv`` via a Python loop, producing the
  same :class:`Batch` and calling the same :func:`update`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from agents import CentralCritic, Directive, FeudalActor, executor_filter
from envs.base import SwarmEnv, auto_reset_step
from envs.validate import check_bool, check_int, check_number

UPDATE_MODES = ("auto", "fused", "split")


# ---------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MAPPOConfig:
    """Hyper-parameters of CTDE-MAPPO (frozen, validated; errors name the field)."""

    lr: float = 5e-4  # Adam step size of the executor (actor minus selector)
    critic_lr: float = 5e-4  # Adam step size of the centralized critic
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE lambda
    clip_eps: float = 0.2  # PPO ratio clip
    value_clip_eps: float = 0.2  # value clipping around the old value; 0 disables
    huber_delta: float = 10.0  # Huber loss delta of the value loss; 0 = squared error
    epochs: int = 5  # passes over each batch
    minibatches: int = 2  # minibatches per epoch (split over the T*E swarm samples)
    ent_coef: float = 0.01  # entropy bonus
    vf_coef: float = 1.0  # value-loss weight
    max_grad_norm: float = 10.0  # global-norm clip, actor and critic separately
    num_envs: int = 8  # E: parallel env copies
    num_steps: int = 32  # T: steps collected per env and train step
    selector_period: int = 10  # the feudal time scale: the selector re-decides this often
    value_norm: bool = True  # normalize value targets with running statistics
    norm_advantages: bool = True  # standardize advantages over the batch
    anneal_lr: bool = False  # linear lr decay to 0 over ``anneal_updates`` train steps
    anneal_updates: int = 1000  # horizon of the lr annealing
    # "fused": the epochs x minibatches loop as one lax.scan inside the train step's one
    # jit; "split": a Python loop over jitted pieces (XLA:CPU runs a large convolution's
    # gradient inside a loop body much slower than in straight-line code); "auto": split
    # when the actor's CNN is large (see uses_fused_update), fused otherwise
    update: str = "auto"
    # during collection, each agent's option at a decision step is a uniformly random one
    # with this probability (else the selector's), so the executor practises every option
    # in every kind of state and ES candidates that choose differently meet a competent
    # executor; evaluation and fitness episodes never explore
    option_exploration: float = 0.2

    def __post_init__(self) -> None:
        c = type(self).__name__
        for name in ("lr", "critic_lr", "clip_eps", "max_grad_norm"):
            check_number(f"{c}.{name}", getattr(self, name), low=0.0, low_open=True)
        for name in ("gamma", "gae_lambda", "option_exploration"):
            check_number(f"{c}.{name}", getattr(self, name), low=0.0, high=1.0)
        for name in ("value_clip_eps", "huber_delta", "ent_coef", "vf_coef"):
            check_number(f"{c}.{name}", getattr(self, name), low=0.0)
        for name in ("epochs", "minibatches", "num_envs", "num_steps", "selector_period",
                     "anneal_updates"):
            check_int(f"{c}.{name}", getattr(self, name), 1)
        for name in ("value_norm", "norm_advantages", "anneal_lr"):
            check_bool(f"{c}.{name}", getattr(self, name))
        if self.update not in UPDATE_MODES:
            raise ValueError(f"{c}.update must be one of {UPDATE_MODES}, got {self.update!r}")
        if (self.num_steps * self.num_envs) % self.minibatches:
            raise ValueError(
                f"{c}.minibatches ({self.minibatches}) must divide num_steps * num_envs "
                f"({self.num_steps} * {self.num_envs})"
            )

    @property
    def batch_size(self) -> int:
        """Swarm samples per train step: ``num_steps * num_envs``."""
        return self.num_steps * self.num_envs


# ---------------------------------------------------------------------------------------
# value normalization
# ---------------------------------------------------------------------------------------
class ValueNorm(NamedTuple):
    """Running mean/variance of the value targets (exact, count-weighted merging)."""

    mean: jax.Array  # []
    var: jax.Array  # []
    count: jax.Array  # [] number of (unmasked) targets seen

    @classmethod
    def create(cls) -> ValueNorm:
        return cls(jnp.zeros(()), jnp.ones(()), jnp.zeros(()))

    def update(self, x: jax.Array, mask: jax.Array) -> ValueNorm:
        """Merge the masked values ``x`` (Chan et al.'s parallel algorithm): after any
        sequence of updates, ``mean``/``var`` equal numpy's over all values seen."""
        mask = mask.astype(jnp.float32)
        n = mask.sum()
        batch_mean = (x * mask).sum() / jnp.maximum(n, 1.0)
        batch_var = (((x - batch_mean) ** 2) * mask).sum() / jnp.maximum(n, 1.0)
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
    held: Any  # the held skill [E, N] (or a Directive with sub-goals)
    ep_t: jax.Array  # [E] int32 steps into the current episode
    ep_return: jax.Array  # [E] running mean-over-agents dense return of the episode
    ep_team_return: jax.Array  # [E] running team return of the episode


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
    held: Any  # [T, E, N] skill (or Directive) the action was conditioned on
    action: jax.Array  # [T, E, N, ...] the policy sample (ActOut.action)
    log_prob: jax.Array  # [T, E, N] behaviour log-prob
    value: jax.Array  # [T, E, N] critic output (normalized units when value_norm)
    reward: jax.Array  # [T, E, N] the current-skill dense reward
    done: jax.Array  # [T, E, N] float, 1 = the agent's episode ended after this step
    alive: jax.Array  # [T, E, N] 1 = agent present (death masking)
    last_value: jax.Array  # [E, N] critic output at the state after the last step


def skill_ids(held: Any) -> jax.Array:
    """The skill indices of a held selector output (array or Directive)."""
    return held.skill if isinstance(held, Directive) else held


def _trainable(actor: FeudalActor) -> tuple[Any, Any]:
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
    """A fresh :class:`TrainState` (optimizer state for executor leaves and critic only)."""
    actor_tx, critic_tx = make_optimizers(cfg)
    params, _ = _trainable(actor)
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
    )


def init_rollout(key: jax.Array, env: SwarmEnv, actor: FeudalActor, num_envs: int) -> RolloutState:
    """Reset ``num_envs`` copies of a functional env."""
    obs, env_state = jax.vmap(env.reset)(jax.random.split(key, num_envs))
    held = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_envs, *x.shape)),
                        actor.initial_skill(env.num_agents))
    zeros = jnp.zeros((num_envs,), jnp.float32)
    return RolloutState(env_state, obs, held, jnp.zeros((num_envs,), jnp.int32), zeros, zeros)


def init_train_state(key: jax.Array, env: SwarmEnv, actor: FeudalActor, critic: CentralCritic,
                     cfg: MAPPOConfig) -> TrainState:
    """Learner plus ``cfg.num_envs`` freshly reset env copies."""
    key_env, key_run = jax.random.split(key)
    return init_learner(key_run, actor, critic, cfg, init_rollout(key_env, env, actor,
                                                                   cfg.num_envs))


# ---------------------------------------------------------------------------------------
# GAE
# ---------------------------------------------------------------------------------------
def gae(reward: jax.Array, value: jax.Array, done: jax.Array, last_value: jax.Array,
        gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
    """Generalized advantage estimation over time-major ``[T, ...]`` arrays.

    ``done[t]`` means the episode ended with step ``t`` (the next value is not
    bootstrapped; fixed-horizon episodes are treated as terminal). ``done`` broadcasts
    against ``reward``. Returns ``(advantages, returns)``, both like ``reward``.
    """
    done = jnp.broadcast_to(jnp.reshape(done, done.shape + (1,) * (reward.ndim - done.ndim)),
                            reward.shape).astype(jnp.float32)

    def body(carry, xs):
        next_adv, next_value = carry
        r, v, d = xs
        delta = r + gamma * next_value * (1.0 - d) - v
        adv = delta + gamma * lam * (1.0 - d) * next_adv
        return (adv, v), adv

    init = (jnp.zeros_like(last_value), last_value)
    _, adv = jax.lax.scan(body, init, (reward, value, done), reverse=True)
    return adv, adv + value


# ---------------------------------------------------------------------------------------
# the update (shared by the JAX and the host path)
# ---------------------------------------------------------------------------------------
def _masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    return (x * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def _value_loss(err: jax.Array, delta: float) -> jax.Array:
    if delta > 0:
        return optax.huber_loss(err, delta=delta)
    return 0.5 * err**2


def loss(params: tuple[Any, Any], rest: tuple[Any, Any], mb: dict, cfg: MAPPOConfig
         ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clipped-PPO loss of a minibatch ``mb``: ``(total, stats)``. ``params`` are the
    (executor, critic) leaves being differentiated, ``rest`` their complements."""
    actor_params, critic_params = params
    actor = eqx.combine(actor_params, rest[0])
    critic = eqx.combine(critic_params, rest[1])
    log_prob, entropy = jax.vmap(actor.evaluate)(mb["obs"], mb["adj"], mb["held"], mb["action"])
    value = jax.vmap(critic)(mb["global_state"], skill_ids(mb["held"]))
    mask = mb["alive"]

    log_ratio = log_prob - mb["log_prob"]
    ratio = jnp.exp(log_ratio)
    adv = mb["advantage"]
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv)
    policy_loss = -_masked_mean(surrogate, mask)
    entropy_mean = _masked_mean(entropy, mask)

    target = mb["target"]
    value_loss = _value_loss(value - target, cfg.huber_delta)
    if cfg.value_clip_eps > 0:
        clipped = mb["value"] + jnp.clip(value - mb["value"], -cfg.value_clip_eps,
                                         cfg.value_clip_eps)
        value_loss = jnp.maximum(value_loss, _value_loss(clipped - target, cfg.huber_delta))
    value_loss = _masked_mean(value_loss, mask)

    total = policy_loss - cfg.ent_coef * entropy_mean + cfg.vf_coef * value_loss
    stats = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy_mean,
        "approx_kl": _masked_mean((ratio - 1.0) - log_ratio, mask),
        "clip_fraction": _masked_mean((jnp.abs(ratio - 1.0) > cfg.clip_eps).astype(jnp.float32),
                                      mask),
    }
    return total, stats


def _prepare(ts: TrainState, batch: Batch, cfg: MAPPOConfig):
    """GAE, the value-norm update and advantage normalization; flat ``[T*E, ...]`` data,
    one shuffle per epoch, and the rollout-side metrics."""
    vn = ts.value_norm
    denorm = vn.denormalize if cfg.value_norm else (lambda v: v)
    value = denorm(batch.value)
    advantage, returns = gae(batch.reward, value, batch.done, denorm(batch.last_value),
                             cfg.gamma, cfg.gae_lambda)
    alive = batch.alive.astype(jnp.float32)
    if cfg.value_norm:
        vn = vn.update(returns, alive)
        target = vn.normalize(returns)
    else:
        target = returns
    if cfg.norm_advantages:
        mean = _masked_mean(advantage, alive)
        std = jnp.sqrt(_masked_mean((advantage - mean) ** 2, alive))
        advantage = (advantage - mean) / (std + 1e-8)
    flat = lambda x: x.reshape((cfg.batch_size, *x.shape[2:]))
    data = {
        "obs": batch.obs, "adj": batch.adj, "global_state": batch.global_state,
        "held": batch.held, "action": batch.action, "log_prob": batch.log_prob,
        "value": batch.value, "alive": alive, "advantage": advantage, "target": target,
    }
    data = jax.tree.map(flat, data)
    key, key_update = jax.random.split(ts.key)
    perms = jax.vmap(lambda k: jax.random.permutation(k, cfg.batch_size))(
        jax.random.split(key_update, cfg.epochs))
    residual = returns - value
    metrics = {
        "explained_variance": 1.0 - _masked_mean(
            (residual - _masked_mean(residual, alive)) ** 2, alive) / (
            _masked_mean((returns - _masked_mean(returns, alive)) ** 2, alive) + 1e-8),
        "value_mean": _masked_mean(value, alive),
        "skill_reward": _masked_mean(batch.reward, alive),
    }
    return ts._replace(value_norm=vn, key=key), data, perms, metrics


def _minibatch_step(ts: TrainState, data: dict, idx: jax.Array, cfg: MAPPOConfig):
    """One clipped-PPO gradient step on the samples ``idx`` of ``data``."""
    actor_tx, critic_tx = make_optimizers(cfg)
    actor_params, actor_rest = _trainable(ts.actor)
    critic_params, critic_rest = eqx.partition(ts.critic, eqx.is_inexact_array)
    mb = jax.tree.map(lambda x: x[idx], data)
    grads, stats = jax.grad(loss, has_aux=True)(
        (actor_params, critic_params), (actor_rest, critic_rest), mb, cfg)
    a_upd, a_opt = actor_tx.update(grads[0], ts.actor_opt_state, actor_params)
    c_upd, c_opt = critic_tx.update(grads[1], ts.critic_opt_state, critic_params)
    stats["grad_norm"] = optax.tree.norm(grads[0])
    ts = ts._replace(
        actor=eqx.combine(eqx.apply_updates(actor_params, a_upd), actor_rest),
        critic=eqx.combine(eqx.apply_updates(critic_params, c_upd), critic_rest),
        actor_opt_state=a_opt,
        critic_opt_state=c_opt,
    )
    return ts, stats


_prepare_jit = eqx.filter_jit(_prepare)
_minibatch_step_jit = eqx.filter_jit(_minibatch_step)


def update(ts: TrainState, batch: Batch, cfg: MAPPOConfig) -> tuple[TrainState, dict]:
    """GAE, value-norm update, then ``epochs x minibatches`` clipped-PPO steps: a Python
    loop over two jitted pieces (the "split" update).

    Only the executor's leaves of the actor (``agents.executor_filter``) and the critic
    are differentiated and updated; selector leaves pass through bit-identical.

    Why a Python loop: XLA's CPU backend runs a large convolution's gradient inside a loop
    body slower than in straight-line code (the default actor's train step on Coverage:
    7.9 s fused, 6.1 s split, jax 0.10.2 on 2 cores; about 20x with earlier versions),
    and a Python loop keeps one compilation for all minibatches. Without a CNN, or with a small one,
    :func:`update_fused` is faster (:func:`uses_fused_update`).
    """
    ts, data, perms, metrics = _prepare_jit(ts, batch, cfg)
    size = cfg.batch_size // cfg.minibatches
    stats = []
    for epoch in range(cfg.epochs):
        for m in range(cfg.minibatches):
            ts, s = _minibatch_step_jit(ts, data, perms[epoch, m * size:(m + 1) * size], cfg)
            stats.append(s)
    metrics.update({k: jnp.mean(jnp.stack([s[k] for s in stats])) for k in stats[0]})
    return ts._replace(update_step=ts.update_step + 1), metrics


def update_fused(ts: TrainState, batch: Batch, cfg: MAPPOConfig) -> tuple[TrainState, dict]:
    """:func:`update` with the epochs x minibatches loop as one ``lax.scan`` (pure;
    call it under ``jit``): the same minibatches in the same order, one program."""
    ts, data, perms, metrics = _prepare(ts, batch, cfg)
    size = cfg.batch_size // cfg.minibatches
    order = perms.reshape(cfg.epochs * cfg.minibatches, size)
    ts, stats = jax.lax.scan(lambda ts, idx: _minibatch_step(ts, data, idx, cfg), ts, order)
    metrics.update({k: jnp.mean(v) for k, v in stats.items()})
    return ts._replace(update_step=ts.update_step + 1), metrics


# "auto" fuses the update when the actor's CNN costs at most this many multiply-adds per
# agent and step (bench/mappo.py, 2-core CPU, 2026-12-01 23:00: the compact CNN, 14k,
# trains 1.29x faster fused; the default CNN on 16x16 maps, 0.9M, 1.15x faster split)
FUSED_MAX_CONV_MACS = 100_000


def conv_macs(obs_space: Any, actor: Any) -> int:
    """Multiply-adds of ``actor``'s (an ``ActorConfig``) CNN forward pass over one agent's
    image observations in ``obs_space`` (entries of rank 2 or 3, channel first)."""
    from agents.layers import Conv2d

    spaces = obs_space.spaces.values() if hasattr(obs_space, "spaces") else [obs_space]
    total, k = 0, actor.cnn_kernel
    for space in spaces:
        if len(space.shape) not in (2, 3):
            continue
        c, h, w = (1, *space.shape) if len(space.shape) == 2 else space.shape
        for out_c, stride in zip(actor.cnn_channels, actor.cnn_strides, strict=True):
            h, w = Conv2d.out_size(h, k, stride), Conv2d.out_size(w, k, stride)
            total += h * w * out_c * c * k * k
            c = out_c
    return int(total)


def uses_fused_update(cfg: MAPPOConfig, obs_space: Any, actor: Any = None) -> bool:
    """Whether ``cfg.update`` means the fused update for an actor (``actor``: its
    ``ActorConfig``) reading ``obs_space``. "auto": fused for vector observations and for
    a CNN of at most :data:`FUSED_MAX_CONV_MACS` multiply-adds; split for a larger CNN,
    or for images when ``actor`` is not given."""
    if cfg.update != "auto":
        return cfg.update == "fused"
    spaces = obs_space.spaces.values() if hasattr(obs_space, "spaces") else [obs_space]
    if all(len(space.shape) == 1 for space in spaces):
        return True
    return actor is not None and conv_macs(obs_space, actor) <= FUSED_MAX_CONV_MACS


# ---------------------------------------------------------------------------------------
# pure-JAX collection
# ---------------------------------------------------------------------------------------
def _skill_reward(skill_rewards: jax.Array, held: Any) -> jax.Array:
    """``skill_rewards[i, skill_i]`` for every agent: [..., N, K] -> [..., N]."""
    ids = skill_ids(held)
    return jnp.take_along_axis(skill_rewards, ids[..., None], axis=-1)[..., 0]


def collect(env: SwarmEnv, ts: TrainState, cfg: MAPPOConfig,
            deterministic: bool = False) -> tuple[TrainState, Batch, dict]:
    """Run ``num_steps`` steps of every env copy with the current actor (``lax.scan``
    over time, ``vmap`` over envs). Returns the advanced state, the batch and rollout
    statistics (completed-episode returns, dense and team reward per step)."""
    actor, critic = ts.actor, ts.critic
    period = cfg.selector_period

    def policy(key, obs, adj, held, t):
        return actor.step(key, obs, adj, held, t, period, deterministic,
                          cfg.option_exploration)

    def one_step(carry, key):
        ro: RolloutState = carry
        k_act, k_env = jax.random.split(key)
        e = ro.ep_t.shape[0]
        adj = jax.vmap(env.comm_graph)(ro.env_state)
        gstate = jax.vmap(critic.state)(jax.vmap(env.global_state_at)(ro.env_state, ro.obs),
                                        ro.ep_t)
        held, out = jax.vmap(policy)(jax.random.split(k_act, e), ro.obs, adj, ro.held, ro.ep_t)
        obs, env_state, eo = jax.vmap(auto_reset_step, in_axes=(None, 0, 0, 0))(
            env, jax.random.split(k_env, e), ro.env_state, out.env_action)
        reward = _skill_reward(eo.skill_rewards, held)
        ep_return = ro.ep_return + eo.reward.mean(-1)
        ep_team = ro.ep_team_return + eo.team_reward
        step = dict(
            obs=ro.obs, adj=adj, global_state=gstate, held=held, action=out.action,
            log_prob=out.log_prob, reward=reward, done=eo.done,
            env_reward=eo.reward.mean(-1), team_reward=eo.team_reward,
            finished_return=ep_return, finished_team=ep_team,
        )
        keep = lambda x: jnp.where(eo.done, 0.0, x)
        ro = RolloutState(env_state, obs, held, jnp.where(eo.done, 0, ro.ep_t + 1),
                          keep(ep_return), keep(ep_team))
        return ro, step

    key, key_collect = jax.random.split(ts.key)
    ro, traj = jax.lax.scan(one_step, ts.rollout, jax.random.split(key_collect, cfg.num_steps))
    last_gs = jax.vmap(critic.state)(jax.vmap(env.global_state_at)(ro.env_state, ro.obs),
                                     ro.ep_t)
    # the value of the state after the last step, under the skill the agents would hold
    last_adj = jax.vmap(env.comm_graph)(ro.env_state)
    last_keys = jax.random.split(jax.random.fold_in(key_collect, cfg.num_steps),
                                 ro.ep_t.shape[0])  # used by random options only
    last_held = jax.vmap(lambda o, a, h, t, k: actor.select_skills(o, a, h, t, period, k))(
        ro.obs, last_adj, ro.held, ro.ep_t, last_keys)
    last_value = jax.vmap(critic)(last_gs, skill_ids(last_held))
    # the critic's values of the whole trajectory in one batched call, after the scan (the
    # policy does not need them): one [T*E]-row matmul per layer instead of T small ones
    t_len, e = traj["reward"].shape[:2]
    flat = lambda x: x.reshape(t_len * e, *x.shape[2:])
    value = jax.vmap(critic)(flat(traj["global_state"]), flat(skill_ids(traj["held"])))
    batch = Batch(
        obs=traj["obs"], adj=traj["adj"], global_state=traj["global_state"], held=traj["held"],
        action=traj["action"], log_prob=traj["log_prob"], value=value.reshape(t_len, e, -1),
        reward=traj["reward"],
        done=jnp.broadcast_to(traj["done"][..., None], traj["reward"].shape).astype(jnp.float32),
        alive=jnp.ones(traj["reward"].shape, jnp.float32), last_value=last_value,
    )
    done = traj["done"].astype(jnp.float32)
    episodes = done.sum()
    stats = {
        "episodes": episodes,
        "episode_return": jnp.where(episodes > 0, (traj["finished_return"] * done).sum()
                                    / jnp.maximum(episodes, 1.0), jnp.nan),
        "team_return": jnp.where(episodes > 0, (traj["finished_team"] * done).sum()
                                 / jnp.maximum(episodes, 1.0), jnp.nan),
        "env_reward": traj["env_reward"].mean(),
        "team_reward": traj["team_reward"].mean(),
    }
    ts = ts._replace(rollout=ro, key=key, env_steps=ts.env_steps + cfg.batch_size)
    return ts, batch, stats


def fused_train_step(env: SwarmEnv, ts: TrainState, cfg: MAPPOConfig
                     ) -> tuple[TrainState, dict]:
    """One train step as a pure function (collect, then :func:`update_fused`): what
    :func:`make_train_step` jits when the update is fused; ``vmap`` it over seeds."""
    ts, batch, rollout_stats = collect(env, ts, cfg)
    ts, metrics = update_fused(ts, batch, cfg)
    return ts, {**metrics, **rollout_stats, "env_steps": ts.env_steps}


def make_train_step(env: SwarmEnv, cfg: MAPPOConfig, actor: Any = None
                    ) -> Callable[[TrainState], tuple[TrainState, dict]]:
    """``train_step(ts) -> (ts, metrics)``: collect ``num_steps x num_envs`` (``lax.scan``
    over time, ``vmap`` over envs), then the update: the whole step one jitted program
    with the fused update (:func:`fused_train_step`), or the jitted collection and the
    split update's jitted pieces (see ``MAPPOConfig.update``; ``actor``, the
    ``ActorConfig``, sizes the CNN for "auto"). ``metrics`` holds the
    rollout statistics (``episode_return``, ``team_return``, ``env_reward``,
    ``team_reward``, ``episodes``), the losses (``policy_loss``, ``value_loss``,
    ``entropy``), ``approx_kl``, ``clip_fraction``, ``explained_variance``, ``grad_norm``
    and ``env_steps``."""
    if uses_fused_update(cfg, env.observation_space, actor):
        return eqx.filter_jit(lambda ts: fused_train_step(env, ts, cfg))
    collect_jit = eqx.filter_jit(lambda ts: collect(env, ts, cfg))

    def split_step(ts: TrainState) -> tuple[TrainState, dict]:
        ts, batch, rollout_stats = collect_jit(ts)
        ts, metrics = update(ts, batch, cfg)
        return ts, {**metrics, **rollout_stats, "env_steps": ts.env_steps}

    return split_step


def guarded(step: Callable[[TrainState], tuple[TrainState, dict]],
            keep: Callable | None = None
            ) -> Callable[[TrainState], tuple[TrainState, dict, jax.Array]]:
    """``step`` followed by ``keep`` (default :func:`keep_finite`): ``ts -> (ts, metrics,
    skipped)``. With pure ``step`` and the default ``keep`` the composition is pure: jit
    or vmap it as one program; pass a jitted ``keep`` to guard a Python-level step."""
    keep = keep_finite if keep is None else keep

    def guarded_step(ts: TrainState) -> tuple[TrainState, dict, jax.Array]:
        after, metrics = step(ts)
        kept, skipped = keep(ts, after, metrics)
        return kept, metrics, skipped

    return guarded_step


def make_guarded_train_step(env: SwarmEnv, cfg: MAPPOConfig, actor: Any = None
                            ) -> Callable[[TrainState], tuple[TrainState, dict, jax.Array]]:
    """``step(ts) -> (ts, metrics, skipped)``: :func:`make_train_step`'s step with a
    non-finite update undone (:func:`keep_finite`). With the fused update the step and
    the guard are one jitted program: a second dispatch per step (pytree flattening
    included) cost about 6% of a 45 ms train step on MPE (2-core CPU)."""
    if uses_fused_update(cfg, env.observation_space, actor):
        return eqx.filter_jit(guarded(lambda ts: fused_train_step(env, ts, cfg)))
    return guarded(make_train_step(env, cfg, actor), eqx.filter_jit(keep_finite))


def make_rollout(env: SwarmEnv, cfg: MAPPOConfig) -> Callable[[TrainState], tuple[TrainState,
                                                                                 dict]]:
    """Collection only, jitted: the reference for the training overhead (bench)."""

    @eqx.filter_jit
    def rollout(ts: TrainState) -> tuple[TrainState, dict]:
        ts, batch, stats = collect(env, ts, cfg)
        stats["checksum"] = batch.reward.sum() + batch.log_prob.sum()  # keep it all live
        return ts, stats

    return rollout
