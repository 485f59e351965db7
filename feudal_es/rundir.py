"""The run directory: everything a run leaves on disk, written one way.

``config.json`` (the full config), ``metrics.jsonl`` (one row per round),
``env_failures.jsonl`` (host envs: failed evaluation episodes), ``learning_curve.png``,
TensorBoard events under ``tb/`` (when ``tensorboardX`` is installed), checkpoints
``ckpt_<round>.safetensors`` (the newest few kept), ``best_selector.safetensors`` and
``episode.gif``, and the lock of its one writer (``.lock``, :mod:`feudal_es.runlock`).
Every file is written through :mod:`feudal_es.atomic`: replaced whole, or (the ``.jsonl``
logs) appended whole rows at a time; ``metrics.jsonl`` is rewritten from the checkpoint's
history on resume, so it never holds a round that no checkpoint can reproduce for long.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from feudal_es import checkpoint, modes
from feudal_es.atomic import append, atomic_write, atomic_write_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["LABELS", "RunDir", "check_new_run_dir", "clean", "default_run_dir",
           "learning_curve_figure", "plot_history", "seed_dirs", "write_config"]

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


def write_config(path: str | os.PathLike, config: dict[str, Any]) -> Path:
    """A config as indented JSON, replaced atomically."""
    return atomic_write_text(path, json.dumps(config, indent=2) + "\n")


_SEED_DIR = re.compile(r"^seed_(\d+)$")


def seed_dirs(run_dir: str | os.PathLike) -> dict[int, Path]:
    """The seed subdirectories ``seed_<s>`` of a many-seed run directory, by seed."""
    run_dir = Path(run_dir)
    found = {}
    if run_dir.is_dir():
        for p in run_dir.iterdir():
            m = _SEED_DIR.match(p.name)
            if m and p.is_dir():
                found[int(m.group(1))] = p
    return dict(sorted(found.items()))


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


# One name per number, shared by the progress bar, the summary line and the plot.
LABELS = {
    "selector_fitness": "selector",  # mean θ, on the evaluation episodes
    "best_selector": "best selector",  # the best "selector" value so far (best_selector file)
    "fitness_best": "pop. best",  # best member θ+σε this generation, on the fitness episodes
    "fitness_mean": "pop. mean",
}
# What each line of the learning curve is; the caption names only the lines drawn.
_MEANING = {
    "selector_fitness": "the current selector (ES mean θ) on the evaluation episodes",
    "best_selector": 'the best "selector" value so far (the best_selector file)',
    "fitness_best": "this generation's best perturbed member θ+σε, on the fitness episodes "
                    "(other episodes, and perturbed, so it can sit below the selector)",
    "fitness_mean": "the mean of this generation's perturbed members",
}
_MEANING_NO_ES = {  # a mode without ES: the selector stays as it started
    "selector_fitness": "the current policy (its selector fixed) on the evaluation episodes",
    "best_selector": 'the best "selector" value so far',
}
# The MAPPO panels: row key, panel title, y label (one quantity, one axis each).
_MAPPO_PANELS = (
    ("mappo/team_return", "MAPPO: team return", "team return per training episode"),
    ("mappo/episode_return", "MAPPO: agent return",
     "mean agent return per training episode"),
    ("mappo/skill_reward", "MAPPO: training reward", "training reward per agent-step"),
)
_EPISODE_KEYS = ("mappo/team_return", "mappo/episode_return")  # logged when an episode ended


def _column(history: list[dict], name: str) -> np.ndarray:
    """One row key over the rounds as floats, NaN where a row lacks it or holds None."""
    return np.array([np.nan if h.get(name) is None else h[name] for h in history], float)


def learning_curve_figure(history: list[dict], title: str,
                          mode: str | None = None) -> Figure | None:
    """The learning curve as a matplotlib ``Figure`` (object API, no pyplot state), built
    from ``metrics.jsonl`` rows alone so that it can be checked without training.

    Panel 1: team fitness by round (the current selector, the best so far and, when ES
    runs, the population's best / mean), titled by what produced it. Then, when the
    ``mode`` trains the executor (or the rows hold MAPPO numbers), one panel per MAPPO
    quantity (team return, mean agent return, training reward per step), each on its own
    labelled y axis, since they differ by orders of magnitude. Episode returns exist only
    in rounds where a training episode ended (a round may collect fewer steps than an
    episode lasts): their lines join those rounds and the panel says how many there are.
    A learner the mode does not run is said in a title, never over the data; the caption
    explains only the lines drawn. None when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return None
    plan = None if mode is None else modes.mode(mode)
    runs_es = plan is None or plan.runs_es
    meaning = _MEANING if runs_es else _MEANING_NO_ES
    rounds = np.array([h["round"] + 1 for h in history], int)
    mappo_rounds = np.array([any(k.startswith("mappo/") and v is not None
                                 for k, v in h.items()) for h in history], bool)
    show_mappo = (plan.trains_executor if plan is not None else True) or bool(
        mappo_rounds.any())

    fig = Figure(figsize=(10, 7.6) if show_mappo else (6.4, 4.8))
    axes = fig.subplots(2, 2).ravel() if show_mappo else [fig.subplots()]
    drawn: list[str] = []

    def line(ax: Any, vals: np.ndarray, fmt: str, label: str | None = None, **kw: Any) -> int:
        ok = np.isfinite(vals)  # join the rounds that have a value, markers on them
        if ok.any():
            ax.plot(rounds[ok], vals[ok], fmt, label=label, **kw)
        return int(ok.sum())

    ax = axes[0]
    fitness = _column(history, "selector_fitness")
    if line(ax, fitness, "o-", LABELS["selector_fitness"], ms=3):
        drawn.append("selector_fitness")
        ax.plot(rounds, np.fmax.accumulate(fitness), "-", color="0.6", lw=1,
                label=LABELS["best_selector"])
        drawn.append("best_selector")
    if runs_es:
        for name, fmt in (("fitness_best", "--"), ("fitness_mean", ":")):
            if line(ax, _column(history, name), fmt, LABELS[name], lw=1):
                drawn.append(name)
    ax.set_ylabel("team fitness (team return per episode)")
    ax.set_title("ES: team fitness" if runs_es
                 else f"Team fitness\n{plan.frozen}", fontsize=10)
    if not drawn:
        ax.text(0.5, 0.5, "no rounds yet", ha="center", va="center", transform=ax.transAxes,
                fontsize=9, color="0.3")
    elif len(drawn) > 1:
        ax.legend(fontsize=8)

    sparse = None
    for ax, (name, panel, ylabel) in zip(axes[1:], _MAPPO_PANELS if show_mappo else (),
                                         strict=True):
        vals = _column(history, name)
        n = line(ax, vals, ".-", color="C3" if name in _EPISODE_KEYS else "C4")  # not ES's
        ax.set_ylabel(ylabel)
        if name in _EPISODE_KEYS and 0 < n < mappo_rounds.sum():
            sparse = (n, int(mappo_rounds.sum()))
            panel += f"\nrounds in which a training episode ended: {n} of {sparse[1]}"
        ax.set_title(panel, fontsize=10)
        if not n:  # an empty panel: the note cannot cover data
            why = ("no training episode ended yet" if name in _EPISODE_KEYS
                   and mappo_rounds.any() else "no MAPPO rounds logged")
            ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes,
                    fontsize=9, color="0.3")
    for ax in axes:
        ax.set_xlabel("outer round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))

    caption = [f"{LABELS[k]}: {meaning[k]}" for k in drawn]
    if show_mappo:
        caption.append("MAPPO panels: the round's training rollouts (means over its "
                       "gradient steps)")
    if sparse:
        caption.append("episode returns exist only in rounds in which a training episode "
                       "ended (a round collects fewer steps than an episode lasts); the "
                       "lines join those rounds")
    head = title if show_mappo or plan is None else f"{title}\n{plan.frozen}"
    fig.suptitle(head, fontsize=10)
    fig.text(0.5, 0.01, "; ".join(caption) + ".", ha="center", va="bottom", fontsize=7,
             wrap=True)
    fig.tight_layout(rect=(0, 0.08 if show_mappo else 0.12, 1, 1))
    return fig


def plot_history(history: list[dict], path: Path, title: str,
                 mode: str | None = None) -> Path | None:
    """:func:`learning_curve_figure` as a PNG at ``path`` (written atomically). Returns
    None when matplotlib is missing."""
    fig = learning_curve_figure(history, title, mode)
    if fig is None:
        return None
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100))
    return path


