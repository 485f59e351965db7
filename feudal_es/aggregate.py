"""The field's robust aggregates of scores, by rliable (Agarwal et al., NeurIPS 2021, "Deep
Reinforcement Learning at the Edge of the Statistical Precipice"), the library Mava,
BenchMARL and marl-eval report with.

- :func:`iqm`: the interquartile mean (the mean of the middle 50% of the scores: robust to
  an outlying seed, less noisy than the median) with a stratified bootstrap 95% interval;
- :func:`probability_of_improvement`: ``P(X > Y)``, the chance that a score of ``X`` beats
  one of ``Y`` (ties count one half; Mann-Whitney's U over ``n_x n_y``), with its interval
  from bootstrapping ``X`` and ``Y`` independently;
- :func:`performance_profile` / :func:`draw_performance_profiles`: the share of runs
  scoring above each threshold ``tau``, with bands.

The bootstraps are rliable's; the metrics they resample (:func:`aggregate_iqm`,
:func:`aggregate_poi`, :func:`aggregate_profile`) are rliable's arithmetic in plain numpy,
equal to its own bit for bit and many times cheaper per resample.

Scores are ``[runs]`` (one task) or ``[runs, tasks]`` (stratified over tasks). rliable
and its stack (arch, pandas, seaborn) are the optional ``stats`` extra, imported on first
use with the install command in the error. Bootstraps are seeded, so a report is
reproducible; :data:`REPS` resamples by default (rliable's own plots use 2,000-50,000).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

__all__ = ["REPS", "Interval", "aggregate_iqm", "aggregate_poi", "aggregate_profile",
           "draw_performance_profiles", "iqm", "performance_profile",
           "plot_performance_profiles", "probability_of_improvement", "rliable"]

REPS = 2000
INSTALL = "pip install 'feudal-es[stats]'"


class Interval(NamedTuple):
    """A point estimate and its 95% interval ``[lo, hi]``."""

    point: float
    lo: float
    hi: float

    def fmt(self, digits: int = 3) -> str:
        return f"{self.point:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def rliable() -> tuple[Any, Any]:
    """``(rliable.library, rliable.metrics)``, or an ImportError that says how to install."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from rliable import library, metrics
    except ImportError as e:  # rliable missing, or its arch failing under pandas >= 3
        raise ImportError(f"IQM, bootstrap intervals and P(X > Y) need rliable: {INSTALL} "
                          f"({e})") from e
    return library, metrics


def _matrix(name: str, scores: Any) -> np.ndarray:
    x = np.asarray(scores, np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{name}: scores must be [runs] or [runs, tasks], got shape "
                         f"{np.shape(scores)}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: scores must be finite, got {int((~np.isfinite(x)).sum())} "
                         "NaN or infinite")
    return x


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """rliable's stratified bootstraps draw their indices from numpy's global stream
    (``np.random.choice``), whatever ``random_state`` says: seed it for the call, then put
    the caller's state back. Also silences arch's notice about ``random_state``."""
    saved = np.random.get_state()  # noqa: NPY002 (the legacy stream rliable reads)
    np.random.seed(seed)  # noqa: NPY002
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        np.random.set_state(saved)  # noqa: NPY002


def _estimate(data: Any, func: Any, reps: int, seed: int) -> Interval:
    library, _ = rliable()
    with _seeded(seed):
        point, ci = library.get_interval_estimates({"x": data}, func, reps=reps)
    lo, hi = np.asarray(ci["x"], np.float64).reshape(2, -1)[:, 0]
    return Interval(float(np.ravel(point["x"])[0]), float(lo), float(hi))


# rliable's metrics, the same arithmetic without scipy's argument handling: the
# bootstrap (rliable's, through arch) calls the metric once per resample in Python, and
# ``scipy.stats.trim_mean`` / ``mannwhitneyu`` spend far longer checking their arguments
# than computing on ten scores (about a second per 2,000-resample interval), as
# ``np.vectorize`` does for a profile's thresholds. Equal to rliable's bit for bit
# (tests/test_aggregate.py).
def aggregate_iqm(scores: np.ndarray) -> float:
    """``rliable.metrics.aggregate_iqm``: the 25% trimmed mean over every run and task,
    computed as ``scipy.stats.trim_mean(scores, 0.25, axis=None)`` computes it."""
    a = np.ravel(scores)
    cut = int(0.25 * a.size)
    return float(np.mean(np.partition(a, (cut, a.size - cut - 1))[cut:a.size - cut]))


