"""The run directory: everything a run leaves on disk, written one way.

``config.json`` (the full config), ``metrics.jsonl`` (one row per round),
``env_failures.jsonl`` (host envs: failed evaluation episodes), ``learning_curve.png``,
TensorBoard events under ``tb/`` (when ``tensorboardX`` is installed), checkpoints
``ckpt_<round>.safetensors`` (the newest few kept), ``best_selector.safetensors`` and
``episode.gif``. Text files are replaced atomically (:mod:`feudal_es.atomic`);
``metrics.jsonl`` is appended a row at a time and rewritten from the checkpoint's history
on resume, so it never holds a round that no checkpoint can reproduce for long.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any

import jax
import numpy as np

from feudal_es import checkpoint
from feudal_es.atomic import atomic_write, atomic_write_text

__all__ = ["RunDir", "clean", "default_run_dir", "plot_history"]

log = logging.getLogger("feudal_es.rundir")


def clean(x: Any) -> Any:
    """JSON-safe: numpy / JAX scalars -> Python, NaN/inf -> None, tuples -> lists."""
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, (np.generic, jax.Array)):
        x = np.asarray(x).item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def default_run_dir(env_id: str, mode: str, root: str | os.PathLike = "runs") -> Path:
    """``runs/<env>-<mode>-<UTC timestamp>`` (env id made path-safe, never an existing
    directory)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", env_id.split("/")[-1].split(":")[-1]) or "env"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{name}-{mode}-{stamp}"
    i = 1
    while path.exists():
        path = Path(root) / f"{name}-{mode}-{stamp}-{i}"
        i += 1
    return path


def plot_history(history: list[dict], path: Path, title: str) -> Path | None:
    """Learning curve PNG (matplotlib, Agg). Returns None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rounds = [h["round"] + 1 for h in history]

    def series(name):
        return [np.nan if h.get(name) is None else h[name] for h in history]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.plot(rounds, series("selector_fitness"), "o-", label="selector (mean θ)", ms=3)
    if any(h.get("fitness_best") is not None for h in history):
        ax1.plot(rounds, series("fitness_best"), "--", label="population best", lw=1)
        ax1.plot(rounds, series("fitness_mean"), ":", label="population mean", lw=1)
    ax1.set_xlabel("outer round")
    ax1.set_ylabel("team fitness")
    ax1.set_title("ES: team fitness")
    ax1.legend(fontsize=8)
    for name, label in (("mappo/team_return", "team return (training)"),
                        ("mappo/episode_return", "mean agent return (training)"),
                        ("mappo/skill_reward", "skill reward / step")):
        vals = series(name)
        if any(np.isfinite(vals)):
            ax2.plot(rounds, vals, ".-", label=label)
    ax2.set_xlabel("outer round")
    ax2.set_title("MAPPO rollouts")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
    return path


class RunDir:
    """One run's directory and what is written into it (one writer per directory)."""

    def __init__(self, path: str | os.PathLike, keep_checkpoints: int | None = 3):
        self.path = Path(path)
        self.checkpoints = checkpoint.CheckpointManager(self.path, keep=keep_checkpoints)
        self._tb: Any = None

    # --- where things live -------------------------------------------------------------
    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def failures(self) -> Path:
        return self.path / "env_failures.jsonl"

    @property
    def plot(self) -> Path:
        return self.path / "learning_curve.png"

    @property
    def best_selector(self) -> Path:
        return self.path / f"best_selector{checkpoint.SUFFIX}"

    @property
    def gif(self) -> Path:
        return self.path / "episode.gif"

    # --- lifecycle ------------------------------------------------------------------------
    def start(self, config: dict[str, Any]) -> None:
        """Before round 0 of a new run: refuse a directory holding another run's
        checkpoints, and start ``config.json`` / ``metrics.jsonl`` afresh (rows left by a
        run killed before its first checkpoint belong to nothing that can be resumed)."""
        latest = self.checkpoints.latest()
        if latest is not None:
            raise ValueError(
                f"run directory {self.path} already holds a run (checkpoint {latest.name}); "
                f"continue it with `feudal-es train --resume {self.path}` or choose another "
                "directory")
        self.write_config(config)
        atomic_write_text(self.metrics, "")

    def ensure(self, config: dict[str, Any]) -> None:
        """The directory exists and holds ``config.json``."""
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.config.exists():
            self.write_config(config)

    def write_config(self, config: dict[str, Any]) -> None:
        atomic_write_text(self.config, json.dumps(config, indent=2) + "\n")

    # --- per round ------------------------------------------------------------------------
    def append_metrics(self, row: dict[str, Any]) -> None:
        with open(self.metrics, "a") as f:
            f.write(json.dumps(row) + "\n")

    def rewrite_metrics(self, history: list[dict[str, Any]]) -> None:
        atomic_write_text(self.metrics, "".join(json.dumps(h) + "\n" for h in history))

    def save_best_selector(self, theta: jax.Array, metadata: dict[str, Any]) -> Path:
        return checkpoint.save_selector(self.best_selector, theta, metadata)

    def log_failures(self, round_: int, failures: list[dict[str, Any]]) -> None:
        """Warn about each failed evaluation episode (host envs) and append it to
        ``env_failures.jsonl``."""
        if not failures:
            return
        with open(self.failures, "a") as f:
            for x in failures:
                who = (f"population member {x['member']}" if x["phase"] == "population"
                       else "the current selector's evaluation")
                log.warning("round %d: %s failed in episode %d (env seed %d) and ranks last: "
                            "%s (at %s)", round_, who, x["episode"], x["env_seed"], x["error"],
                            x["where"])
                f.write(json.dumps({"round": round_, **x}) + "\n")

    def add_scalars(self, row: dict[str, Any], step: int) -> None:
        """The row's numbers as TensorBoard scalars, when ``tensorboardX`` is installed."""
        if self._tb is None:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                self._tb = False
                return
            self._tb = SummaryWriter(str(self.path / "tb"))
        if self._tb:
            for k, v in row.items():
                if isinstance(v, (int, float)) and k != "round":
                    self._tb.add_scalar(k, v, step)

    def flush(self) -> None:
        if self._tb:
            self._tb.flush()

    def save_plot(self, history: list[dict[str, Any]], title: str) -> Path | None:
        return plot_history(history, self.plot, title)

    # --- checkpoints ------------------------------------------------------------------------
    def save_checkpoint(self, round_: int, tree: Any, metadata: dict[str, Any]) -> Path:
        return self.checkpoints.save(round_, tree, metadata)

    def has_checkpoint(self, round_: int) -> bool:
        """Whether the newest checkpoint is the one of ``round_``."""
        return self.checkpoints.latest() == self.checkpoints.path(round_)
