"""The toolkit's front door: register the bundled envs, train a config, resume a run.

These are the calls an entry point (the CLI, a benchmark, a study, a user's script)
makes; importing :mod:`feudal_es` itself does nothing but make them available.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feudal_es.config import TrainerConfig
    from feudal_es.trainer import ESTrainer

__all__ = ["register", "resume", "train"]


def register() -> list[str]:
    """Register the bundled envs with PettingZoo's and Gymnasium's registries
    (:func:`envs.register`) and install the loader of run checkpoints for the Gymnasium
    Selector ids' ``checkpoint=``; idempotent. Returns the registered ids."""
    import envs
    from envs.gym_registration import use_checkpoint_loader
    from feudal_es.executors import checkpoint_executor

    use_checkpoint_loader(checkpoint_executor)
    return envs.register()


def train(config: TrainerConfig, run_dir: str | os.PathLike | None = None, *,
          progress: bool = False, on_round: Callable[[Any], None] | None = None
          ) -> ESTrainer:
    """Train ``config`` (a :class:`~feudal_es.config.TrainerConfig`) to ``n_outer``
    rounds: its one seed, or every seed of ``config.seeds`` in one program. Returns the
    :class:`~feudal_es.trainer.ESTrainer` (``history`` / ``histories``, ``recorders``,
    the final state)."""
    from feudal_es.trainer import ESTrainer

    trainer = ESTrainer(config, run_dir)
    trainer.run(progress=progress, on_round=on_round)
    return trainer


def resume(run_dir: str | os.PathLike, n_outer: int | None = None,
           env: str | None = None) -> ESTrainer:
    """A trainer continuing ``run_dir`` (one seed or many) from its newest checkpoint
    (:meth:`feudal_es.trainer.ESTrainer.resume`); call ``.run()`` on it."""
    from feudal_es.trainer import ESTrainer

    return ESTrainer.resume(run_dir, n_outer=n_outer, env=env)
