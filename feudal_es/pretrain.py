"""Imitation pretraining of the executor: behaviour cloning, then DAgger, from a reference
policy of the env (e.g. the clairvoyant Lloyd / CVT controller on Coverage, as LPAC does).

The expert acts from the full env state; the executor sees only each agent's local
observation (and the comm graph), holding one option (``PretrainConfig.option``, e.g.
Coverage's ``"cover"``). Round 0 labels the expert's own episodes (behaviour cloning);
each DAgger round (Ross et al. 2011) rolls out the current executor — the expert's action
taken with probability ``beta`` per step, decaying — and adds the states it visits,
labelled by the expert, to the data set. The executor's deterministic action, before the
env's clip to its bounds (``clip_loss``), is fit to the expert's by mean squared error
(or speed and heading apart, ``loss="direction"``: :mod:`feudal_es.imitation_loss`);
only executor leaves move (``agents.executor_filter``). Each data round also collects
``val_episodes`` episodes that are never trained on: the validation loss on them is
measured every few gradient steps (the validation curve), a round's training stops after
``patience`` measurements without a better one, and the round ends with the actor of its
best validation loss (LPAC's train / validation split). An optional final fit
(``final_steps``) trains on all the rounds' data with a decaying rate (LPAC trains its
network for many epochs on the aggregated data set). With ``select_episodes``, imitate
returns the round's actor that plays best (DAgger's own last step: the best of the
rounds' policies on validation episodes), not the last. With ``augment`` each training
sample keeps its env state and, at every gradient step, is moved by a random symmetry of
the env (Coverage: the square's 8, :mod:`envs.coverage_symmetry`), observed and labelled
anew.
The feudal split (``experts`` and ``schedule``): each option imitates its own expert
(Coverage: "explore" the frontier explorer, "cover" clairvoyant Lloyd) while the executor
follows an option schedule (``ActorConfig.options="schedule"``: "explore" for the first
selector period, then "cover"), so each option learns on the states the schedule reaches,
the learner's own after the first round, and a selector can later decide the switches.
The result is saved as a checkpoint holding the actor, which a run starts from with
``TrainerConfig.init_from`` (MERL or MAPPO fine-tuning) — ``feudal-es pretrain``. With a
rounds file (:mod:`feudal_es.pretrain_rounds`) a stopped imitation resumes after its last
completed round.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents import FeudalActor, executor_filter
from envs.base import SwarmEnv
from feudal_es import checkpoint
from feudal_es.imitation_loss import action_loss
from feudal_es.pretrain_config import FINAL_DECAY, LR_SCHEDULES, PretrainConfig
from feudal_es.pretrain_curve import ImitationProgress, curve_paths, write_curve
from feudal_es.pretrain_experts import Expert, expert_policy, labeller, scheduled_expert
from feudal_es.pretrain_rounds import Rounds, load_rounds, rounds_path, save_rounds

if TYPE_CHECKING:
    from feudal_es.config import TrainerConfig

__all__ = ["FINAL_DECAY", "LR_SCHEDULES", "Imitation", "PretrainConfig", "curve_paths",
           "expert_policy", "imitate", "load_pretrained", "pretrain", "save_pretrained",
           "scheduled_expert", "write_curve"]

def _episodes(env: SwarmEnv, expert: Expert, actor: FeudalActor, key: jax.Array,
              episodes: int, beta: float, keep_state: bool = False) -> dict[str, jax.Array]:
    """``episodes`` rollouts in which each step the expert acts with probability ``beta``
    (else the executor, deterministic), the options as the actor holds them (its
    ``fixed_option`` or ``option_schedule``): every visited (obs, adj, option) with the
    label of that option's expert, and with ``keep_state`` the env state it came from."""
    label_of = labeller(env, expert)

    def one(key: jax.Array) -> dict[str, jax.Array]:
        k_reset, k_run = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def body(carry, xs):
            obs, state, prev = carry
            t, k = xs
            k_exp, k_coin, k_env = jax.random.split(k, 3)
            adj = env.comm_graph(state)
            option, out = actor.step(k_exp, obs, adj, prev, t, deterministic=True)
            label = label_of(k_exp, state, option)
            action = jnp.where(jax.random.uniform(k_coin) < beta, label, out.env_action)
            obs2, state2, _ = env.step(k_env, state, action)
            sample = {"obs": obs, "adj": adj, "option": option, "label": label}
            return (obs2, state2, option), {**sample, **({"state": state} if keep_state
                                                          else {})}

        xs = (jnp.arange(env.max_steps), jax.random.split(k_run, env.max_steps))
        carry = (obs, state, actor.initial_option(env.num_agents))
        return jax.lax.scan(body, carry, xs)[1]

    data = jax.vmap(one)(jax.random.split(key, episodes))
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), data)  # [episodes * T, ...]


