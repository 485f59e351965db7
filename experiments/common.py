"""Shared machinery of the result studies: training at an equal env-step budget, held-out
evaluation, 95% confidence intervals, curves on a common env-step grid, plots, summaries.

Env-step accounting (the same for every mode): one env step = one step of one swarm env
copy. A round of ``ESTrainer`` spends ``grad_steps_per_outer * mappo.batch_size`` steps on
MAPPO rollouts (modes ``merl``, ``mappo``) and ``es.num_candidates * episodes * max_steps``
steps on ES fitness episodes (modes ``merl``, ``es``). The trainer's per-round logging
episodes (the current selector's fitness, used only to draw the curves) are a measurement,
not training, and are counted for no mode. Each mode runs ``budget / steps_per_round``
rounds, so all modes end at the same budget (the budget is rounded up to a common
multiple of the three modes' round sizes).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import platform
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from feudal_es.config import COMPACT_ACTOR
from feudal_es.stats import mean_ci, t_critical

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = (0, 1, 2, 3, 4)  # every study's default seeds
MODES = ("merl", "es", "mappo")
MODE_LABELS = {"merl": "MERL (ES selector + MAPPO executor)", "es": "ES-only",
               "mappo": "MAPPO-only"}
HELDOUT_SEED = 123_456  # root of the held-out evaluation episodes (never used in training)

# ---------------------------------------------------------------------------------------
# statistics (the 95% t-interval is feudal_es.stats')
# ---------------------------------------------------------------------------------------
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
    """Whether two ``(mean, half-width)`` intervals overlap."""
    return abs(a[0] - b[0]) <= a[1] + b[1]


# ---------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------
def steps_per_round(config: Any, max_steps: int) -> int:
    """Training env steps one round of ``config`` spends (see the module docstring)."""
    mcfg, ecfg = config.mappo, config.es
    steps = 0
    if config.trains_executor:
        steps += config.grad_steps_per_outer * mcfg.batch_size
    if config.runs_es:
        steps += ecfg.num_candidates * config.episodes * max_steps
    return steps


def equal_budget(base: dict, max_steps: int, budget: int) -> tuple[int, dict[str, int]]:
    """Round ``budget`` up to a multiple of every mode's round size; rounds per mode."""
    from feudal_es.trainer import TrainerConfig

    sizes = {m: steps_per_round(TrainerConfig.from_dict({**base, "mode": m}), max_steps)
             for m in MODES}
    lcm = math.lcm(*sizes.values())
    budget = max(lcm, -(-budget // lcm) * lcm)
    return budget, {m: budget // s for m, s in sizes.items()}


def train_and_evaluate(base: dict, mode: str, seed: int, rounds: int, max_steps: int,
                       eval_episodes: int, run_root: Path,
                       metric: str | None = None) -> dict[str, Any]:
    """Train one (mode, seed) for ``rounds`` rounds, then evaluate the final actor and
    selector on ``eval_episodes`` held-out episodes (the same for every mode and seed).

    Returns the per-round curve (training env steps, logged selector fitness) and the
    held-out team returns (and final values of env ``metric``), per episode.
    """
    import jax

    from agents import selector_theta
    from feudal_es.trainer import ESTrainer, TrainerConfig

    cfg = TrainerConfig.from_dict({**base, "mode": mode, "seed": seed, "n_outer": rounds,
                                   "checkpoint_every": 10**6, "plot_every": 10**6,
                                   "gif": False})
    per_round = steps_per_round(cfg, max_steps)
    t0 = time.perf_counter()
    trainer = ESTrainer(cfg, run_root / f"{mode}-seed{seed}")
    history = trainer.run()
    train_time = time.perf_counter() - t0
    theta = selector_theta(trainer.ts.actor)
    ret, metrics = trainer.rollout_stats(theta[None], jax.random.key(HELDOUT_SEED),
                                         episodes=eval_episodes)
    out = {
        "mode": mode, "seed": seed, "rounds": rounds,
        "env_steps": rounds * per_round,
        "curve": {"env_steps": [(h["round"] + 1) * per_round for h in history],
                  "selector_fitness": [h["selector_fitness"] for h in history],
                  "mappo_env_steps": [h["env_steps"] for h in history]},
        "heldout_team_return": [float(v) for v in np.asarray(ret)[0]],
        "train_time_s": train_time,
        "total_time_s": time.perf_counter() - t0,
    }
    if metric is not None:
        out["heldout_" + metric] = [float(v) for v in np.asarray(metrics[metric])[0]]
    return out


def run_modes(base: dict, max_steps: int, budget: int, seeds: Sequence[int],
              eval_episodes: int, run_root: Path, metric: str | None = None,
              modes: Sequence[str] = MODES, log: Callable[[str], None] = print
              ) -> tuple[int, list[dict]]:
    """Every mode x seed at an equal env-step budget; returns (budget, per-run results)."""
    budget, rounds = equal_budget(base, max_steps, budget)
    shutil.rmtree(run_root, ignore_errors=True)  # trainers append to an existing run dir
    results = []
    for mode in modes:
        for seed in seeds:
            r = train_and_evaluate(base, mode, seed, rounds[mode], max_steps, eval_episodes,
                                   run_root, metric)
            results.append(r)
            log(f"  {mode:5s} seed {seed}: {r['rounds']} rounds, {r['env_steps']} env steps, "
                f"held-out team return {np.mean(r['heldout_team_return']):.3f}, "
                f"{r['total_time_s']:.1f}s")
    return budget, results


# ---------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------
def write_json(path: Path, data: Any) -> Path:
    """Pretty JSON, written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def write_csv(path: Path, rows: list[dict]) -> Path:
    """Rows of a per-seed table as CSV (columns from the first row)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def plot_curves(ax: Any, runs: list[dict], title: str, ylabel: str,
                modes: Sequence[str] = MODES) -> dict[str, tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray]]:
    """Mean and 95% CI band over seeds of each mode's learning curve, against env steps
    (curves interpolated onto one grid). Returns ``{mode: (grid, mean, half-width)}``."""
    grid = common_grid(runs)
    bands = {}
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        if not mine:
            continue
        ys = np.stack([on_grid(r["curve"]["env_steps"], r["curve"]["selector_fitness"], grid)
                       for r in mine])
        mean, hw = curve_band(ys)
        line, = ax.plot(grid, mean, label=f"{MODE_LABELS[mode]} (n={len(mine)})")
        ax.fill_between(grid, mean - hw, mean + hw, color=line.get_color(), alpha=0.2)
        bands[mode] = (grid, mean, hw)
    ax.set_xlabel("training env steps (MAPPO samples + ES fitness episodes)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return bands


def new_figure(ncols: int, width: float = 5.2, height: float = 3.8):
    """A matplotlib figure (Agg backend) with ``ncols`` axes side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def save_figure(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fmt_ci(m: float, hw: float, digits: int = 3) -> str:
    """``mean ± half-width`` for a markdown table."""
    if not math.isfinite(hw):
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {hw:.{digits}f}"


def machine_note() -> dict[str, Any]:
    """What the numbers ran on (load average shows CPU sharing)."""
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    import jax

    return {"cpus": os.cpu_count(), "loadavg_at_end": load, "jax": jax.__version__,
            "python": platform.python_version()}


@dataclasses.dataclass
class Timer:
    """Wall-clock seconds since construction."""

    t0: float = dataclasses.field(default_factory=time.perf_counter)

    def __call__(self) -> float:
        return time.perf_counter() - self.t0


# ---------------------------------------------------------------------------------------
# a whole mode-comparison study (Discovery, Dispersion)
# ---------------------------------------------------------------------------------------
def summarize(runs: list[dict], key: str, modes: Sequence[str] = MODES
              ) -> dict[str, dict[str, Any]]:
    """Per mode: per-seed means of ``runs[i][key]`` (a list over held-out episodes), and
    their mean and 95% t half-width over seeds."""
    out = {}
    for mode in modes:
        per_seed = [float(np.mean(r[key])) for r in runs if r["mode"] == mode]
        if per_seed:
            m, hw = mean_ci(per_seed)
            out[mode] = {"per_seed": per_seed, "mean": m, "ci95": hw}
    return out


def compare_modes(name: str, variants: dict[str, dict], max_steps: dict[str, int],
                  budget: int, seeds: Sequence[int], eval_episodes: int, metric: str,
                  metric_label: str, fitness_label: str, out_dir: Path, run_root: Path,
                  goal: str) -> dict[str, Any]:
    """Train MERL, ES-only and MAPPO-only on each variant (a base TrainerConfig dict) at
    an equal env-step budget over ``seeds``; write ``<name>.json`` (raw per-seed results
    and the configs), ``<name>.csv``, ``<name>.png`` and ``<name>.md``."""
    clock = Timer()
    report: dict[str, Any] = {"study": name, "seeds": list(seeds),
                              "eval_episodes": eval_episodes,
                              "heldout_seed": HELDOUT_SEED, "variants": {}}
    fig, axes = new_figure(len(variants))
    rows = []
    for ax, (label, base) in zip(axes, variants.items(), strict=True):
        print(f"[{name}] {label}", flush=True)
        spent, runs = run_modes(base, max_steps[label], budget, seeds, eval_episodes,
                                run_root / name / label.replace(" ", "_"), metric=metric)
        plot_curves(ax, runs, f"{label}: {budget // 1000}k env steps / run", fitness_label)
        fit = summarize(runs, "heldout_team_return")
        met = summarize(runs, "heldout_" + metric)
        wins = {m: fit["merl"]["mean"] > fit[m]["mean"]
                and not overlap((fit["merl"]["mean"], fit["merl"]["ci95"]),
                                (fit[m]["mean"], fit[m]["ci95"]))
                for m in ("es", "mappo")}
        report["variants"][label] = {
            "config": base, "budget_env_steps": spent,
            "rounds": {m: equal_budget(base, max_steps[label], spent)[1][m] for m in MODES},
            "team_return": fit, metric: met, "merl_beats_with_disjoint_ci": wins,
            "runs": runs}
        for r in runs:
            rows.append({"variant": label, "mode": r["mode"], "seed": r["seed"],
                         "env_steps": r["env_steps"], "rounds": r["rounds"],
                         "heldout_team_return": float(np.mean(r["heldout_team_return"])),
                         metric: float(np.mean(r["heldout_" + metric])),
                         "train_time_s": round(r["train_time_s"], 2)})
    report["wall_time_s"] = clock()
    report["machine"] = machine_note()
    save_figure(fig, out_dir / f"{name}.png")
    write_json(out_dir / f"{name}.json", report)
    write_csv(out_dir / f"{name}.csv", rows)
    (out_dir / f"{name}.md").write_text(mode_markdown(report, metric, metric_label, goal))
    return report


def mode_markdown(report: dict, metric: str, metric_label: str, goal: str) -> str:
    """The study's summary: table of held-out results, the goal and whether it holds."""
    name = report["study"]
    lines = [f"# {name}: MERL vs ES-only vs MAPPO-only", "",
             f"Seeds {report['seeds']}; held-out evaluation on {report['eval_episodes']} "
             f"episodes (root key {report['heldout_seed']}, the same for every run); "
             "mean ± 95% t-interval over seeds of the per-seed means. "
             f"Wall time {report['wall_time_s']:.0f} s.", "",
             f"![{name}]({name}.png)", "",
             f"| variant | env steps / run | mode | rounds | team return | {metric_label} |",
             "|---|---|---|---|---|---|"]
    for label, v in report["variants"].items():
        for m in MODES:
            lines.append(f"| {label} | {v['budget_env_steps']} | {MODE_LABELS[m]} | "
                         f"{v['rounds'][m]} | "
                         f"{fmt_ci(v['team_return'][m]['mean'], v['team_return'][m]['ci95'])} | "
                         f"{fmt_ci(v[metric][m]['mean'], v[metric][m]['ci95'])} |")
    lines += ["", f"Goal: {goal}", ""]
    for label, v in report["variants"].items():
        w = v["merl_beats_with_disjoint_ci"]
        verdict = "met" if all(w.values()) else "NOT met"
        lines.append(f"- {label}: {verdict} (MERL above ES-only with disjoint CIs: "
                     f"{w['es']}; above MAPPO-only with disjoint CIs: {w['mappo']})")
    lines += ["", "Configs (TrainerConfig fields; `mode`, `seed`, `n_outer` set per run) are "
              f"in `{name}.json` under `variants.<variant>.config`.", ""]
    return "\n".join(lines)


def study_main(run: Callable[..., Any], doc: str, argv: list[str] | None = None) -> None:
    """The command line every study shares: ``--scale``, ``--seeds``, ``--out``."""
    import argparse

    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the env-step budget")
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    run(a.scale, tuple(a.seeds), a.out)


def study_config(env: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The TrainerConfig (as a dict) every study shares, for ``env``: the ES settings are
    what ES-only and MERL use, the MAPPO settings what MAPPO-only and MERL use."""
    return dict(
        env=env,
        env_kwargs=dict(env_kwargs),
        grad_steps_per_outer=4,
        episodes=2,
        es=dict(pop_size=8, sigma=0.1, lr=0.05, optimizer="adam"),
        mappo=dict(num_envs=8, num_steps=40, epochs=4, minibatches=2, selector_period=8,
                   lr=3e-3, critic_lr=3e-3, ent_coef=0.0),
        actor=dataclasses.asdict(COMPACT_ACTOR),
        critic=dict(hidden=[64, 64]),
    )
