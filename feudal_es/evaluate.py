"""Saved selectors compared on identical episodes: what ``feudal-es eval`` computes.

A run's executor (its newest checkpoint, or one checkpoint file) plays every selector on
the same episodes (common random numbers); each selector gets its team fitness' mean,
std and 95% t-interval over episodes and the env's metrics at the end of each episode. A
selector is a selector file (``best_selector.safetensors``), :data:`FINAL` (the
checkpoint's current selector: a finished run's final one) or a training checkpoint file
(``ckpt_*.safetensors``: its current selector); see :func:`selector_theta`. One of
another env or actor is refused before anything runs (``force``: warned instead).
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from envs.validate import check_int
from feudal_es._ckpt_format import _TREE
from feudal_es._ckpt_reader import _Reader
from feudal_es.checkpoint import (
    SUFFIX,
    CheckpointError,
    CheckpointManager,
    load,
    load_selector,
    read_metadata,
)
from feudal_es.config import TrainerConfig, check_seed
from feudal_es.loop import RoundState
from feudal_es.restore import RENAMED
from feudal_es.rundir import seed_dirs
from feudal_es.stats import t_critical
from feudal_es.trainer import ESTrainer

__all__ = ["FINAL", "check_selector_file", "compare_runs", "compare_selectors", "load_trainer",
           "robust_stats", "selector_theta", "trained_env_steps"]

# what ``--selector`` names for the checkpoint's current selector (the run's final one)
FINAL = "final"

log = logging.getLogger("feudal_es")


def load_trainer(path: str | os.PathLike, env: str | None = None,
                 env_kwargs: dict[str, Any] | None = None) -> tuple[ESTrainer, Path]:
    """A one-seed trainer holding a run's newest checkpoint (a run directory, or a zoo
    entry) or one checkpoint file, and that checkpoint's path.

    ``env_kwargs``: overrides merged over the checkpoint's stored env kwargs (e.g.
    ``{"num_agents": 8, "world_size": 1.414}``: an actor trained with N robots evaluated
    with M in a larger world). The trainer then holds the checkpoint's actor and ES state
    in a trainer built for the new env; the critic and optimizer states are not the
    checkpoint's (their shapes depend on the number of agents; evaluation and rendering do
    not need them). A change that alters the actor's parameter shapes (e.g. ``map_size``
    or ``obs_mode``) is refused with a ValueError naming the leaf and the change. See
    :func:`feudal_es.restore.from_checkpoint`. ``"zoo:<name>"`` names a zoo entry
    (:mod:`feudal_es.zoo`)."""
    from feudal_es import zoo

    p = zoo.resolve(path) if zoo.is_zoo(path) else Path(path)
    if p.is_dir():
        manager = CheckpointManager(p)
        latest, legacy = manager.latest(), manager.legacy_error()
        if legacy is not None:  # a run of an older feudal-es: say how to convert it
            raise legacy
        seeds = seed_dirs(p)
        if latest is None and seeds:
            raise ValueError(f"{p} is a run of {len(seeds)} seeds; name one of its seed "
                             f"directories, e.g. {next(iter(seeds.values()))}")
        if latest is None:
            raise ValueError(f"{p} holds no checkpoint (ckpt_*{SUFFIX}); is it a run "
                             "directory?")
        p = latest
    elif not p.exists():
        raise ValueError(f"{p} does not exist (expected a run directory or a checkpoint file)")
    return ESTrainer.from_checkpoint(p, env=env, env_kwargs=env_kwargs), p


def check_selector_file(path: str | os.PathLike, meta: dict, trainer: ESTrainer,
                        force: bool = False) -> None:
    """Refuse a selector file of another env, evolved-parameter set or actor architecture
    than ``trainer``'s (``force``: warn and go on)."""
    want = trainer.checkpoint_metadata()
    diffs = [f"{what}: file has {meta.get(key)!r}, the run has {want.get(key)!r}"
             for key, what in (("env", "env"), ("es_params", "evolved parameters"))
             if meta.get(key) != want.get(key)]
    try:
        theirs = TrainerConfig.from_dict(meta["config"]).actor
    except (KeyError, TypeError, ValueError):
        theirs = None
    if theirs != trainer.config.actor:
        diffs.append("actor: another architecture (ActorConfig) than the run's")
    if diffs:
        message = f"selector file {path} is not of this run's setup: " + "; ".join(diffs)
        if not force:
            raise ValueError(message + " (--force to evaluate it anyway)")
        log.warning("%s; evaluating it anyway (--force)", message)