def _moved(env: SwarmEnv, label_of: Callable, sample: dict[str, Any], g: jax.Array,
           key: jax.Array) -> dict[str, Any]:
    """A gathered sample (its ``"state"`` kept) with its state moved by the env's symmetry
    ``g``, then observed and labelled by the expert anew (``PretrainConfig.augment``)."""
    state = env.transform(sample["state"], g)
    return {**sample, "obs": env.observe(state), "adj": env.comm_graph(state),
            "label": label_of(key, state, sample["option"])}


class Imitation(NamedTuple):
    """What :func:`imitate` returns."""

    # the last round's (or the final fit's) best by validation loss; with
    # ``select_episodes``, the round's of the highest team return (``team_returns``)
    actor: FeudalActor
    losses: list[float]  # the training loss of every gradient step taken
    curve: list[dict[str, float]]  # per measurement: round, step, train_loss, val_loss
    # the returned actor's validation loss on its round's data: the round's starting
    # actor's where no measurement beat it, so not always in ``curve``
    val_loss: float
    # with ``select_episodes``: each round's (and the final fit's) actor's mean team return
    # on the selection episodes; empty without
    team_returns: tuple[float, ...] = ()
    resumed: int = 0  # the rounds read from a rounds file, not run by this call


#: the stream of the selection episodes' keys (``PretrainConfig.select_episodes``), apart
#: from the data rounds' (``jax.random.key(seed)`` split round by round)
SELECT_STREAM = 1


def _team_return(env: SwarmEnv, cfg: PretrainConfig) -> Callable[[FeudalActor], float]:
    """``score(actor)``: its mean team return, deterministic and holding its options, on
    ``cfg.select_episodes`` episodes of its own (one compiled rollout)."""
    from feudal_es.rollout import make_population_rollouts
    from feudal_es.theta import selector_theta

    keys = jax.random.split(jax.random.fold_in(jax.random.key(cfg.seed), SELECT_STREAM),
                            cfg.select_episodes)
    rollouts = eqx.filter_jit(make_population_rollouts(env, True))
    return lambda a: float(jnp.mean(rollouts(a, selector_theta(a)[None], keys)[0]))


def _check_options(actor: FeudalActor, expert: Expert, cfg: PretrainConfig) -> None:
    """The actor must hold what ``cfg`` imitates: ``cfg.option`` fixed for one expert,
    ``cfg.schedule`` for one expert per option (else the labels would belong to options
    the executor does not hold)."""
    if cfg.schedule:
        ok = actor.options == "schedule" and actor.option_schedule == cfg.schedule
        if callable(expert) or len(tuple(expert)) != actor.num_skills:
            raise ValueError(f"PretrainConfig.schedule imitates one expert per option: give "
                             f"{actor.num_skills} (None where no option needs one)")
        missing = sorted({o for o in cfg.schedule if tuple(expert)[o] is None})
        if missing:
            raise ValueError(f"the schedule {cfg.schedule} holds option(s) {missing}, "
                             "whose expert is None")
        want = f"options='schedule', option_schedule={cfg.schedule}"
    else:
        ok = actor.options == "fixed" and actor.fixed_option == cfg.option
        if not callable(expert):
            raise ValueError("one expert per option needs PretrainConfig.schedule")
        want = f"options='fixed', fixed_option={cfg.option}"
    if not ok:
        raise ValueError(f"imitate: the actor must be built with {want}; it has options="
                         f"{actor.options!r}, fixed_option={actor.fixed_option}, "
                         f"option_schedule={actor.option_schedule}")


