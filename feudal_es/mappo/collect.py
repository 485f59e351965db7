"""Pure-JAX collection and the train steps built on it: ``num_steps x num_envs``
transitions with ``lax.scan`` over time and ``vmap`` over env copies, then the update;
options drawn from the selector (mixed with uniform ones, ``option_exploration``) and
kept for the actor's ``selector_period``. A recurrent critic's GRU state is carried
through the scan beside the options (``RolloutState.critic_hidden``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from envs.base import SwarmEnv, auto_reset_step
from feudal_es.group_fitness import agent_team_reward
from feudal_es.mappo.config import MAPPOConfig
from feudal_es.mappo.state import (
    Batch,
    RolloutState,
    TrainState,
    keep_finite,
    option_skills,
    uses_sequences,
)
from feudal_es.mappo.update import update, update_fused, uses_fused_update

__all__ = ["agent_reward", "collect", "fused_train_step", "guarded", "make_guarded_train_step",
           "make_rollout", "make_train_step", "repeated"]


def _option_reward(skill_rewards: jax.Array, option: Any) -> jax.Array:
    """``skill_rewards[i, skill_i]`` for every agent: [..., N, K] -> [..., N]."""
    ids = option_skills(option)
    return jnp.take_along_axis(skill_rewards, ids[..., None], axis=-1)[..., 0]


def agent_reward(kind: str, eo: Any, option: Any, team: jax.Array | None = None
                 ) -> jax.Array:
    """Each agent's training reward ``[..., N]`` of one step (``MAPPOConfig.reward``):
    the held option's dense channel, the env's dense reward, the team reward given to
    every agent, or the sum of the last two. ``team[..., N]``: each agent's own team
    reward instead (``others="train"``: its group's, feudal_es.group_fitness)."""
    if kind == "option":
        return _option_reward(eo.skill_rewards, option)
    if team is None:
        team = jnp.broadcast_to(eo.team_reward[..., None], eo.reward.shape)
    if kind == "local":
        return eo.reward
    if kind == "team":
        return team
    if kind == "mixed":
        return eo.reward + team
    raise ValueError(f"MAPPOConfig.reward must be one of option, local, team, mixed; got "
                     f"{kind!r}")


def _env_keys(key: jax.Array, e: int, axis: str | None) -> jax.Array:
    """One key per env copy: ``split(key, e)``; under a data-parallel ``axis`` (``e``
    copies on each of its devices) this device's rows of ``split(key, e * devices)``, so
    every copy draws what it would draw with all copies on one device."""
    if axis is None:
        return jax.random.split(key, e)
    every = jax.random.split(key, e * jax.lax.axis_size(axis))
    return jax.lax.dynamic_slice_in_dim(every, jax.lax.axis_index(axis) * e, e)


def collect(env: SwarmEnv, ts: TrainState, cfg: MAPPOConfig,
            deterministic: bool = False, axis: str | None = None
            ) -> tuple[TrainState, Batch, dict]:
    """Run ``num_steps`` steps of every env copy with the current actor (``lax.scan``
    over time, ``vmap`` over envs). Returns the advanced state, the batch and rollout
    statistics (completed-episode returns, dense and team reward per step).

    ``axis``: the mesh axis of a data-parallel step (:mod:`feudal_es.mappo.parallel`):
    ``ts.rollout`` holds this device's share of the ``cfg.num_envs`` copies, the batch is
    this device's, and the statistics and the env-step counter are the whole swarm's."""
    actor, critic = ts.actor, ts.critic
    if critic.recurrent and ts.rollout.critic_hidden is None:
        raise ValueError("a recurrent critic carries a GRU state per env copy: build the "
                         "rollout with mappo.init_rollout(..., critic) (RolloutState."
                         "critic_hidden)")
    total = (lambda x: x) if axis is None else (lambda x: jax.lax.psum(x, axis))
    mean = (lambda x: x) if axis is None else (lambda x: jax.lax.pmean(x, axis))

    def policy(key, obs, adj, option, t, state):
        return actor.step(key, obs, adj, option, t, deterministic, cfg.option_exploration,
                          done=actor.options_done(env, state))

    def one_step(carry, key):
        ro: RolloutState = carry
        k_act, k_env = jax.random.split(key)
        e = ro.ep_t.shape[0]
        adj = jax.vmap(env.comm_graph)(ro.env_state)
        gstate = jax.vmap(critic.state)(jax.vmap(env.global_state_at)(ro.env_state, ro.obs),
                                        ro.ep_t)
        option, out = jax.vmap(policy)(_env_keys(k_act, e, axis), ro.obs, adj, ro.option,
                                       ro.ep_t, ro.env_state)
        obs, env_state, eo = jax.vmap(auto_reset_step, in_axes=(None, 0, 0, 0))(
            env, _env_keys(k_env, e, axis), ro.env_state, out.env_action)
        reward = agent_reward(cfg.reward, eo, option, agent_team_reward(env, eo))
        ep_return = ro.ep_return + eo.reward.mean(-1)
        ep_team = ro.ep_team_return + eo.team_reward
        first = ro.ep_t == 0
        step = dict(
            obs=ro.obs, adj=adj, global_state=gstate, option=option, action=out.action,
            first=first,
            log_prob=out.log_prob, reward=reward, done=eo.done,
            env_reward=eo.reward.mean(-1), team_reward=eo.team_reward,
            finished_return=ep_return, finished_team=ep_team,
        )
        critic_hidden = None
        if critic.recurrent:  # the GRU's output at this step; its values after the scan
            critic_hidden = jax.vmap(critic.recur)(ro.critic_hidden, gstate, first)
            step["critic_out"] = critic_hidden
        keep = lambda x: jnp.where(eo.done, 0.0, x)
        ro = RolloutState(env_state, obs, option, jnp.where(eo.done, 0, ro.ep_t + 1),
                          keep(ep_return), keep(ep_team), critic_hidden)
        return ro, step

    key, key_collect = jax.random.split(ts.key)
    ro, traj = jax.lax.scan(one_step, ts.rollout, jax.random.split(key_collect, cfg.num_steps))
    last_gs = jax.vmap(critic.state)(jax.vmap(env.global_state_at)(ro.env_state, ro.obs),
                                     ro.ep_t)
    # the value of the state after the last step, under the skill the agents would hold
    last_adj = jax.vmap(env.comm_graph)(ro.env_state)
    last_keys = _env_keys(jax.random.fold_in(key_collect, cfg.num_steps), ro.ep_t.shape[0],
                          axis)  # used by random options only
    last_option = jax.vmap(lambda o, a, h, t, k, s: actor.select_option(
        o, a, h, t, k, actor.options_done(env, s)))(
        ro.obs, last_adj, ro.option, ro.ep_t, last_keys, ro.env_state)
    # the critic's values of the whole trajectory in one batched call, after the scan (the
    # policy does not need them): one [T*E]-row matmul per layer instead of T small ones
    t_len, e = traj["reward"].shape[:2]
    flat = lambda x: x.reshape(t_len * e, *x.shape[2:])
    skills = flat(option_skills(traj["option"]))
    if critic.recurrent:  # the MLP on the GRU outputs; the bootstrap reads one more state
        last_value = jax.vmap(critic.step)(ro.critic_hidden, last_gs,
                                           option_skills(last_option), ro.ep_t == 0)[1]
        value = jax.vmap(critic.values)(flat(traj["critic_out"]), skills)
        # the state entering each step: the collection's first, then each step's output
        critic_entering = jnp.concatenate([ts.rollout.critic_hidden[None],
                                           traj["critic_out"][:-1]])
    else:
        last_value = jax.vmap(critic)(last_gs, option_skills(last_option))
        value = jax.vmap(critic)(flat(traj["global_state"]), skills)
    batch = Batch(
        obs=traj["obs"], adj=traj["adj"], global_state=traj["global_state"], option=traj["option"],
        action=traj["action"], log_prob=traj["log_prob"], value=value.reshape(t_len, e, -1),
        reward=traj["reward"],
        done=jnp.broadcast_to(traj["done"][..., None], traj["reward"].shape).astype(jnp.float32),
        alive=jnp.broadcast_to(getattr(actor, "agent_mask", 1.0), traj["reward"].shape
                               ).astype(jnp.float32), last_value=last_value,
        **({"first": traj["first"]} if uses_sequences(actor, critic) else {}),
        **({"hidden": ts.rollout.option.hidden} if actor.recurrent else {}),
        **({"critic_hidden": critic_entering} if critic.recurrent else {}),
    )
    done = traj["done"].astype(jnp.float32)
    episodes = total(done.sum())
    stats = {
        "episodes": episodes,
        "episode_return": jnp.where(episodes > 0, total((traj["finished_return"] * done).sum())
                                    / jnp.maximum(episodes, 1.0), jnp.nan),
        "team_return": jnp.where(episodes > 0, total((traj["finished_team"] * done).sum())
                                 / jnp.maximum(episodes, 1.0), jnp.nan),
        "env_reward": mean(traj["env_reward"].mean()),
        "team_reward": mean(traj["team_reward"].mean()),
    }
    ts = ts._replace(rollout=ro, key=key, env_steps=ts.env_steps + cfg.batch_size)
    return ts, batch, stats


def fused_train_step(env: SwarmEnv, ts: TrainState, cfg: MAPPOConfig,
                     axis: str | None = None) -> tuple[TrainState, dict]:
    """One train step as a pure function (collect, then :func:`update_fused`): what
    :func:`make_train_step` jits when the update is fused; ``vmap`` it over seeds.
    ``axis``: the mesh axis of a data-parallel step (see :func:`collect`)."""
    ts, batch, rollout_stats = collect(env, ts, cfg, axis=axis)
    ts, metrics = update_fused(ts, batch, cfg, axis)
    return ts, {**metrics, **rollout_stats, "env_steps": ts.env_steps}


def make_train_step(env: SwarmEnv, cfg: MAPPOConfig, fused: bool | None = None
                    ) -> Callable[[TrainState], tuple[TrainState, dict]]:
    """``train_step(ts) -> (ts, metrics)``: collect ``num_steps x num_envs`` (``lax.scan``
    over time, ``vmap`` over envs), then the update: the whole step one jitted program
    with the fused update (:func:`fused_train_step`), or the jitted collection and the
    split update's jitted pieces (``fused``, as the caller decided it with
    :func:`uses_fused_update`; ``None`` decides it here without knowing the actor's CNN).
    ``metrics`` holds the
    rollout statistics (``episode_return``, ``team_return``, ``env_reward``,
    ``team_reward``, ``episodes``), the losses (``policy_loss``, ``value_loss``,
    ``entropy``), ``approx_kl``, ``clip_fraction``, ``explained_variance``, ``grad_norm``
    and ``env_steps``."""
    if uses_fused_update(cfg, env.observation_space) if fused is None else fused:
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


def repeated(step: Callable[[TrainState], tuple[TrainState, dict, jax.Array]], n: int
             ) -> Callable[[TrainState], tuple[TrainState, dict, jax.Array]]:
    """``n`` applications of a pure guarded ``step`` (:func:`guarded`) as one ``lax.scan``:
    ``ts -> (ts, metrics, skipped)``, each metric and ``skipped`` stacked over the ``n``
    steps (a leading axis). Jitted, a round's gradient steps are one call: on a CPU each
    call of a small step costs a visible share of it (dispatch, and under a data-parallel
    ``shard_map`` the devices meeting again), so a round pays it once."""
    if n < 1:
        raise ValueError(f"repeated needs n >= 1 steps, got {n}")

    def body(ts: TrainState, _: None) -> tuple[TrainState, tuple[dict, jax.Array]]:
        ts, metrics, skipped = step(ts)
        return ts, (metrics, skipped)

    def steps(ts: TrainState) -> tuple[TrainState, dict, jax.Array]:
        ts, (metrics, skipped) = jax.lax.scan(body, ts, None, length=n)
        return ts, metrics, skipped

    return steps


def make_guarded_train_step(env: SwarmEnv, cfg: MAPPOConfig, fused: bool | None = None
                            ) -> Callable[[TrainState], tuple[TrainState, dict, jax.Array]]:
    """``step(ts) -> (ts, metrics, skipped)``: :func:`make_train_step`'s step with a
    non-finite update undone (:func:`keep_finite`). With the fused update the step and
    the guard are one jitted program: a second dispatch per step (pytree flattening
    included) costs a visible share of a small train step."""
    if uses_fused_update(cfg, env.observation_space) if fused is None else fused:
        return eqx.filter_jit(guarded(lambda ts: fused_train_step(env, ts, cfg)))
    return guarded(make_train_step(env, cfg, False), eqx.filter_jit(keep_finite))


def make_rollout(env: SwarmEnv, cfg: MAPPOConfig) -> Callable[[TrainState], tuple[TrainState,
                                                                                 dict]]:
    """Collection only, jitted: the reference for the training overhead (bench)."""

    @eqx.filter_jit
    def rollout(ts: TrainState) -> tuple[TrainState, dict]:
        ts, batch, stats = collect(env, ts, cfg)
        stats["checksum"] = batch.reward.sum() + batch.log_prob.sum()  # keep it all live
        return ts, stats

    return rollout