# What a run directory may hold besides checkpoints (a new run may start over these: they
# are what a run killed before its first checkpoint leaves).
_RUN_FILES = re.compile(r"^(config\.json|metrics\.jsonl|env_failures\.jsonl|"
                        r"learning_curve\.png|best_selector\.(safetensors|npz)|episode\.gif|"
                        r"tb|checkpoints|seed_\d+)$")


def check_new_run_dir(path: str | os.PathLike) -> None:
    """Raise ValueError unless a new run may start in ``path``: it does not exist, is
    empty, or holds only what a run that never checkpointed leaves. A directory with a
    checkpoint names the resume command; one holding other files is refused (a run would
    mix its files into them)."""
    path = Path(path)
    if not path.exists():
        return
    if not path.is_dir():
        raise ValueError(f"--out {path} is a file, not a directory")
    dirs = [path, *(p for p in path.iterdir() if p.is_dir() and p.name.startswith("seed_"))]
    for d in dirs:
        mgr = checkpoint.CheckpointManager(d)
        if mgr.legacy() and mgr.latest() is None:
            raise ValueError(
                f"run directory {path} holds a run of an older feudal-es "
                f"({mgr.legacy()[-1].relative_to(path)}); rewrite it with `feudal-es convert "
                "SRC` to resume it, or choose another directory")
        latest = mgr.latest()
        if latest is not None:
            raise ValueError(
                f"run directory {path} already holds a run (checkpoint "
                f"{latest.relative_to(path)}); continue it with `feudal-es train --resume "
                f"{path}` or choose another directory")
    foreign = sorted(p.name for p in path.iterdir()
                     if not _RUN_FILES.match(p.name) and not p.name.startswith(("ckpt_", ".")))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise ValueError(f"--out {path} is not empty and is not a run directory (it holds "
                         f"{shown}); choose a new or empty directory")


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
        check_new_run_dir(self.path)
        self.write_config(config)
        atomic_write_text(self.metrics, "")

    def ensure(self, config: dict[str, Any]) -> None:
        """The directory exists and holds ``config.json``."""
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.config.exists():
            self.write_config(config)

    def write_config(self, config: dict[str, Any]) -> None:
        write_config(self.config, config)

    # --- per round ------------------------------------------------------------------------
    def append_metrics(self, row: dict[str, Any]) -> None:
        append(self.metrics, json.dumps(row) + "\n")

    def rewrite_metrics(self, history: list[dict[str, Any]]) -> None:
        atomic_write_text(self.metrics, "".join(json.dumps(h) + "\n" for h in history))

    def save_best_selector(self, theta: jax.Array, metadata: dict[str, Any]) -> Path:
        return checkpoint.save_selector(self.best_selector, theta, metadata)

    def log_failures(self, round_: int, failures: list[dict[str, Any]]) -> None:
        """Warn about each failed evaluation episode (host envs) and append it to
        ``env_failures.jsonl``."""
        if not failures:
            return
        for x in failures:
            who = (f"population member {x['member']}" if x["phase"] == "population"
                   else "the current selector's evaluation")
            log.warning("round %d: %s failed in episode %d (env seed %d) and ranks last: "
                        "%s (at %s)", round_, who, x["episode"], x["env_seed"], x["error"],
                        x["where"])
        append(self.failures, "".join(json.dumps({"round": round_, **x}) + "\n"
                                      for x in failures))

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

    def save_plot(self, history: list[dict[str, Any]], title: str,
                  mode: str | None = None) -> Path | None:
        return plot_history(history, self.plot, title, mode)

    # --- checkpoints ------------------------------------------------------------------------
    def save_checkpoint(self, round_: int, tree: Any, metadata: dict[str, Any]) -> Path:
        return self.checkpoints.save(round_, tree, metadata)

    def has_checkpoint(self, round_: int) -> bool:
        """Whether the newest checkpoint is the one of ``round_``."""
        return self.checkpoints.latest() == self.checkpoints.path(round_)
