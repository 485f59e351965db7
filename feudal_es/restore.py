"""Trainers rebuilt from what a run left on disk: resume a run (one seed or many), or load
one checkpoint file for evaluation and rendering.

A checkpoint is data. Its config builds the template the arrays are checked against
(shapes and dtypes, leaf by leaf, before any array is read), and a ``"module:attr"`` env
it names is not imported unless the caller names the same id (``env``):
:class:`~feudal_es.resolve.UntrustedEnvError` otherwise.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from feudal_es import checkpoint
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
    rundir = trainer.recorders[index].rundir
    tree, meta = (rundir.checkpoints.load_latest(template, expect, RENAMED) if newest
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


def from_checkpoint(cls: type, path: str | os.PathLike, env: str | None = None) -> Any:
    """A one-seed trainer (``cls``) holding the state of one checkpoint file (for eval /
    render). ``env`` evaluates on another env id; its networks must have the same shapes
    (the checkpoint's structure is still checked leaf by leaf)."""
    path = Path(path)
    config, current = stored_config(path, checkpoint.read_metadata(path))
    same_env = env is None or env == config.env
    if env is not None:
        config = dataclasses.replace(config, env=env)
    resolved = resolve_stored_env(config.env, config.env_kwargs, config.imports, env, path)
    trainer = cls(config, path.parent, resolved=resolved)
    expect = trainer.checkpoint_expect() if same_env and current else None
    trainer.state = trainer.restore(0, *checkpoint.load(path, trainer.checkpoint_tree(), expect,
                                                         RENAMED))
    return trainer
