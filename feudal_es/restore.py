"""Trainers rebuilt from what a run left on disk: resume a run (one seed or many), or load
one checkpoint file for evaluation and rendering.

A checkpoint is data. Its config builds the template the arrays are checked against
(shapes and dtypes, leaf by leaf, before any array is read), and a ``"module:attr"`` env
it names is not imported unless the caller names the same id (``env``):
:class:`~feudal_es.resolve.UntrustedEnvError` otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax

from feudal_es import checkpoint, distributed, opponents
from feudal_es.config import TrainerConfig
from feudal_es.resolve import resolve_stored_env
from feudal_es.rundir import seed_dirs
from feudal_es.runlock import RunLock

__all__ = ["from_checkpoint", "resume", "stored_config"]

_KEEP = ("env", "env_kwargs", "seed", "es", "mappo", "actor", "critic", "num_skills")
# leaves renamed since older checkpoints were written: RolloutState.held became .option
# (one word for the selector's choice); those checkpoints still load
RENAMED = {"['train_state'].rollout.held": "['train_state'].rollout.option"}


def stored_config(path: Path, meta: dict[str, Any]) -> tuple[TrainerConfig, bool]:
    """The config a checkpoint was written with, and whether it is in the current layout
    (an older one, e.g. a setting since moved to its owner, is read through
    :data:`feudal_es.config.MOVED`; its template still checks every leaf)."""
    if "config" not in meta:
        raise checkpoint.CheckpointError(f"{path} has no trainer config in its metadata")
    config = TrainerConfig.from_dict(meta["config"])
    current = config.to_dict()
    return config, all(meta["config"].get(k) == current[k] for k in _KEEP)


def _latest(run_dir: Path, at_round: int | None) -> Path:
    mgr = checkpoint.CheckpointManager(run_dir)
    latest = mgr.latest() if at_round is None else mgr.path(at_round)
    if at_round is not None and not latest.is_file():
        raise ValueError(f"cannot resume {run_dir} at round {at_round}: no {latest.name}")
    legacy = mgr.legacy_error()
    if latest is None and legacy is not None:
        raise checkpoint.CheckpointError(f"cannot resume {run_dir}: {legacy}") from None
    if latest is None:
        raise ValueError(f"cannot resume {run_dir}: no checkpoint "
                         f"(ckpt_*{checkpoint.SUFFIX}) in it")
    return latest


def _metadata(run_dir: Path, path: Path) -> dict[str, Any]:
    try:
        return checkpoint.read_metadata(path)
    except checkpoint.CheckpointError as e:  # say what is left rather than skip silently
        older = ", ".join(p.name for p in reversed(checkpoint.CheckpointManager(run_dir)
                                                   .all()[:-1]))
        raise checkpoint.CheckpointError(
            f"{e}" + (f" (older checkpoints in this run: {older}; move the damaged one "
                      "away to resume from the previous)" if older else "")) from None


def _load(trainer: Any, index: int, path: Path, current: bool, newest: bool) -> Any:
    """Seed ``index``'s state from checkpoint ``path`` (its expected metadata checked when
    the checkpoint is in the current layout); the newest in its run directory is read
    through the manager, which names an older one when it is damaged."""
    template, expect = trainer.checkpoint_tree(index), (trainer.checkpoint_expect(index)
                                                        if current else None)
    rundir = trainer.recorders[index].rundir  # (another process's scratch: read path)
    tree, meta = (rundir.checkpoints.load_latest(template, expect, RENAMED)
                  if newest and distributed.is_writer()
                  else checkpoint.load(path, template, expect, RENAMED))
    return trainer.restore(index, tree, meta)


def resume(cls: type, run_dir: str | os.PathLike, n_outer: int | None = None,
           env: str | None = None, at_round: int | None = None) -> Any:
    """A trainer (``cls``) continuing ``run_dir`` from its newest checkpoint (``at_round``:
    that round's instead). A many-seed run restarts every seed from the latest round
    every seed has a checkpoint of (a kill between their checkpoint writes).

    The config comes from the checkpoint (``n_outer`` may be raised); the template is a
    freshly built trainer, so a checkpoint of another env or architecture is refused
    naming the difference. ``metrics.jsonl`` is rewritten to the checkpoint's history
    (rounds after the checkpoint will be recomputed identically). ``env`` may only repeat
    the run's own env (to trust a ``"module:attr"`` it names). The run directory's lock
    (:class:`~feudal_es.runlock.RunLock`) is held while it is read and rewritten: a run
    that another process is writing is refused (:class:`~feudal_es.runlock.RunDirInUse`).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"cannot resume {run_dir}: no such directory")
    if not distributed.is_writer():  # reads process 0's run; writes only its own scratch
        return _resume(cls, run_dir, n_outer, env, at_round)
    with RunLock(run_dir, advice="wait for it to end, then resume it"):
        return _resume(cls, run_dir, n_outer, env, at_round)


