"""Imitation pretraining of the executor: behaviour cloning, then DAgger, from a reference
policy of the env (e.g. the clairvoyant Lloyd / CVT controller on Coverage, as LPAC does).

The expert acts from the full env state; the executor sees only each agent's local
observation (and the comm graph), holding one option (``PretrainConfig.option``, e.g.
Coverage's ``"cover"``). Round 0 labels the expert's own episodes (behaviour cloning);
each DAgger round (Ross et al. 2011) rolls out the current executor — the expert's action
taken with probability ``beta`` per step, decaying — and adds the states it visits,
labelled by the expert, to the data set. The executor's deterministic action is fit to
the expert's by mean squared error; only executor leaves move (``agents.executor_filter``).
The result is saved as a checkpoint holding the actor, which a run starts from with
``TrainerConfig.init_from`` (MERL or MAPPO fine-tuning) — ``feudal-es pretrain``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents import FeudalActor, executor_filter
from envs.base import SwarmEnv
from envs.validate import check_int, check_number
from feudal_es import checkpoint

if TYPE_CHECKING:
    from feudal_es.config import TrainerConfig

__all__ = ["PretrainConfig", "expert_policy", "imitate", "load_pretrained", "pretrain",
           "save_pretrained"]


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """What and how long to imitate (frozen, validated; errors name the field)."""

    expert: str = "reference"  # a policy of envs.gif.POLICIES for the env ("reference": its first)
    option: int = 0  # the option the executor holds while imitating (Coverage: 1 = "cover")
    episodes: int = 32  # episodes collected per data round
    rounds: int = 3  # data rounds: behaviour cloning, then rounds - 1 DAgger rounds
    steps_per_round: int = 300  # gradient steps after each data round
    batch_size: int = 256  # swarm samples per gradient step
    lr: float = 1e-3
    beta_decay: float = 0.5  # DAgger: P(expert acts) in round r is beta_decay ** r
    seed: int = 0

    def __post_init__(self) -> None:
        c = type(self).__name__
        for name, low in (("option", 0), ("episodes", 1), ("rounds", 1),
                          ("steps_per_round", 1), ("batch_size", 1), ("seed", 0)):
            check_int(f"{c}.{name}", getattr(self, name), low)
        check_number(f"{c}.lr", self.lr, low=0.0, low_open=True)
        check_number(f"{c}.beta_decay", self.beta_decay, low=0.0, high=1.0)


def expert_policy(env_id: str, name: str = "reference") -> tuple[str, Callable]:
    """``(name, policy)`` of a bundled env's reference policy (``envs.gif.POLICIES``)."""
    from envs.gif import resolve_policy
    from envs.registration import BUNDLED_ENVS

    env_name = env_id.rpartition("/")[2].rpartition("-v")[0]
    if env_name not in BUNDLED_ENVS:
        raise ValueError(f"imitation needs a bundled env with reference policies, got "
                         f"{env_id!r}")
    return resolve_policy(env_name, name)


def _episodes(env: SwarmEnv, expert: Callable, actor: FeudalActor, key: jax.Array,
              episodes: int, option: int, beta: float) -> dict[str, jax.Array]:
    """``episodes`` rollouts in which each step the expert acts with probability ``beta``
    (else the executor, deterministic): every visited (obs, adj) with the expert's label."""
    fixed_option = jnp.full((env.num_agents,), option, jnp.int32)

    def one(key: jax.Array) -> dict[str, jax.Array]:
        k_reset, k_run = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def body(carry, k):
            obs, state = carry
            k_exp, k_coin, k_env = jax.random.split(k, 3)
            adj = env.comm_graph(state)
            label = expert(k_exp, env, state)
            mine = actor.act(k_exp, obs, adj, fixed_option, deterministic=True).env_action
            action = jnp.where(jax.random.uniform(k_coin) < beta, label, mine)
            obs2, state, _ = env.step(k_env, state, action)
            return (obs2, state), {"obs": obs, "adj": adj, "label": label}

        return jax.lax.scan(body, (obs, state), jax.random.split(k_run, env.max_steps))[1]

    data = jax.vmap(one)(jax.random.split(key, episodes))
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), data)  # [episodes * T, ...]