def selector_theta(spec: str | os.PathLike, trainer: ESTrainer, checkpoint: Path,
                   force: bool = False) -> tuple[str, jax.Array]:
    """``(name, theta)`` of one selector for ``trainer`` (holding ``checkpoint``):
    :data:`FINAL` is the checkpoint's current selector (what ES evolves of the run's
    result, :meth:`ESTrainer.result_theta`; a finished run's final selector); a training
    checkpoint file (``ckpt_*.safetensors``) is its current selector, read without
    changing ``trainer``; any other path is a selector file (one named ``final``:
    ``./final``). A file of another run's setup is refused as by
    :func:`check_selector_file`."""
    if str(spec) == FINAL:
        return f"{checkpoint} (current selector)", trainer.result_theta()
    path = Path(spec)
    if not (path.is_file() and _kind(path) == _TREE):
        theta, meta = load_selector(path, expected_size=trainer.theta_size)
        check_selector_file(path, meta, trainer, force)
        return str(path), theta
    if path.resolve() == Path(checkpoint).resolve():
        return f"{path} (current selector)", trainer.result_theta()
    check_selector_file(path, read_metadata(path), trainer, force)
    # the checkpoint's own setup is the template (other env kwargs: other critic shapes)
    own = trainer.stored_trainer or trainer
    tree, _ = load(path, own.checkpoint_tree(), None, RENAMED)
    state = RoundState(tree["train_state"], tree["es_state"])
    return f"{path} (current selector)", own.result_theta(state)


def _kind(path: Path) -> str | None:
    """What a feudal-es file holds ("tree": a training checkpoint, "selector": a selector
    file), from its header alone; None when it is not one that reads (the loader then
    says why)."""
    try:
        return _Reader(path).doc["kind"]
    except CheckpointError:  # load_selector says why
        return None


def compare_selectors(trainer: ESTrainer, checkpoint: Path,
                      selectors: list[str | os.PathLike] | None = None,
                      episodes: int | None = None, seed: int = 12345,
                      force: bool = False) -> dict[str, Any]:
    """Every selector (see :func:`selector_theta`; default: the run's best selector and
    the checkpoint's current one) with ``trainer``'s executor on the ``episodes`` episodes of
    ``split(key(seed), episodes)`` (``None``: ``max(16, config.episodes)``; 0 is refused,
    not read as "not given": a standard deviation needs two). Returns ``{"env",
    "checkpoint", "seed", "episodes", "selectors": [row, ...], "metrics": [name, ...]}``,
    a row per selector: ``selector``, ``fitness_mean``, ``fitness_std``, ``ci95`` and each
    env metric's mean. A trainer with overridden env kwargs (:func:`load_trainer`'s
    ``env_kwargs``) adds ``"env_kwargs"`` (those evaluated with) and
    ``"env_kwargs_overrides"`` (what was changed)."""
    if episodes is None:
        episodes = max(trainer.config.episodes, 16)
    episodes = check_int("episodes", episodes, 2)
    check_seed("seed", seed)
    size = trainer.theta_size
    names, thetas = [], []
    for spec in selectors or ():
        name, theta = selector_theta(spec, trainer, checkpoint, force)
        names.append(name)
        thetas.append(jnp.asarray(theta, jnp.float32))
    if not names:  # default: the run's best selector and the checkpoint's current one
        best = trainer.rundir.best_selector
        if best.is_file():
            names.append(str(best))
            thetas.append(load_selector(best, expected_size=size)[0])
        names.append(f"{checkpoint} (current selector)")
        thetas.append(trainer.result_theta())
    returns, metrics = trainer.rollout_stats(jnp.stack(thetas), jax.random.key(seed),
                                             episodes=episodes)
    rows = []
    tcrit = t_critical(episodes - 1)
    for i, name in enumerate(names):
        r = np.asarray(returns[i], np.float64)
        mean, std = float(r.mean()), float(r.std(ddof=1))
        half = tcrit * std / math.sqrt(episodes)
        row = {"selector": name, "episodes": episodes, "fitness_mean": mean,
               "fitness_std": std, "ci95": [mean - half, mean + half]}
        for k, v in metrics.items():
            row[k] = float(np.mean(v[i]))
        row["returns"] = r.tolist()
        row["per_episode"] = {k: np.asarray(v[i], np.float64).tolist()
                              for k, v in sorted(metrics.items())}
        rows.append(row)
    result = {"env": trainer.config.env, "checkpoint": str(checkpoint), "seed": seed,
              "episodes": episodes, "env_steps": trained_env_steps(trainer),
              "selectors": rows, "metrics": sorted(metrics),
              "metric_better": dict(getattr(getattr(trainer.runtime, "core", None),
                                            "metric_better", {}))}
    if trainer.env_overrides:
        result["env_kwargs"] = dict(trainer.config.env_kwargs)
        result["env_kwargs_overrides"] = dict(trainer.env_overrides)
    return result