def aggregate_poi(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """``rliable.metrics.probability_of_improvement``: per task, Mann-Whitney's U of ``x``
    over ``y`` (pairs with ``x > y``, ties one half) over ``n_x n_y``; averaged over tasks."""
    per_task = []
    for x, y in zip(scores_x.T, scores_y.T, strict=True):
        if np.array_equal(x, y):
            per_task.append(0.5)
            continue
        u = np.sum(x[:, None] > y[None, :]) + 0.5 * np.sum(x[:, None] == y[None, :])
        per_task.append(float(u) / (x.size * y.size))
    return float(np.mean(per_task))


def aggregate_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """``rliable.library.score_distributions``: the share of all runs' scores above each
    ``tau`` (rliable maps ``np.mean(scores > tau)`` over the taus one by one)."""
    return np.mean(np.ravel(scores)[None, :] > np.asarray(taus)[:, None], axis=1)


def iqm(scores: Any, reps: int = REPS, seed: int = 0) -> Interval:
    """Interquartile mean of ``scores`` (``[runs]`` or ``[runs, tasks]``) with the stratified
    bootstrap 95% percentile interval (runs resampled within each task)."""
    x = _matrix("iqm", scores)
    return _estimate(x, lambda s: np.array([aggregate_iqm(s)]), reps, seed)


def probability_of_improvement(x: Any, y: Any, reps: int = REPS, seed: int = 0) -> Interval:
    """``P(X > Y)`` averaged over tasks, with the 95% interval of the independent
    stratified bootstrap of ``x`` and ``y`` (``[runs]`` or ``[runs, tasks]``, the same
    tasks; the run counts may differ). 0.5: no difference; above 0.5 with the interval
    too: ``X`` tends to score higher."""
    a, b = _matrix("x", x), _matrix("y", y)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x and y must have the same tasks, got {a.shape[1]} and "
                         f"{b.shape[1]}")
    return _estimate((a, b), aggregate_poi, reps, seed)


def performance_profile(scores: Mapping[str, Any], taus: Sequence[float],
                        reps: int = REPS, seed: int = 0
                        ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per name, the fraction of runs scoring above each ``tau`` (``[len(taus)]``) and its
    95% band (``[2, len(taus)]``)."""
    library, _ = rliable()
    data = {k: _matrix(k, v) for k, v in scores.items()}
    taus = np.asarray(taus, np.float64)
    with _seeded(seed):
        return library.get_interval_estimates(
            data, lambda s: aggregate_profile(s, taus), reps=reps)


def draw_performance_profiles(ax: Any, scores: Mapping[str, Any], xlabel: str,
                              higher_is_better: bool = True, points: int = 101,
                              reps: int = REPS, seed: int = 0) -> None:
    """Every name's performance profile on the matplotlib axes ``ax``, over the scores'
    range, with its 95% band (for a lower-is-better score, the fraction of runs *below*
    each threshold)."""
    sign = 1.0 if higher_is_better else -1.0
    data = {k: sign * _matrix(k, v) for k, v in scores.items()}
    lo = min(float(v.min()) for v in data.values())
    hi = max(float(v.max()) for v in data.values())
    taus = np.linspace(lo, hi, points) if hi > lo else np.array([lo - 0.5, lo, lo + 0.5])
    prof, band = performance_profile(data, taus, reps=reps, seed=seed)
    for i, name in enumerate(data):
        ax.plot(sign * taus, prof[name], color=f"C{i}", label=name)
        ax.fill_between(sign * taus, band[name][0], band[name][1], color=f"C{i}", alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of runs " + ("> tau" if higher_is_better else "< tau"))
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def plot_performance_profiles(scores: Mapping[str, Any], path: str | Path,
                              xlabel: str, higher_is_better: bool = True,
                              points: int = 101, reps: int = REPS, seed: int = 0) -> Path:
    """A PNG of :func:`draw_performance_profiles`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    draw_performance_profiles(ax, scores, xlabel, higher_is_better, points, reps, seed)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
