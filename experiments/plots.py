"""A study's figure: learning curves over training env steps with 95% bands over seeds,
and held-out bars of every arm and reference policy, one row per variant.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.arms import ARM_LABELS
from experiments.stats import common_grid, curve_band, on_grid

__all__ = ["new_figure", "plot_bars", "plot_curves", "plot_profiles", "plot_study",
           "save_figure"]


def new_figure(nrows: int, ncols: int, width: float = 5.2, height: float = 3.6):
    """A matplotlib figure (Agg backend) with ``nrows x ncols`` axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False)
    return fig, axes


def save_figure(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curves(ax: Any, runs: list[dict], arms: Sequence[str], title: str, ylabel: str,
                references: dict | None = None) -> None:
    """Mean and 95% band over seeds of each arm's learning curve against training env
    steps (interpolated onto one grid); reference policies as dashed lines."""
    grid = common_grid(runs)
    for i, arm in enumerate(arms):
        mine = [r for r in runs if r["arm"] == arm]
        ys = np.stack([on_grid(r["curve"]["env_steps"], r["curve"]["fitness"], grid)
                       for r in mine])
        mean, hw = curve_band(ys)
        ax.plot(grid, mean, color=f"C{i}", label=f"{ARM_LABELS[arm]} (n={len(mine)})")
        ax.fill_between(grid, mean - hw, mean + hw, color=f"C{i}", alpha=0.2)
    for j, (n, d) in enumerate((references or {}).items()):
        ax.axhline(d["team_return"]["mean"], ls="--", lw=1, color=f"C{len(arms) + j}",
                   label=f"{n} (reference)")
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 200k, 1M: no offset text
    ax.set_xlabel("training env steps (MAPPO samples + ES fitness episodes)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def plot_bars(ax: Any, v: dict, key: str, xlabel: str, eval_episodes: int) -> None:
    """Held-out value of every arm and reference, mean ± 95% CI."""
    names = [ARM_LABELS[a] for a in v[key]] + [f"{n} (reference)" for n in v["references"]]
    stats = list(v[key].values()) + [d[key] for d in v["references"].values()
                                     if key in d]
    names = names[: len(stats)]
    ax.barh(names, [s["mean"] for s in stats],
            xerr=[np.nan_to_num(s["ci95"]) for s in stats], capsize=3,
            color=[f"C{i}" for i in range(len(stats))])
    ax.invert_yaxis()
    ax.set_xlabel(f"{xlabel}, {eval_episodes} held-out episodes")
    ax.set_title("held-out, mean ± 95% CI (arms: over seeds; references: over episodes)",
                 fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="y", labelsize=7)


def plot_study(report: dict, path: Path, fitness_label: str, metric_label: str) -> Path:
    """One row per variant: learning curves, then held-out bars of the metric."""
    variants = report["variants"]
    fig, axes = new_figure(len(variants), 2)
    metric = report["metric"]
    for row, (label, v) in zip(axes, variants.items(), strict=True):
        arms = list(v["team_return"])
        plot_curves(row[0], v["runs"], arms,
                    f"{report['study']} · {label}: {v['budget_env_steps']:,} env steps / run",
                    fitness_label, v["references"])
        key = metric if metric in v else "team_return"
        plot_bars(row[1], v, key, metric_label if key == metric else "team return",
                  report["eval_episodes"])
    return save_figure(fig, path)


def plot_profiles(report: dict, path: Path, metric_label: str) -> Path | None:
    """Performance profiles (rliable) of every arm's per-seed held-out metric, one panel
    per variant: the share of seeds past each score, with 95% bands. None without rliable
    (the ``stats`` extra)."""
    from feudal_es import aggregate

    try:
        aggregate.rliable()
    except ImportError:
        return None
    variants, metric = report["variants"], report["metric"]
    higher = report.get("metric_higher_is_better", True)
    fig, axes = new_figure(1, len(variants))
    for ax, (label, v) in zip(axes[0], variants.items(), strict=True):
        key = metric if metric in v else "team_return"
        scores = {ARM_LABELS[a]: s["per_seed"] for a, s in v[key].items()}
        aggregate.draw_performance_profiles(
            ax, scores, metric_label if key == metric else "team return",
            higher_is_better=higher if key == metric else True)
        ax.set_title(f"{report['study']} · {label}: per-seed held-out scores", fontsize=9)
    return save_figure(fig, path)