def _resume(cls: type, run_dir: Path, n_outer: int | None, env: str | None,
            at_round: int | None) -> Any:
    dirs = seed_dirs(run_dir)
    if len(dirs) > 1:
        found = {s: checkpoint.CheckpointManager(d).latest() for s, d in dirs.items()}
        missing = [s for s, p in found.items() if p is None]
        if missing:
            raise ValueError(f"cannot resume {run_dir}: seeds {missing} have no checkpoint")
        at_round = min(int(p.stem.split("_")[1]) for p in found.values())
    else:
        dirs = {None: run_dir}
    paths = {s: _latest(d, at_round) for s, d in dirs.items()}
    configs = {s: stored_config(p, _metadata(dirs[s], p)) for s, p in paths.items()}
    config = next(iter(configs.values()))[0]
    for s, (c, _) in configs.items():
        if s is not None and c != config.for_seed(s):
            raise ValueError(f"cannot resume {run_dir}: seed {s}'s config differs from "
                             f"seed {next(iter(dirs))}'s beyond the seed")
    if len(dirs) > 1:
        config = dataclasses.replace(config, seeds=tuple(dirs))
    if env is not None and env != config.env:
        raise ValueError(f"{run_dir} is a run of env {config.env!r}; resuming continues "
                         f"that env (env={env!r} may only repeat it)")
    if n_outer is not None:
        config = dataclasses.replace(config, n_outer=int(n_outer))
    first = next(iter(paths.values()))
    resolved = resolve_stored_env(config.env, config.env_kwargs, config.imports, env, first)
    opponents.check_stored(config.others, run_dir)
    with opponents.templates():  # the checkpoint holds the other groups' actors
        trainer = cls(config, run_dir, resolved=resolved)
    states = [_load(trainer, i, paths[s], configs[s][1], at_round is None)
              for i, s in enumerate(dirs)]
    if trainer.many:
        from feudal_es.trainer import stack

        trainer.state = trainer.batched.place(stack(states))
        trainer.write_config()
    else:
        trainer.state = states[0]
    for rec, history in zip(trainer.recorders, trainer.histories, strict=True):
        if n_outer is not None:  # the run's config.json says what it now runs to
            rec.rundir.write_config(rec.config.to_dict())
        rec.rundir.rewrite_metrics(history)
    return trainer


def from_checkpoint(cls: type, path: str | os.PathLike, env: str | None = None,
                    env_kwargs: Mapping[str, Any] | None = None) -> Any:
    """A one-seed trainer (``cls``) holding the state of one checkpoint file (for eval /
    render). ``env`` evaluates on another env id; its networks must have the same shapes
    (the checkpoint's structure is still checked leaf by leaf).

    ``env_kwargs`` (a dict) is merged over the checkpoint's stored ``env_kwargs``, e.g.
    ``{"num_agents": 8, "world_size": 1.414}``: the actor trained with N agents plays M
    in another world. The checkpoint is restored with its stored config, then a trainer
    of the overridden config receives the restored *actor* (and the ES state, round,
    history and best fitness); its critic and optimizer states are freshly built ones,
    not the checkpoint's (they depend on the number of agents, and evaluation and
    rendering never read them), so such a trainer is for evaluation, not for training
    on. The actor's parameter shapes must not change: an override that changes them
    (e.g. ``map_size``, the CNN's input, or ``obs_mode``) is refused with a ValueError
    naming the first differing leaf and the change that causes it."""
    path = Path(path)
    config, current = stored_config(path, checkpoint.read_metadata(path))
    same_env = env is None or env == config.env
    if env is not None:
        config = dataclasses.replace(config, env=env)
    resolved = resolve_stored_env(config.env, config.env_kwargs, config.imports, env, path)
    opponents.check_stored(config.others, path)
    with opponents.templates():  # the checkpoint holds the other groups' actors
        trainer = cls(config, path.parent, resolved=resolved)
    expect = trainer.checkpoint_expect() if same_env and current else None
    trainer.state = trainer.restore(0, *checkpoint.load(path, trainer.checkpoint_tree(), expect,
                                                         RENAMED))
    if env_kwargs:
        trainer = _transfer(cls, trainer, env_kwargs, env, path)
    return trainer


def _check_env_kwargs(env_kwargs: Any) -> dict[str, Any]:
    if not isinstance(env_kwargs, Mapping):
        raise TypeError(f"env_kwargs must be a dict of overrides, got "
                        f"{type(env_kwargs).__name__}")
    bad = [k for k in env_kwargs if not isinstance(k, str) or not k]
    if bad:
        raise TypeError(f"env_kwargs keys must be non-empty strings, got {bad[0]!r}")
    return dict(env_kwargs)


