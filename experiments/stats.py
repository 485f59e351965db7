"""Statistics of the result studies: the mean and 95% t-interval over seeds of per-seed
values, learning curves interpolated onto a common env-step grid with a band per point, and
"better with disjoint 95% intervals", the test every study's goals use; beside them the
field's robust aggregate, the IQM with a stratified bootstrap interval (rliable).

The 95% t-interval itself is :func:`feudal_es.stats.mean_ci` (re-exported here with
:func:`feudal_es.stats.t_critical`), so the studies and ``feudal-es eval`` report the same
interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from feudal_es.stats import mean_ci, t_critical

__all__ = ["above", "add_iqm", "common_grid", "curve_band", "fmt_ci", "fmt_iqm", "iqm_of",
           "mean_ci", "on_grid", "overlap", "summarize", "t_critical"]


def curve_band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``curves [seeds, points]`` -> per-point ``(mean, 95% t half-width)``."""
    curves = np.asarray(curves, np.float64)
    n = curves.shape[0]
    mean = curves.mean(axis=0)
    if n < 2:
        return mean, np.full_like(mean, np.nan)
    return mean, t_critical(n - 1) * curves.std(axis=0, ddof=1) / math.sqrt(n)


def on_grid(steps: Sequence[float], values: Sequence[float], grid: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation of one run's curve onto ``grid`` (inside its range)."""
    return np.interp(grid, np.asarray(steps, np.float64), np.asarray(values, np.float64))


def common_grid(runs: Sequence[dict], points: int = 50) -> np.ndarray:
    """Env-step grid from the latest first measurement of any run to the budget."""
    lo = max(r["curve"]["env_steps"][0] for r in runs)
    hi = min(r["curve"]["env_steps"][-1] for r in runs)
    return np.linspace(lo, hi, points)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two ``(mean, half-width)`` intervals overlap (a NaN width overlaps)."""
    if not (math.isfinite(a[1]) and math.isfinite(b[1])):
        return True
    return abs(a[0] - b[0]) <= a[1] + b[1]


def above(a: dict, b: dict, higher: bool = True) -> bool:
    """Whether summary ``a`` is better than ``b`` (``{"mean", "ci95"}``) with disjoint
    95% intervals."""
    better = a["mean"] > b["mean"] if higher else a["mean"] < b["mean"]
    return better and not overlap((a["mean"], a["ci95"]), (b["mean"], b["ci95"]))


def summarize(per_seed: Sequence[float]) -> dict[str, Any]:
    """Mean and 95% t half-width over seeds of per-seed values, and (with rliable, the
    ``stats`` extra) their IQM with its stratified bootstrap 95% interval, ``"iqm": [point,
    lo, hi]`` (:func:`iqm_of`)."""
    m, hw = mean_ci([float(v) for v in per_seed])
    out = {"per_seed": [float(v) for v in per_seed], "mean": m, "ci95": hw,
           "n": len(per_seed)}
    iqm = iqm_of(out["per_seed"])
    if iqm is not None:
        out["iqm"] = iqm
    return out


def iqm_of(values: Sequence[float]) -> list[float] | None:
    """``[IQM, lo, hi]`` of ``values`` (:func:`feudal_es.aggregate.iqm`, seed 0), or None
    with fewer than two values or without rliable."""
    from feudal_es import aggregate

    if len(values) < 2:
        return None
    try:
        return list(aggregate.iqm(values))
    except ImportError:
        return None


def fmt_iqm(summary: dict[str, Any], digits: int = 3) -> str:
    """``IQM [lo, hi]`` of a :func:`summarize` dict for a markdown table (``-`` without)."""
    if "iqm" not in summary:
        return "-"
    p, lo, hi = summary["iqm"]
    return f"{p:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def add_iqm(node: Any) -> Any:
    """Every :func:`summarize` dict under ``node`` (a study report) given its ``"iqm"``
    when it lacks one: reports written before the column existed gain it without a rerun."""
    if isinstance(node, dict):
        if "per_seed" in node and "mean" in node and "iqm" not in node:
            iqm = iqm_of(node["per_seed"])
            if iqm is not None:
                node["iqm"] = iqm
        for v in node.values():
            add_iqm(v)
    elif isinstance(node, list):
        for v in node:
            add_iqm(v)
    return node


def fmt_ci(m: float, hw: float, digits: int = 3) -> str:
    """``mean ± half-width`` for a markdown table."""
    if not math.isfinite(hw):
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {hw:.{digits}f}"
