"""GAE and the clipped-PPO update, shared by the JAX path and the host path: the split
update (a Python loop over jitted pieces) and the fused one (one ``lax.scan``), and the
rule that picks between them for an actor and its observations.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import optax

from agents import ActorConfig
from feudal_es.mappo.config import MAPPOConfig
from feudal_es.mappo.state import (
    Batch,
    TrainState,
    make_optimizers,
    option_skills,
    trainable,
    uses_sequences,
)

__all__ = ["FUSED_MAX_CONV_MACS", "anchor_distance", "conv_macs", "gae", "loss", "update",
           "update_fused", "uses_fused_update"]


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
def _masked_mean(x: jax.Array, mask: jax.Array, axis: str | None = None) -> jax.Array:
    """The mean of ``x`` where ``mask``; over every device of a data-parallel ``axis``."""
    if axis is None:
        return (x * mask).sum() / jnp.maximum(mask.sum(), 1.0)
    total = jax.lax.psum(jnp.stack([(x * mask).sum(), mask.sum()]), axis)
    return total[0] / jnp.maximum(total[1], 1.0)


def _value_loss(err: jax.Array, delta: float) -> jax.Array:
    if delta > 0:
        return optax.huber_loss(err, delta=delta)
    return 0.5 * err**2


def anchor_distance(params: Any, anchor: Any) -> jax.Array:
    """Squared Euclidean distance between two executors' leaves (``trainable(actor)[0]``
    of one architecture): what the L2-SP term weighs (``MAPPOConfig.anchor_coef``)."""
    pairs = zip(jax.tree.leaves(params), jax.tree.leaves(anchor), strict=True)
    return sum((jnp.sum(jnp.square(p - a)) for p, a in pairs), jnp.zeros(()))


def loss(params: tuple[Any, Any], rest: tuple[Any, Any], mb: dict, cfg: MAPPOConfig,
         anchor: Any = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clipped-PPO loss of a minibatch ``mb``: ``(total, stats)``. ``params`` are the
    (executor, critic) leaves being differentiated, ``rest`` their complements; with an
    ``anchor`` (``TrainState.anchor``) the total adds ``cfg.anchor_coef / 2`` times the
    executor's squared distance from it (stat ``anchor_distance``)."""
    actor_params, critic_params = params
    actor = eqx.combine(actor_params, rest[0])
    critic = eqx.combine(critic_params, rest[1])
    if uses_sequences(actor, critic):  # [L, B, ...] leaves, B sequences (_sequences)
        if actor.recurrent:
            log_prob, entropy = jax.vmap(actor.evaluate_sequence, in_axes=(1, 1, 1, 1, 1, 0),
                                         out_axes=1)(mb["obs"], mb["adj"], mb["option"],
                                                     mb["action"], mb["first"], mb["hidden"])
        else:
            log_prob, entropy = jax.vmap(jax.vmap(actor.evaluate))(
                mb["obs"], mb["adj"], mb["option"], mb["action"])
        if critic.recurrent:
            value = jax.vmap(critic.sequence, in_axes=(0, 1, 1, 1), out_axes=1)(
                mb["critic_hidden"], mb["global_state"], option_skills(mb["option"]),
                mb["first"])
        else:
            value = jax.vmap(jax.vmap(critic))(mb["global_state"], option_skills(mb["option"]))
    else:
        log_prob, entropy = jax.vmap(actor.evaluate)(mb["obs"], mb["adj"], mb["option"],
                                                     mb["action"])
        value = jax.vmap(critic)(mb["global_state"], option_skills(mb["option"]))
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
    extra = {}
    if anchor is not None:
        extra["anchor_distance"] = anchor_distance(actor_params, anchor)
        total = total + 0.5 * cfg.anchor_coef * extra["anchor_distance"]
    stats = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy_mean,
        "approx_kl": _masked_mean((ratio - 1.0) - log_ratio, mask),
        "clip_fraction": _masked_mean((jnp.abs(ratio - 1.0) > cfg.clip_eps).astype(jnp.float32),
                                      mask),
        **extra,
    }
    return total, stats