def _actor_leaves(actor: Any) -> list[tuple[str, tuple[int, ...], Any]]:
    """``(path, shape, dtype)`` of every array leaf of ``actor``."""
    arrays = eqx.filter(actor, eqx.is_array)
    return [(jax.tree_util.keystr(k), tuple(x.shape), x.dtype)
            for k, x in jax.tree_util.tree_flatten_with_path(arrays)[0]]


def _first_difference(built: list, wanted: list) -> str | None:
    """The first leaf whose path, shape or dtype differs, in words (None: all equal)."""
    for (pa, sa, da), (pb, sb, db) in zip(built, wanted, strict=False):
        if pa != pb:
            return f"leaf {pa} {sa} where it now has {pb} {sb}"
        if sa != sb or da != db:
            return f"leaf {pa} of shape {sa} {da}, which is now {sb} {db}"
    if len(built) != len(wanted):
        longer, n = (built, "its") if len(built) > len(wanted) else (wanted, "the new")
        pa, sa, _ = longer[min(len(built), len(wanted))]
        return f"{len(built)} leaves, now {len(wanted)} ({n} leaf {pa} {sa} has no match)"
    return None


def _transfer(cls: type, trainer: Any, env_kwargs: Mapping[str, Any], env: str | None,
              path: Path) -> Any:
    """A trainer of ``trainer``'s config with ``env_kwargs`` merged over its env_kwargs,
    holding ``trainer``'s restored actor and ES state (see :func:`from_checkpoint`)."""
    overrides = _check_env_kwargs(env_kwargs)
    stored = trainer.config
    merged = {**stored.env_kwargs, **overrides}
    if merged == stored.env_kwargs:
        return trainer
    # the filled config (no setting left open: nothing is re-chosen by the new env) and
    # no pretrained init to read again: the actor is the checkpoint's
    config = dataclasses.replace(stored, env_kwargs=merged, init_from="")
    resolved = resolve_stored_env(config.env, config.env_kwargs, config.imports, env, path)
    with opponents.templates():  # the restored actor replaces the new one
        new = cls(config, path.parent, resolved=resolved)
    built, wanted = _actor_leaves(trainer.ts.actor), _actor_leaves(new.ts.actor)
    diff = _first_difference(built, wanted)
    if diff is not None:
        changed = [k for k in overrides if stored.env_kwargs.get(k, _MISSING) != overrides[k]]
        causes = _culprits(stored, changed, overrides, built, env, path) or changed
        said = ", ".join(f"env_kwargs.{k}={json.dumps(overrides[k])}" for k in causes)
        raise ValueError(
            f"cannot evaluate {path} with {said}: the actor was built for "
            f"{_kwargs_text(stored.env_kwargs, causes)} ({diff}); {said} "
            f"change{'s' if len(causes) == 1 else ''} it (only env_kwargs that keep the "
            "actor's parameter shapes can change at evaluation, e.g. num_agents)")
    actor = eqx.combine(eqx.filter(trainer.ts.actor, eqx.is_array),
                        eqx.filter(new.ts.actor, eqx.is_array, inverse=True))
    new.state = new.state._replace(learner=new.ts._replace(actor=actor), es=trainer.state.es)
    new.round = trainer.round
    new.recorders[0].best_fitness = trainer.recorders[0].best_fitness
    new.recorders[0].wall_offset = trainer.recorders[0].wall_offset
    new.histories = [list(h) for h in trainer.histories]
    new._fresh = False
    new.stored_trainer = trainer  # the checkpoint's own setup (checkpoint templates)
    new.env_overrides = overrides
    return new


_MISSING = object()


def _kwargs_text(kwargs: Mapping[str, Any], keys: list[str]) -> str:
    """``"map_size=8, obs_mode='maps'"``: the stored values of ``keys`` (or "the
    default" for one the checkpoint does not set)."""
    return ", ".join(f"{k}={json.dumps(kwargs[k])}" if k in kwargs else f"{k} (the env's "
                     "default)" for k in keys)


def _culprits(stored: Any, changed: list[str], overrides: dict[str, Any],
              built: list, env: str | None, path: Path) -> list[str]:
    """Which of ``changed`` alone changes the actor's shapes (several changed at once:
    each tried by itself on the JAX path, the actor's shapes only); [] if none alone."""
    if len(changed) <= 1:
        return changed
    found = []
    for k in changed:
        kwargs = {**stored.env_kwargs, k: overrides[k]}
        try:
            resolved = resolve_stored_env(stored.env, kwargs, stored.imports, env, path)
            if resolved.kind != "jax":
                return []
            from agents import make_actor

            actor = make_actor(jax.random.key(0), resolved.core, stored.actor, stored.team)
        except Exception:
            return []
        if _first_difference(built, _actor_leaves(actor)) is not None:
            found.append(k)
    return found
