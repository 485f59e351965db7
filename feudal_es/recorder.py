"""What one seed's run keeps of its rounds: the rows, the best selector, the learning
curve, TensorBoard and the checkpoints, in its run directory.

The trainer runs rounds (:func:`feudal_es.loop.merl_round`) and hands each seed's part
of the result to that seed's :class:`RunRecorder`; the recorder turns it into the round's
``metrics.jsonl`` row (:func:`round_row`) and writes what the round leaves on disk. It
never runs anything itself, so one seed and many seeds record the same way.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from feudal_es import mappo
from feudal_es.rundir import LABELS, RunDir, clean

if TYPE_CHECKING:
    from feudal_es.config import TrainerConfig

__all__ = ["Progress", "RunRecorder", "round_row", "step_metrics"]

log = logging.getLogger("feudal_es.trainer")

# row column: ES info key
_ES_COLUMNS = {"fitness_best": "best_fitness", "fitness_mean": "mean_fitness",
               "sigma": "sigma", "num_invalid": "num_invalid"}
_MIGRATION_KEYS = ("migrated", "learner_fitness", "incumbent_fitness")


def step_metrics(steps: list[tuple[dict, Any]], seed: int | None, sps: float) -> list[dict]:
    """One gradient step's host metrics per step of a round (``steps``: the round's
    ``(metrics, skipped)`` per step; ``seed``: the row of a seed-batched round, ``None``
    for one seed); ``sps``: the steps' env steps per wall second."""
    pick = (lambda v: v) if seed is None else (lambda v: v[seed])
    return [{**{k: float(pick(v)) for k, v in metrics.items()},
             "skipped_updates": float(pick(skipped)), "sps": sps}
            for metrics, skipped in steps]


def round_row(round_: int, env_steps: int, evaluation: tuple[np.ndarray, dict],
              info: dict | None, steps: list[dict], failed_members: int | None,
              sps: float | None, round_time: float, wall_time: float) -> dict[str, Any]:
    """The round's ``metrics.jsonl`` row: the current selector on the evaluation
    episodes (team returns ``[1, E]`` and final env metrics), the ES generation's
    ``info``, the MAPPO steps' metrics (means; ``env_steps`` the last; skipped updates
    summed), failures and throughput; JSON-safe (:func:`~feudal_es.rundir.clean`)."""
    ret, env_metrics = evaluation
    row: dict[str, Any] = {"round": round_, "env_steps": int(env_steps),
                           "selector_fitness": float(ret.mean()),
                           "selector_fitness_std": float(ret.std())}
    row.update({f"env/{k}": float(np.mean(v)) for k, v in env_metrics.items()})
    row.update({col: None if info is None else info[k] for col, k in _ES_COLUMNS.items()})
    if info is not None and "migrated" in info:  # mode merl-actor (feudal_es.migration)
        row.update({f"migration/{k}": info[k] for k in _MIGRATION_KEYS})
    for k in steps[0] if steps else ():
        vals = [m[k] for m in steps]
        row[f"mappo/{k}"] = (vals[-1] if k == "env_steps" else sum(vals)
                             if k == "skipped_updates" else float(np.nanmean(vals))
                             if np.isfinite(vals).any() else None)
    if failed_members is not None:
        row["failed_members"] = failed_members
    row.update(sps=sps, round_time=round_time, wall_time=wall_time)
    return clean(row)


class RunRecorder:
    """One seed's run directory: what a committed round writes into it.

    Attributes: ``config`` (the seed's one-seed config), ``rundir``
    (:class:`~feudal_es.rundir.RunDir`), ``best_fitness`` (the best ``selector_fitness``
    so far, whose selector is ``best_selector``), ``wall_offset`` (seconds trained before
    this process, from the checkpoint).
    """

    def __init__(self, config: TrainerConfig, path: str | Path):
        self.config = config
        self.rundir = RunDir(path, config.keep_checkpoints)
        self.best_fitness = -math.inf
        self.wall_offset = 0.0

    @property
    def title(self) -> str:
        """The learning curve's title."""
        c = self.config
        return f"{c.env} ({c.mode}, seed {c.seed})"

    def start(self, fresh: bool) -> None:
        """Before rounds: a fresh run refuses a directory that holds a run and starts its
        files afresh; any run makes sure the directory and ``config.json`` exist."""
        if fresh:
            self.rundir.start(self.config.to_dict())
        self.rundir.ensure(self.config.to_dict())

    def warn_skipped(self, round_: int, steps: list[dict]) -> None:
        """Warn once per skipped (non-finite) MAPPO update of the round."""
        for m in steps:
            if m["skipped_updates"]:
                bad = [k for k in mappo.LOSS_KEYS if k in m and not math.isfinite(m[k])]
                log.warning("round %d: MAPPO update skipped: non-finite %s; the executor and "
                            "critic keep their last finite parameters", round_,
                            ", ".join(bad) if bad else "parameters after the update")

    def record(self, history: list[dict], theta: jax.Array, metadata: dict[str, Any],
               save_checkpoint: Callable[[], Any], last: bool) -> None:
        """Write a committed round (``history[-1]``): the best selector when it improved,
        the metrics row, TensorBoard, the learning curve (every ``plot_every`` rounds and
        the last) and a checkpoint (every ``checkpoint_every`` rounds and the last, by
        ``save_checkpoint()``)."""
        cfg, rd, row = self.config, self.rundir, history[-1]
        r = row["round"]
        if row["selector_fitness"] is not None and row["selector_fitness"] > self.best_fitness:
            self.best_fitness = row["selector_fitness"]
            rd.save_best_selector(theta, {**metadata, "fitness": self.best_fitness,
                                          "round": r})
        rd.append_metrics(row)
        rd.add_scalars(row, r)
        if (r + 1) % cfg.plot_every == 0 or last:
            rd.save_plot(history, self.title, cfg.mode)
        if (r + 1) % cfg.checkpoint_every == 0 or last:
            save_checkpoint()


class Progress:
    """The progress bar of a run (tqdm): one tick per round, the round's numbers as its
    postfix (seed means with several seeds), in the names of :data:`~feudal_es.rundir.LABELS`."""

    def __init__(self, total: int, initial: int, desc: str):
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, unit="round", dynamic_ncols=True,
                        desc=desc)

    def update(self, rows: list[dict], recorders: list[RunRecorder]) -> None:
        many = len(rows) > 1
        mean = lambda k: np.mean([row[k] for row in rows if row.get(k) is not None])
        best = np.mean([rec.best_fitness for rec in recorders])
        post = {LABELS["selector_fitness"] + (" (seed mean)" if many else ""):
                f"{mean('selector_fitness'):.3g}", LABELS["best_selector"]: f"{best:.3g}"}
        if not many:
            if rows[0].get("fitness_best") is not None:
                post[LABELS["fitness_best"]] = f"{rows[0]['fitness_best']:.3g}"
            if rows[0].get("sps") is not None:
                post["sps"] = f"{rows[0]['sps']:.0f}"
        self.bar.set_postfix(post)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