def _prepare(ts: TrainState, batch: Batch, cfg: MAPPOConfig, axis: str | None = None):
    """GAE, the value-norm update and advantage normalization; flat ``[T*E, ...]`` data,
    one shuffle per epoch, and the rollout-side metrics. Under a data-parallel ``axis``
    the batch is this device's ``T x E/D`` share: the statistics (value norm, advantage
    normalization, metrics) are the whole batch's, the shuffle this device's own. With a
    recurrent executor or critic the data stay time-major, ``[L, S, ...]``, and are
    shuffled by sequence: a minibatch is whole sequences (:func:`_sequences`)."""
    mm = lambda x, m: _masked_mean(x, m, axis)
    vn = ts.value_norm
    denorm = vn.denormalize if cfg.value_norm else (lambda v: v)
    value = denorm(batch.value)
    advantage, returns = gae(batch.reward, value, batch.done, denorm(batch.last_value),
                             cfg.gamma, cfg.gae_lambda)
    alive = batch.alive.astype(jnp.float32)
    if cfg.value_norm:
        vn = vn.update(returns, alive, axis)
        target = vn.normalize(returns)
    else:
        target = returns
    if cfg.norm_advantages:
        mean = mm(advantage, alive)
        std = jnp.sqrt(mm((advantage - mean) ** 2, alive))
        advantage = (advantage - mean) / (std + 1e-8)
    data = {
        "obs": batch.obs, "adj": batch.adj, "global_state": batch.global_state,
        "option": batch.option, "action": batch.action, "log_prob": batch.log_prob,
        "value": batch.value, "alive": alive, "advantage": advantage, "target": target,
    }
    if uses_sequences(ts.actor, ts.critic):  # shuffled by sequence: time-major [L, S, ...]
        data.update(first=batch.first)
        if ts.critic.recurrent:  # cut like the rest; each piece keeps its entering state
            data.update(critic_hidden=batch.critic_hidden)
        recurrent = ts.actor.recurrent
        data, hidden = _sequences(data, batch.hidden if recurrent else None,
                                  batch.option.hidden if recurrent else None,
                                  cfg.sequence_length)
        if recurrent:
            data["hidden"] = hidden
        if ts.critic.recurrent:
            data["critic_hidden"] = data["critic_hidden"][0]  # [S, H]
        size = data["first"].shape[1]
    else:
        size = batch.reward.shape[0] * batch.reward.shape[1]  # T * E (this device's E)
        data = jax.tree.map(lambda x: x.reshape((size, *x.shape[2:])), data)
    key, key_update = jax.random.split(ts.key)
    if axis is not None and jax.lax.axis_size(axis) > 1:  # each device its own shuffle
        key_update = jax.random.fold_in(key_update, jax.lax.axis_index(axis))
    perms = jax.vmap(lambda k: jax.random.permutation(k, size))(
        jax.random.split(key_update, cfg.epochs))
    residual = returns - value
    metrics = {
        "explained_variance": 1.0 - mm((residual - mm(residual, alive)) ** 2, alive) / (
            mm((returns - mm(returns, alive)) ** 2, alive) + 1e-8),
        "value_mean": mm(value, alive),
        "skill_reward": mm(batch.reward, alive),
    }
    return ts._replace(value_norm=vn, key=key), data, perms, metrics


def _sequences(data: dict, hidden0: jax.Array | None, hidden_out: jax.Array | None,
               length: int) -> tuple[dict, jax.Array | None]:
    """The training sequences of a recurrent executor or critic: the ``[T, E, ...]``
    leaves of ``data`` (``data["first"]`` among them) cut into ``T / length`` pieces per
    env copy, ``[length, T / length * E, ...]`` (piece ``c`` of copy ``e`` at
    ``c * E + e``), and a recurrent executor's GRU state entering each piece: the
    collection's entering state ``hidden0`` ``[E, N, H]`` for the first, else the state
    the step before it left (``hidden_out`` ``[T, E, N, H]``; a reset at the piece's
    first step is the ``first`` flag's job); ``None`` without one. A leaf of the state
    entering each step (a recurrent critic's ``critic_hidden``) gives each piece's at
    its step 0. ``length`` 0 or ``T``: whole sequences."""
    t_len = data["first"].shape[0]
    length = length or t_len
    if length == t_len:
        return data, hidden0
    pieces = t_len // length

    def cut(x: jax.Array) -> jax.Array:
        x = x.reshape(pieces, length, *x.shape[1:])
        return jnp.swapaxes(x, 0, 1).reshape(length, pieces * x.shape[2], *x.shape[3:])

    if hidden0 is None:
        return jax.tree.map(cut, data), None
    starts = jnp.concatenate([hidden0[None], hidden_out[length - 1:t_len - 1:length]])
    return jax.tree.map(cut, data), starts.reshape(-1, *starts.shape[2:])