def imitate(env: SwarmEnv, actor: FeudalActor, expert: Expert, cfg: PretrainConfig,
            progress: Callable[[dict[str, float]], None] | None = None,
            rounds_file: str | Path | None = None,
            inputs: dict[str, Any] | None = None) -> Imitation:
    """Behaviour cloning then DAgger with a validation split (see the module docstring).
    ``expert``: the policy of ``cfg.option`` (the actor holding it fixed), or, with
    ``cfg.schedule``, one per option (the actor following that schedule).
    ``progress`` is called with each point of the curve as it is measured, with
    ``{"round": r, "collected": samples}`` after each data round's collection, and with
    ``{"round": r, "resumed": steps}`` where it begins at round ``r`` of a rounds file.
    ``rounds_file``: completed rounds are written there, and read back where it exists
    (made by the same ``cfg`` and ``inputs``, e.g. the env and actor config; else it is
    refused): the imitation begins after them (:mod:`feudal_es.pretrain_rounds`)."""
    _check_options(actor, expert, cfg)
    if cfg.loss == "direction" and len(env.action_space.shape) != 1:
        raise ValueError(f"PretrainConfig.loss='direction' fits a speed and heading: it needs "
                         f"a vector action, and {type(env).__name__}'s action space is "
                         f"{env.action_space}")
    if cfg.augment and getattr(env, "symmetries", 1) < 2:
        raise ValueError(f"PretrainConfig.augment moves samples by the env's symmetries: "
                         f"{type(env).__name__} declares none (an env's `symmetries` and "
                         f"`transform(state, g)`, as Coverage's)")
    tx = cfg.optimizer()
    filt = executor_filter(actor)
    opt = tx.init(eqx.filter(actor, filt))
    # one compiled collection per round: the training episodes, then the validation ones
    collect = eqx.filter_jit(lambda a, k, beta: _episodes(
        env, expert, a, k, cfg.episodes + cfg.val_episodes, beta, cfg.augment))
    label_of = labeller(env, expert)

    def augmented(sample, key):  # the sample's state moved by a random symmetry
        k_g, k_label = jax.random.split(key)
        g = jax.random.randint(k_g, (), 0, env.symmetries)
        return _moved(env, label_of, sample, g, k_label)

    def sample_loss(a, sample):  # one swarm state: the mean over agents and action dims
        out = a.act(jax.random.key(0), sample["obs"], sample["adj"], sample["option"],
                    deterministic=True)  # the action before the env's clip (clip_loss)
        act = out.env_action if cfg.clip_loss else out.action
        return action_loss(cfg.loss, act, sample["label"])

    def loss_fn(params, rest, mb):
        a = eqx.combine(params, rest)
        return jnp.mean(jax.vmap(lambda x: sample_loss(a, x))(mb))

    def trainer(tx: optax.GradientTransformation) -> Callable:
        @eqx.filter_jit
        def train(actor, opt, data, count, key):  # one chunk of gradient steps
            def step(carry, k):
                actor, opt = carry
                idx = jax.random.randint(k, (cfg.batch_size,), 0, count)  # the filled part
                mb = jax.tree.map(lambda x: x[idx], data)
                if cfg.augment:  # its own key: the sampled indices are as without it
                    mb = jax.vmap(augmented)(mb, jax.random.split(jax.random.fold_in(k, 1),
                                                                  cfg.batch_size))
                params, rest = eqx.partition(actor, filt)
                loss, grads = jax.value_and_grad(loss_fn)(params, rest, mb)
                updates, opt = tx.update(grads, opt, params)
                return (eqx.combine(eqx.apply_updates(params, updates), rest), opt), loss

            (actor, opt), losses = jax.lax.scan(step, (actor, opt),
                                                jax.random.split(key, cfg.chunk))
            return actor, opt, losses

        return train

    @eqx.filter_jit
    def validate(actor, val, count):  # mean loss over the filled part of the buffer
        per = jax.lax.map(lambda x: sample_loss(actor, x), val, batch_size=256)
        mask = jnp.arange(per.shape[0]) < count
        return jnp.sum(jnp.where(mask, per, 0.0)) / count

    def aggregate(buffer, new, row, rows):  # the data sets, filled round by round
        if buffer is None:  # fixed shapes: ``rows`` rows, the unfilled ones zero
            buffer = jax.tree.map(lambda x: jnp.zeros((rows, *x.shape[1:]), x.dtype), new)
        return jax.tree.map(lambda d, x: jax.lax.dynamic_update_slice_in_dim(
            d, x, row, axis=0), buffer, new)

    losses: list[float] = []
    curve: list[dict[str, float]] = []

    def fit(actor, opt, train, data, val, count, val_count, r, key, chunks, patience):
        """``chunks`` chunks of ``train``, the validation loss after each; ends after
        ``patience`` measurements without a better one (0: never) with the best actor."""
        best, best_loss, since = actor, float(validate(actor, val, val_count)), 0
        for k in jax.random.split(key, chunks):
            actor, opt, chunk_losses = train(actor, opt, data, count, k)
            losses.extend(np.asarray(chunk_losses).tolist())
            point = {"round": r, "step": len(losses),
                     "train_loss": float(np.mean(chunk_losses)),
                     "val_loss": float(validate(actor, val, val_count))}
            curve.append(point)
            if progress is not None:
                progress(point)
            if point["val_loss"] < best_loss:
                best, best_loss, since = actor, point["val_loss"], 0
            else:
                since += 1
                if patience and since >= patience:
                    break  # early stop: the round ends with its best actor
        return best, opt, best_loss

    score = _team_return(env, cfg) if cfg.select_episodes else None
    team_returns: list[float] = []
    chosen: tuple[FeudalActor, float] | None = None

    def select(actor: FeudalActor, val_loss: float) -> None:
        nonlocal chosen
        if score is not None:
            team_returns.append(score(actor))
            if chosen is None or team_returns[-1] > max(team_returns[:-1]):
                chosen = (actor, val_loss)

    key = jax.random.key(cfg.seed)
    size, val_size = cfg.episodes * env.max_steps, cfg.val_episodes * env.max_steps
    train = trainer(tx)
    data = val = None

    def kept(done):  # what a rounds file holds after ``done`` rounds
        tree = {"actor": actor, "opt": opt, "key": key}
        if score is not None:  # (in a template, any actor: its shapes)
            tree["chosen"] = chosen[0] if chosen else actor
        if data is not None:
            return {**tree, "data": jax.tree.map(lambda x: x[:done * size], data),
                    "val": jax.tree.map(lambda x: x[:done * val_size], val)}
        new = eqx.filter_eval_shape(collect, actor, key, jnp.float32(1.0))  # the template

        def rows(part, n):
            return jax.tree.map(lambda x: jax.ShapeDtypeStruct((done * n, *x.shape[1:]),
                                                               x.dtype), part)
        return {**tree, "data": rows(new, size), "val": rows(
            {k: v for k, v in new.items() if k != "state"}, val_size)}

    start = 0
    if rounds_file is not None and Path(rounds_file).exists():
        got = load_rounds(rounds_file, cfg, inputs, kept)
        start, losses[:], curve[:], team_returns[:], best_loss = (
            got.done, got.losses, got.curve, got.team_returns, got.val_loss)
        actor, opt, key = got.tree["actor"], got.tree["opt"], got.tree["key"]
        data = aggregate(None, got.tree["data"], 0, cfg.rounds * size)
        val = aggregate(None, got.tree["val"], 0, cfg.rounds * val_size)
        chosen = (got.tree["chosen"], got.chosen_val_loss) if score else None
        if progress is not None:
            progress({"round": start, "resumed": start * cfg.steps_per_round})
    for r in range(start, cfg.rounds):  # one compiled collect, train and validate a round
        key, k_data, k_train = jax.random.split(key, 3)
        beta = jnp.float32(cfg.beta_decay ** r if r else 1.0)  # traced: no recompile
        new = collect(actor, k_data, beta)
        data = aggregate(data, jax.tree.map(lambda x: x[:size], new), r * size,
                         cfg.rounds * size)
        val = aggregate(val, jax.tree.map(lambda x: x[size:], {  # validation: as gathered
            k: v for k, v in new.items() if k != "state"}), r * val_size,
            cfg.rounds * val_size)
        # arrays, not Python ints: a static count would compile train and validate anew
        # every round
        count, val_count = jnp.int32((r + 1) * size), jnp.int32((r + 1) * val_size)
        if progress is not None:
            progress({"round": r, "collected": int(count + val_count)})
        actor, opt, best_loss = fit(actor, opt, train, data, val, count, val_count, r,
                                    k_train, cfg.steps_per_round // cfg.chunk, cfg.patience)
        select(actor, best_loss)
        if rounds_file is not None:
            save_rounds(rounds_file, cfg, inputs, Rounds(
                r + 1, kept(r + 1), losses, curve, team_returns, best_loss,
                chosen[1] if chosen else None))
    count, val_count = jnp.int32(cfg.rounds * size), jnp.int32(cfg.rounds * val_size)
    if cfg.final_steps:  # the final fit: round index cfg.rounds in the curve
        final_tx = cfg.final_optimizer()
        if progress is not None:
            progress({"round": cfg.rounds, "collected": int(count + val_count)})
        actor, _, best_loss = fit(actor, final_tx.init(eqx.filter(actor, filt)),
                                  trainer(final_tx), data, val, count, val_count,
                                  cfg.rounds, key, cfg.final_steps // cfg.chunk, 0)
        select(actor, best_loss)
    if chosen is not None:
        actor, best_loss = chosen
    return Imitation(actor, losses, curve, best_loss, tuple(team_returns), start)


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
             log: Callable[[str], None] = print, progress: bool = False
             ) -> tuple[Path, dict[str, dict], Imitation]:
    """What ``feudal-es pretrain`` runs: imitate ``cfg.expert`` on ``config``'s env
    (a :class:`~feudal_es.config.TrainerConfig`: env, env kwargs, actor sizes) holding
    ``cfg.option`` (``progress``: a progress bar on stderr), score the imitator and the
    expert on ``eval_episodes`` held-out episodes (seed ``eval_seed``), save the actor
    (default path: under ``runs/``) and its validation curve beside it
    (:func:`curve_paths`). A path that cannot be written is refused (the ``OSError``)
    before any work. Returns ``(path, {who: {metric: mean}}, imitation)``."""
    from envs.episode import run_episode, stateless
    from feudal_es.atomic import check_writable
    from feudal_es.resolve import apply_env_defaults, resolve_env
    from feudal_es.rollout import make_population_rollouts
    from feudal_es.rundir import default_run_dir
    from feudal_es.theta import selector_theta

    if config.actor.recurrent:
        raise ValueError("pretrain imitates step by step with a feed-forward executor; "
                         "actor.recurrent=true is not supported by it")
    env = resolve_env(config.env, config.env_kwargs)
    if env.kind != "jax":
        raise ValueError(f"pretrain needs a bundled env with reference policies, got "
                         f"{config.env!r}")
    # the actor a run of this config trains (the env's defaults for what it leaves open),
    # so that --set init_from=PATH fits it
    config = apply_env_defaults(config, env)[0]
    core = env.core
    skills = core.skill_names
    if cfg.schedule:
        if len(cfg.experts) != len(skills):
            raise ValueError(f"PretrainConfig.experts names {len(cfg.experts)} experts; "
                             f"{config.env} has {len(skills)} options ({', '.join(skills)})")
        pairs = [expert_policy(config.env, e) if e else (None, None) for e in cfg.experts]
        name = "+".join(n for n, _ in pairs if n)
        expert: Expert = [p for _, p in pairs]
        reference = scheduled_expert(expert, cfg.schedule, config.actor.selector_period)
        actor_cfg = dataclasses.replace(config.actor, options="schedule",
                                        option_schedule=cfg.schedule)
        holding = (f"options {' -> '.join(repr(skills[o]) for o in cfg.schedule)} (the "
                   f"next every {config.actor.selector_period} steps, the last held to the "
                   "end), each option imitating "
                   + ", ".join(f"{n} ({skills[i]})" for i, (n, _) in enumerate(pairs) if n))
    else:
        if cfg.option >= len(skills):
            raise ValueError(f"PretrainConfig.option={cfg.option}: {config.env} has "
                             f"{len(skills)} options ({', '.join(skills)})")
        name, expert = expert_policy(config.env, cfg.expert)
        reference = expert
        actor_cfg = dataclasses.replace(config.actor, options="fixed",
                                        fixed_option=cfg.option)
        holding = f"option {skills[cfg.option]!r}"
    path = out or str(default_run_dir(config.env, f"{name}-pretrained")) + checkpoint.SUFFIX
    rounds = rounds_path(path)
    check_writable(path)
    for extra in (*curve_paths(path), rounds):
        check_writable(extra)
    actor = FeudalActor.from_env(jax.random.key(config.seed), core, actor_cfg)
    log(f"feudal-es pretrain: imitating {name} on {config.env}, {holding}: {cfg.rounds} "
        f"rounds (behaviour cloning, then DAgger) of {cfg.episodes} episodes (+ "
        f"{cfg.val_episodes} for validation) and {cfg.steps_per_round} gradient steps"
        + (f", then a final fit of {cfg.final_steps} steps" if cfg.final_steps else ""))
    log(f"its completed rounds are kept in {rounds} until it ends: "
        + ("found, resuming after them" if rounds.exists() else
           f"a stopped run resumes after them with --out {path}"))
    bar = ImitationProgress(cfg, progress)
    try:  # the rounds file's inputs: what decides the imitation beside cfg
        result = imitate(core, actor, expert, cfg, bar, rounds, {
            "env": config.env, "env_kwargs": config.env_kwargs, "expert": name,
            "actor": dataclasses.asdict(actor_cfg), "seed": config.seed})
        bar.finish()
    finally:
        bar.close()
    keys = jax.random.split(jax.random.key(eval_seed), eval_episodes)
    rollouts = jax.jit(make_population_rollouts(core, True))
    ret, metrics = jax.device_get(rollouts(result.actor, selector_theta(result.actor)[None],
                                           keys))
    ret, metrics = ret[0], {k: v[0] for k, v in metrics.items()}
    ref = jax.device_get(jax.jit(jax.vmap(lambda k: run_episode(
        k, core, stateless(reference, core), record=lambda o: o.metrics)))(keys))
    rows = {"imitator": {"team_return": float(np.mean(ret)),
                         **{k: float(np.mean(v)) for k, v in metrics.items()}},
            name: {"team_return": float(np.mean(ref.team_return)),
                   **{k: float(np.mean(v[:, -1])) for k, v in ref.outs.items()}}}
    saved = save_pretrained(path, result.actor, {
        "env": config.env, "config": config.to_dict(), "expert": name,
        **({"experts": list(cfg.experts), "schedule": list(cfg.schedule)} if cfg.schedule
           else {"option": cfg.option}),
        "pretrain": dataclasses.asdict(cfg), "loss_first": result.losses[0],
        "loss_last": result.losses[-1], "val_loss": result.val_loss,
        "steps": len(result.losses), "team_returns": list(result.team_returns),
        "heldout": rows})
    write_curve(saved, result.curve, f"imitating {name} on {config.env}")
    rounds.unlink(missing_ok=True)  # the actor is saved: its rounds are no longer needed
    return saved, rows, result