def imitate(env: SwarmEnv, actor: FeudalActor, expert: Callable, cfg: PretrainConfig
            ) -> tuple[FeudalActor, list[float]]:
    """Behaviour cloning then DAgger (see the module docstring): the imitating actor and
    the training loss after each gradient step."""
    tx = optax.adam(cfg.lr)
    filt = executor_filter(actor)
    opt = tx.init(eqx.filter(actor, filt))
    fixed_option = jnp.full((env.num_agents,), cfg.option, jnp.int32)
    collect = eqx.filter_jit(lambda a, k, beta: _episodes(env, expert, a, k, cfg.episodes,
                                                          cfg.option, beta))

    def loss_fn(params, rest, mb):
        a = eqx.combine(params, rest)
        act = jax.vmap(lambda o, adj: a.act(jax.random.key(0), o, adj, fixed_option,
                                            deterministic=True).env_action)(mb["obs"],
                                                                            mb["adj"])
        return jnp.mean(jnp.square(act - mb["label"]))

    size = cfg.episodes * env.max_steps  # samples per data round

    @eqx.filter_jit
    def train(actor, opt, data, count, key):
        def step(carry, k):
            actor, opt = carry
            idx = jax.random.randint(k, (cfg.batch_size,), 0, count)  # the filled part
            mb = jax.tree.map(lambda x: x[idx], data)
            params, rest = eqx.partition(actor, filt)
            loss, grads = jax.value_and_grad(loss_fn)(params, rest, mb)
            updates, opt = tx.update(grads, opt, params)
            return (eqx.combine(eqx.apply_updates(params, updates), rest), opt), loss

        (actor, opt), losses = jax.lax.scan(step, (actor, opt),
                                            jax.random.split(key, cfg.steps_per_round))
        return actor, opt, losses

    key = jax.random.key(cfg.seed)
    data, losses = None, []
    for r in range(cfg.rounds):  # one compiled collect and train for every round
        key, k_data, k_train = jax.random.split(key, 3)
        new = collect(actor, k_data, cfg.beta_decay ** r if r else 1.0)
        if data is None:  # the aggregated data set, filled round by round
            data = jax.tree.map(lambda x: jnp.zeros((cfg.rounds * size, *x.shape[1:]),
                                                    x.dtype), new)
        data = jax.tree.map(lambda d, x, r=r: jax.lax.dynamic_update_slice_in_dim(
            d, x, r * size, axis=0), data, new)
        actor, opt, round_losses = train(actor, opt, data, (r + 1) * size, k_train)
        losses += np.asarray(round_losses).tolist()
    return actor, losses


def save_pretrained(path: str | Path, actor: FeudalActor, metadata: dict[str, Any]) -> Path:
    """The imitating actor as a checkpoint file (``{"actor": actor}``, safetensors)."""
    return checkpoint.save(path, {"actor": actor}, {"kind": "pretrained_actor", **metadata})


def load_pretrained(path: str | Path, actor: FeudalActor) -> FeudalActor:
    """The actor of a :func:`save_pretrained` file, into ``actor``'s structure (an actor of
    another architecture is refused naming the first differing leaf)."""
    tree, meta = checkpoint.load(path, {"actor": actor})
    if meta.get("kind") != "pretrained_actor":
        raise checkpoint.CheckpointError(f"{path} is not a pretrained actor (feudal-es "
                                         "pretrain writes those)")
    return tree["actor"]


def pretrain(config: TrainerConfig, cfg: PretrainConfig, out: str | Path | None = None,
             eval_episodes: int = 16, eval_seed: int = 4242,
             log: Callable[[str], None] = print) -> tuple[Path, dict[str, dict], list[float]]:
    """What ``feudal-es pretrain`` runs: imitate ``cfg.expert`` on ``config``'s env
    (a :class:`~feudal_es.config.TrainerConfig`: env, env kwargs, actor sizes) holding
    ``cfg.option``, score the imitator and the expert on ``eval_episodes`` held-out
    episodes (seed ``eval_seed``) and save the actor (default path: under ``runs/``).
    A path that cannot be written is refused (the ``OSError``) before any work.
    Returns ``(path, {who: {metric: mean}}, losses)``."""
    from envs.episode import run_episode, stateless
    from feudal_es.atomic import check_writable
    from feudal_es.resolve import apply_env_defaults, resolve_env
    from feudal_es.rollout import make_population_rollouts
    from feudal_es.rundir import default_run_dir
    from feudal_es.theta import selector_theta

    env = resolve_env(config.env, config.env_kwargs)
    if env.kind != "jax":
        raise ValueError(f"pretrain needs a bundled env with reference policies, got "
                         f"{config.env!r}")
    # the actor a run of this config trains (the env's defaults for what it leaves open),
    # so that --set init_from=PATH fits it
    config = apply_env_defaults(config, env)[0]
    core = env.core
    name, expert = expert_policy(config.env, cfg.expert)
    path = out or str(default_run_dir(config.env, f"{name}-pretrained")) + checkpoint.SUFFIX
    check_writable(path)
    actor_cfg = dataclasses.replace(config.actor, options="fixed", fixed_option=cfg.option)
    actor = FeudalActor.from_env(jax.random.key(config.seed), core, actor_cfg)
    log(f"feudal-es pretrain: imitating {name} on {config.env}, option "
        f"{core.skill_names[cfg.option]!r}: {cfg.rounds} rounds (behaviour cloning, then "
        f"DAgger) of {cfg.episodes} episodes and {cfg.steps_per_round} steps")
    actor, losses = imitate(core, actor, expert, cfg)
    keys = jax.random.split(jax.random.key(eval_seed), eval_episodes)
    rollouts = jax.jit(make_population_rollouts(core, True))
    ret, metrics = jax.device_get(rollouts(actor, selector_theta(actor)[None], keys))
    ret, metrics = ret[0], {k: v[0] for k, v in metrics.items()}
    ref = jax.device_get(jax.jit(jax.vmap(lambda k: run_episode(
        k, core, stateless(expert, core), record=lambda o: o.metrics)))(keys))
    rows = {"imitator": {"team_return": float(np.mean(ret)),
                         **{k: float(np.mean(v)) for k, v in metrics.items()}},
            name: {"team_return": float(np.mean(ref.team_return)),
                   **{k: float(np.mean(v[:, -1])) for k, v in ref.outs.items()}}}
    saved = save_pretrained(path, actor, {
        "env": config.env, "config": config.to_dict(), "expert": name, "option": cfg.option,
        "pretrain": dataclasses.asdict(cfg), "loss_first": losses[0], "loss_last": losses[-1],
        "heldout": rows})
    return saved, rows, losses