def _minibatch_step(ts: TrainState, data: dict, idx: jax.Array, cfg: MAPPOConfig,
                    axis: str | None = None):
    """One clipped-PPO gradient step on the samples ``idx`` of ``data``. Under a
    data-parallel ``axis`` the gradients (and statistics) are averaged over its devices
    first: the step on the union of every device's minibatch (of equal sizes and, as on
    the JAX path, no dead agents), taken identically everywhere."""
    actor_tx, critic_tx = make_optimizers(cfg)
    actor_params, actor_rest = trainable(ts.actor)
    critic_params, critic_rest = eqx.partition(ts.critic, eqx.is_inexact_array)
    if uses_sequences(ts.actor, ts.critic):  # idx: sequences; time-major leaves but the
        # GRU states entering them
        mb = {k: (v[idx] if k in ("hidden", "critic_hidden")
                  else jax.tree.map(lambda x: x[:, idx], v)) for k, v in data.items()}
    else:
        mb = jax.tree.map(lambda x: x[idx], data)
    grads, stats = jax.grad(loss, has_aux=True)(
        (actor_params, critic_params), (actor_rest, critic_rest), mb, cfg, ts.anchor)
    if axis is not None:  # one all-reduce of one flat vector, not one per leaf
        flat, unflatten = jax.flatten_util.ravel_pytree((grads, stats))
        grads, stats = unflatten(jax.lax.pmean(flat, axis))
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
    body slower than in straight-line code (bench/RESULTS.md, the update modes), and a
    Python loop keeps one compilation for all minibatches. Without a CNN, or with a small
    one, :func:`update_fused` is faster (:func:`uses_fused_update`).
    """
    ts, data, perms, metrics = _prepare_jit(ts, batch, cfg)
    size = perms.shape[1] // cfg.minibatches
    stats = []
    for epoch in range(cfg.epochs):
        for m in range(cfg.minibatches):
            ts, s = _minibatch_step_jit(ts, data, perms[epoch, m * size:(m + 1) * size], cfg)
            stats.append(s)
    metrics.update({k: jnp.mean(jnp.stack([s[k] for s in stats])) for k in stats[0]})
    return ts._replace(update_step=ts.update_step + 1), metrics


def update_fused(ts: TrainState, batch: Batch, cfg: MAPPOConfig, axis: str | None = None
                 ) -> tuple[TrainState, dict]:
    """:func:`update` with the epochs x minibatches loop as one ``lax.scan`` (pure;
    call it under ``jit``): the same minibatches in the same order, one program.
    ``axis``: the mesh axis of a data-parallel step (``batch`` is this device's share;
    see :func:`_prepare` and :func:`_minibatch_step`)."""
    ts, data, perms, metrics = _prepare(ts, batch, cfg, axis)
    order = perms.reshape(cfg.epochs * cfg.minibatches, -1)
    ts, stats = jax.lax.scan(lambda ts, idx: _minibatch_step(ts, data, idx, cfg, axis), ts,
                             order)
    metrics.update({k: jnp.mean(v) for k, v in stats.items()})
    return ts._replace(update_step=ts.update_step + 1), metrics


# "auto" fuses the update when the actor's CNN costs at most this many multiply-adds per
# agent and step: the compact CNN trains faster fused, the default CNN on 16x16 maps
# faster split (bench/mappo.py's update modes; figures in bench/RESULTS.md)
FUSED_MAX_CONV_MACS = 100_000


def conv_macs(obs_space: Any, actor: ActorConfig) -> int:
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


def uses_fused_update(cfg: MAPPOConfig, obs_space: Any, actor: ActorConfig | None = None
                      ) -> bool:
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