def trained_env_steps(trainer: ESTrainer) -> int:
    """The env steps the gradient learner of ``trainer``'s (first) seed has collected: the
    run's ``env_steps`` column (0 for a run without one, e.g. ES alone)."""
    steps = getattr(trainer.seed_states()[0].learner, "env_steps", 0)
    return int(np.asarray(steps))


def compare_runs(paths: list[str | os.PathLike], env: str | None = None,
                 env_kwargs: dict[str, Any] | None = None, episodes: int | None = None,
                 seed: int = 12345) -> dict[str, Any]:
    """Several runs (run directories or checkpoint files), each its own executor with its
    current selector (:data:`FINAL`), on the same ``episodes`` episodes of one env: the
    result of :func:`compare_selectors` with a row per run (``"run"``, ``"env_steps"``).
    Runs of different envs or env kwargs are refused (their episodes would differ)."""
    if len(paths) < 2:
        raise ValueError("compare_runs needs two runs or more")
    loaded = [load_trainer(p, env=env, env_kwargs=env_kwargs) for p in paths]
    envs = {(t.config.env, repr(sorted(t.config.env_kwargs.items()))) for t, _ in loaded}
    if len(envs) > 1:
        raise ValueError("runs of different envs or env kwargs play different episodes; "
                         "compare runs of one env (--env / --set env_kwargs.K=V evaluate "
                         f"them all on one): {sorted(e for e, _ in envs)}")
    if episodes is None:
        episodes = max(max(t.config.episodes, 16) for t, _ in loaded)
    rows = []
    for path, (trainer, ckpt) in zip(paths, loaded, strict=True):
        one = compare_selectors(trainer, ckpt, [FINAL], episodes, seed)
        better = one["metric_better"]
        row = dict(one["selectors"][0], selector=f"{path} ({FINAL})", run=str(path),
                   env_steps=one["env_steps"])
        rows.append(row)
    trainer = loaded[0][0]
    result = {"env": trainer.config.env, "runs": [str(p) for p in paths], "seed": seed,
              "episodes": episodes, "selectors": rows,
              "metrics": sorted(rows[0]["per_episode"]), "metric_better": better}
    if trainer.env_overrides:
        result["env_kwargs"] = dict(trainer.config.env_kwargs)
        result["env_kwargs_overrides"] = dict(trainer.env_overrides)
    return result


def robust_stats(result: dict[str, Any], reps: int | None = None, seed: int = 0
                 ) -> dict[str, Any]:
    """Add rliable's aggregates to a :func:`compare_selectors` / :func:`compare_runs`
    result, over its episodes: per row ``"iqm"`` ``[point, lo, hi]`` (stratified bootstrap
    95% interval) and ``"improvement"``: ``P(first row > row)`` with its interval for each
    later row. Without rliable, ``"robust_stats"`` says how to install it instead."""
    from feudal_es import aggregate

    reps = aggregate.REPS if reps is None else reps
    rows = result["selectors"]
    try:
        for row in rows:
            row["iqm"] = list(aggregate.iqm(row["returns"], reps, seed))
        result["improvement"] = [
            {"a": rows[0]["selector"], "b": row["selector"],
             "p": list(aggregate.probability_of_improvement(rows[0]["returns"],
                                                            row["returns"], reps, seed))}
            for row in rows[1:]]
    except ImportError as e:
        result["robust_stats"] = str(e)
    return result
