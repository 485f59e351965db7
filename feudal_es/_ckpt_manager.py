"""The checkpoints of one run directory: :class:`CheckpointManager`.

Names a checkpoint by its step (so names sort by step), lists the complete ones (temp
files of unfinished writes excluded) and the format-1 ones of an older feudal-es apart,
saves with pruning to the newest ``keep`` only once the new file is on disk, loads the
newest (reporting a damaged one with the older ones that remain, never skipping it), and
clears the temp files a killed writer left behind.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from feudal_es._ckpt_format import _TREE, FORMAT_VERSION, SUFFIX, CheckpointError, PathLike
from feudal_es._ckpt_reader import _convert_hint, load
from feudal_es._ckpt_writer import _save
from feudal_es.atomic import temp_prefix


class CheckpointManager:
    """The checkpoints of one run directory: ``run_dir/ckpt_<step:08d>.safetensors``,
    newest ``keep`` kept.

    One writer per run directory. Saves are atomic; older checkpoints are pruned only
    after the new one is on disk, so a crash never leaves fewer than before.
    """

    _NAME = re.compile(rf"^ckpt_(\d+){re.escape(SUFFIX)}$")
    _LEGACY_NAME = re.compile(r"^ckpt_(\d+)\.npz$")

    def __init__(self, run_dir: PathLike, keep: int | None = 3):
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep must be an int >= 1 or None (keep all), got {keep!r}")
        self.run_dir = Path(run_dir)
        self.keep = keep

    def path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` lives (names sort by step)."""
        return self.run_dir / f"ckpt_{step:08d}{SUFFIX}"

    def _scan(self, pattern: re.Pattern[str]) -> list[Path]:
        if not self.run_dir.is_dir():
            return []
        found = []
        for p in self.run_dir.iterdir():
            m = pattern.match(p.name)
            if m and p.is_file():
                found.append((int(m.group(1)), p))
        return [p for _, p in sorted(found)]

    def all(self) -> list[Path]:
        """Complete checkpoints, oldest first (temp files of unfinished writes excluded)."""
        return self._scan(self._NAME)

    def legacy(self) -> list[Path]:
        """Format-1 checkpoints (``ckpt_*.npz``, older feudal-es), oldest first; loaders
        refuse them, :func:`convert_v1` rewrites them."""
        return self._scan(self._LEGACY_NAME)

    def latest(self) -> Path | None:
        """The newest checkpoint, or None if the run has none yet."""
        found = self.all()
        return found[-1] if found else None

    def legacy_error(self) -> CheckpointError | None:
        """For a run that has only format-1 checkpoints of an older feudal-es: the error
        that names them and the ``feudal-es convert`` command; else None."""
        legacy = self.legacy()
        if self.all() or not legacy:
            return None
        return CheckpointError(
            f"no format-{FORMAT_VERSION} checkpoint in {self.run_dir}, only format-1 ones of "
            f"an older feudal-es ({', '.join(p.name for p in legacy)}); "
            f"{_convert_hint(legacy[-1], 'the newest')}")

    def save(self, step: int, tree: Any, metadata: Mapping[str, Any] | None = None) -> Path:
        """Save ``tree`` as the checkpoint of ``step`` (added to the metadata as
        ``"step"``), then prune to the newest ``keep``. Returns its path."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        step = int(step)
        self._remove_stale_temps()
        path = _save(self.path(step), tree, {**(metadata or {}), "step": step}, _TREE)
        if self.keep is not None:
            for old in self.all()[: -self.keep]:
                old.unlink(missing_ok=True)
        return path

    def load_latest(self, template: Any, expect: Mapping[str, Any] | None = None,
                    renamed: Mapping[str, str] | None = None) -> tuple[Any, dict[str, Any]]:
        """:func:`load` the newest checkpoint (``renamed``: see :func:`load`). A damaged
        newest checkpoint is reported (with the older ones that remain), not silently
        skipped."""
        found = self.all()
        if not found:
            legacy = self.legacy_error()
            if legacy is not None:
                raise legacy
            raise CheckpointError(f"no checkpoint in {self.run_dir} (no ckpt_*{SUFFIX} files)")
        try:
            return load(found[-1], template, expect, renamed)
        except CheckpointError as e:
            if len(found) > 1:
                older = ", ".join(p.name for p in reversed(found[:-1]))
                raise CheckpointError(f"{e} (older checkpoints in this run: {older})") from None
            raise

    def _remove_stale_temps(self) -> None:
        """Drop temp files that a killed writer left behind (this is the only writer)."""
        if self.run_dir.is_dir():
            for p in self.run_dir.glob(temp_prefix(f"ckpt_*{SUFFIX}") + "*"):
                with contextlib.suppress(OSError):
                    p.unlink()
