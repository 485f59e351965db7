"""Shared machinery of the result studies: training arms at an equal env-step budget
(every seed of an arm in one program), held-out evaluation, 95% confidence intervals,
curves on a common env-step grid, plots, summaries.

Arms (:data:`ARMS`): MERL, the MERL paper's ablations (MAPPO-only with a uniformly random
or a fixed option, ES-only on the whole actor), each a ``TrainerConfig`` override of one
base config per env, so every arm shares every hyperparameter it uses.

Env-step accounting (the same for every arm): one env step = one step of one swarm env
copy. A round of ``ESTrainer`` spends ``grad_steps_per_outer * mappo.batch_size`` steps on
MAPPO rollouts (modes ``merl``, ``mappo``) and ``es.num_candidates * episodes * max_steps``
steps on ES fitness episodes (modes ``merl``, ``es``). The trainer's per-round logging
episodes (the current policy's fitness, used only to draw the curves) are a measurement,
not training, and are counted for no arm. Each arm runs ``budget / steps_per_round``
rounds, so all arms end at the same budget (the budget is rounded up to a common multiple
of the arms' round sizes).

Held-out evaluation: ``eval_episodes`` episodes from ``split(key(HELDOUT_SEED), E)``, a key
no training run uses, the same episodes for every arm, seed and reference policy.
"""

from __future__ import annotations

import argparse
import copy
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

from feudal_es.stats import mean_ci, t_critical

__all__ = ["ABLATION_ARMS", "ARMS", "ARM_LABELS", "HELDOUT_SEED", "RESULTS", "SEEDS", "arm_config",
           "combine_files", "compare_arms", "curve_band", "equal_budget", "mean_ci",
           "merge_reports", "steps_per_round", "t_critical", "train_arm", "write_report"]

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = tuple(range(10))  # every study's default seeds
HELDOUT_SEED = 123_456  # root of the held-out evaluation episodes (never used in training)

# arm -> TrainerConfig overrides of the study's base config (nested dicts are merged)
ARMS: dict[str, dict[str, Any]] = {
    "merl": {"mode": "merl"},
    "mappo_uniform": {"mode": "mappo", "actor": {"options": "uniform"}},
    "mappo_fixed": {"mode": "mappo", "actor": {"options": "fixed"}},
    "es": {"mode": "es"},
    "mappo": {"mode": "mappo"},  # MAPPO alone (the selector frozen; envs without options)
}
ABLATION_ARMS = ("merl", "mappo_uniform", "mappo_fixed", "es")  # the MERL paper's set
ARM_LABELS = {"merl": "MERL (ES selector + MAPPO executor)",
              "mappo_uniform": "MAPPO-only, uniform-random options",
              "mappo_fixed": "MAPPO-only, fixed option",
              "es": "ES-only (whole actor)",
              "mappo": "MAPPO (frozen selector)"}


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
    """Mean and 95% t half-width over seeds of per-seed values."""
    m, hw = mean_ci([float(v) for v in per_seed])
    return {"per_seed": [float(v) for v in per_seed], "mean": m, "ci95": hw,
            "n": len(per_seed)}


# ---------------------------------------------------------------------------------------
# arms and budgets
# ---------------------------------------------------------------------------------------
def merge(base: dict, over: dict) -> dict:
    """A copy of ``base`` with ``over`` written in, nested dicts merged key by key."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out.get(k, {}), v) if isinstance(v, dict) else v
    return out


def arm_config(base: dict, arm: str, extra: dict | None = None) -> dict:
    """The TrainerConfig dict of ``arm``: ``base`` with :data:`ARMS`'s overrides (and the
    study's ``extra`` ones for this arm, e.g. which option the fixed arm holds)."""
    return merge(merge(base, ARMS[arm]), extra or {})


def steps_per_round(config: Any, max_steps: int) -> int:
    """Training env steps one round of ``config`` spends (see the module docstring)."""
    mcfg, ecfg = config.mappo, config.es
    steps = 0
    if config.trains_executor:
        steps += config.grad_steps_per_outer * mcfg.batch_size
    if config.runs_es:
        steps += ecfg.num_candidates * config.episodes * max_steps
    return steps


def round_sizes(base: dict, max_steps: int, arms: Sequence[str],
                extra: dict[str, dict] | None = None) -> dict[str, int]:
    """Env steps per round of each arm."""
    from feudal_es.config import TrainerConfig

    extra = extra or {}
    return {a: steps_per_round(TrainerConfig.from_dict(arm_config(base, a, extra.get(a))),
                               max_steps) for a in arms}


def equal_budget(base: dict, max_steps: int, budget: int, arms: Sequence[str] = ABLATION_ARMS,
                 extra: dict[str, dict] | None = None) -> tuple[int, dict[str, int]]:
    """Round ``budget`` up to a multiple of every arm's round size; rounds per arm."""
    sizes = round_sizes(base, max_steps, arms, extra)
    lcm = math.lcm(*sizes.values())
    budget = max(lcm, -(-budget // lcm) * lcm)
    return budget, {a: budget // s for a, s in sizes.items()}


# ---------------------------------------------------------------------------------------
# training and held-out evaluation
# ---------------------------------------------------------------------------------------
def heldout_keys(episodes: int, root: int = HELDOUT_SEED) -> Any:
    """The held-out episodes' keys (the same for every arm, seed and reference); another
    ``root`` gives another set (the sweeps' validation episodes)."""
    import jax

    return jax.random.split(jax.random.key(root), episodes)


def train_arm(config: dict, seeds: Sequence[int], rounds: int, max_steps: int,
              eval_episodes: int, run_dir: Path, metric: str | None = None,
              arm: str = "", eval_root: int = HELDOUT_SEED) -> tuple[list[dict], Any]:
    """Train every seed of ``config`` for ``rounds`` rounds (two or more seeds: one
    program, :class:`feudal_es.seeds.MultiSeedTrainer`), then play the final policies on
    the held-out episodes (of key ``eval_root``). Returns one result per seed (curve,
    held-out team returns and final ``metric`` per episode, times) and the trainers (one
    per seed, for GIFs)."""
    import jax
    import jax.numpy as jnp

    from feudal_es.config import TrainerConfig
    from feudal_es.seeds import MultiSeedTrainer
    from feudal_es.trainer import ESTrainer

    cfg = TrainerConfig.from_dict({**config, "seeds": list(seeds) if len(seeds) > 1 else [],
                                   "seed": int(seeds[0]), "n_outer": rounds,
                                   "checkpoint_every": 10**6, "plot_every": 10**6,
                                   "gif": False})
    per_round = steps_per_round(cfg, max_steps)
    shutil.rmtree(run_dir, ignore_errors=True)  # a study always starts from scratch
    t0 = time.perf_counter()
    if len(seeds) > 1:
        group = MultiSeedTrainer(cfg, run_dir)
        group.run()
        trainers = group.trainers
        train_time = time.perf_counter() - t0
        fns, n = group.fns, len(seeds)
        keys = fns.place(jnp.stack([heldout_keys(eval_episodes, eval_root)] * n))
        ret, metrics = jax.device_get(fns.returns(group.ts.actor,
                                                  fns.selector(group.ts.actor)[:, None], keys))
        ret = np.asarray(ret)[:, 0]
        metrics = {k: np.asarray(v)[:, 0] for k, v in metrics.items()}
    else:
        trainer = ESTrainer(cfg, run_dir)
        trainer.run()
        trainers = [trainer]
        train_time = time.perf_counter() - t0
        r1, m1 = trainer.rollout_stats(trainer.theta_of(trainer.ts.actor)[None],
                                       jax.random.key(eval_root), episodes=eval_episodes)
        ret, metrics = np.asarray(r1), {k: np.asarray(v) for k, v in m1.items()}
    total = time.perf_counter() - t0
    out = []
    for i, (seed, t) in enumerate(zip(seeds, trainers, strict=True)):
        h = t.history
        row = {"arm": arm, "mode": cfg.mode, "seed": int(seed), "rounds": rounds,
               "env_steps": rounds * per_round,
               "curve": {"env_steps": [(r["round"] + 1) * per_round for r in h],
                         "fitness": [r["selector_fitness"] for r in h]},
               "heldout_team_return": [float(v) for v in ret[i]],
               "train_time_s": round(train_time, 2), "total_time_s": round(total, 2),
               "seeds_in_program": len(seeds)}
        if metric is not None and metric in metrics:
            row["heldout_" + metric] = [float(v) for v in metrics[metric][i]]
        out.append(row)
    return out, trainers


def reference_returns(env: Any, policies: dict[str, Callable], episodes: int,
                      metric: str | None = None) -> dict[str, dict[str, list[float]]]:
    """Team return (and final ``metric``) per held-out episode of each reference policy
    (``policy(key, env, state) -> actions``), on the learned arms' held-out episodes."""
    import jax

    from envs.episode import run_episode, stateless

    out = {}
    for name, pol in policies.items():
        def one(k, pol=pol):
            ep = run_episode(k, env, stateless(pol, env))
            return ep.team_return, (ep.outs.metrics[metric][-1] if metric else ep.team_return)

        ret, met = jax.device_get(jax.jit(jax.vmap(one))(heldout_keys(episodes)))
        out[name] = {"team_return": [float(v) for v in ret]}
        if metric:
            out[name][metric] = [float(v) for v in met]
    return out


# ---------------------------------------------------------------------------------------
# one study: arms x seeds on each variant, references, goals, outputs
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Variant:
    """One setting of a study: its base config and what is compared on it."""

    label: str
    base: dict[str, Any]
    max_steps: int
    arms: tuple[str, ...] = ABLATION_ARMS
    extra: dict[str, dict] = dataclasses.field(default_factory=dict)  # per-arm overrides
    references: Callable[[int], dict[str, dict[str, list[float]]]] | None = None
    gif_arms: tuple[str, ...] = ()  # arms whose best seed's final policy is drawn as a GIF


def run_variant(study: str, v: Variant, budget: int, seeds: Sequence[int],
                eval_episodes: int, metric: str, run_root: Path, out_dir: Path,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every arm of ``v`` over ``seeds`` at an equal env-step budget, plus its references."""
    spent, rounds = equal_budget(v.base, v.max_steps, budget, v.arms, v.extra)
    refs = v.references(eval_episodes) if v.references else {}
    runs, gifs = [], {}
    for arm in v.arms:
        clock = Timer()
        cfg = arm_config(v.base, arm, v.extra.get(arm))
        rows, trainers = train_arm(cfg, seeds, rounds[arm], v.max_steps, eval_episodes,
                                   run_root / study / slug(v.label) / arm, metric, arm)
        runs += rows
        means = [np.mean(r["heldout_team_return"]) for r in rows]
        log(f"  [{study}] {v.label} · {arm}: {rounds[arm]} rounds x {len(seeds)} seeds, "
            f"{spent} env steps each, held-out team return {np.mean(means):.3f} "
            f"(seeds {min(means):.3f}..{max(means):.3f}), {clock():.0f} s")
        if arm in v.gif_arms:
            best = int(np.argmax(means))
            path = out_dir / f"{study}-{slug(v.label)}-{arm}.gif"
            trainers[best].write_gif(path)
            gifs[arm] = {"path": path.name, "seed": int(seeds[best])}
    return {"label": v.label, "config": v.base, "arm_overrides": {
                a: merge(ARMS[a], v.extra.get(a, {})) for a in v.arms},
            "budget_env_steps": spent, "rounds": rounds,
            "round_env_steps": round_sizes(v.base, v.max_steps, v.arms, v.extra),
            "team_return": {a: summarize([np.mean(r["heldout_team_return"]) for r in runs
                                          if r["arm"] == a]) for a in v.arms},
            metric: {a: summarize([np.mean(r["heldout_" + metric]) for r in runs
                                   if r["arm"] == a and "heldout_" + metric in r])
                     for a in v.arms if any("heldout_" + metric in r for r in runs)},
            "references": {n: {k: {**summarize(vals), "over": "episodes"}
                               for k, vals in d.items()} for n, d in refs.items()},
            "references_per_episode": refs, "gifs": gifs, "runs": runs}


def compare_arms(name: str, variants: Sequence[Variant], budget: int, seeds: Sequence[int],
                 eval_episodes: int, metric: str, metric_label: str, fitness_label: str,
                 out_dir: Path, run_root: Path, goals: Callable[[dict], list[dict]],
                 higher: bool = True) -> dict[str, Any]:
    """Run every variant; write ``<name>.json`` (raw per-seed results, configs, goals),
    ``<name>.csv``, ``<name>.png`` (curves with 95% bands, held-out bars) and
    ``<name>.md``. ``goals(report)`` -> ``[{"goal", "met", "numbers"}]``."""
    clock = Timer()
    report: dict[str, Any] = {"study": name, "seeds": list(seeds),
                              "eval_episodes": eval_episodes, "heldout_seed": HELDOUT_SEED,
                              "metric": metric, "metric_higher_is_better": higher,
                              "variants": {}}
    for v in variants:
        print(f"[{name}] {v.label}", flush=True)
        report["variants"][v.label] = run_variant(name, v, budget, seeds, eval_episodes,
                                                  metric, run_root, out_dir)
    report["goals"] = goals(report)
    report["wall_time_s"] = round(clock(), 1)
    report["machine"] = machine_note()
    return write_report(report, out_dir, fitness_label, metric_label)


def write_report(report: dict, out_dir: Path, fitness_label: str,
                 metric_label: str) -> dict[str, Any]:
    """``<study>.{png,json,csv,md}`` of a finished report under ``out_dir``."""
    name = report["study"]
    plot_study(report, out_dir / f"{name}.png", fitness_label, metric_label)
    write_json(out_dir / f"{name}.json", report)
    write_csv(out_dir / f"{name}.csv", csv_rows(report))
    (out_dir / f"{name}.md").write_text(markdown(report, metric_label))
    return report


def merge_reports(reports: Sequence[dict], goals: Callable[[dict], list[dict]]
                  ) -> dict[str, Any]:
    """One study's report from runs of disjoint variant sets (e.g. Rover's couplings run
    as separate jobs): the variants in order, goals recomputed, each part's wall time and
    machine kept under ``parts`` (``wall_time_s`` is their sum)."""
    first = reports[0]
    shared = ("study", "seeds", "eval_episodes", "heldout_seed", "metric",
              "metric_higher_is_better")
    for r in reports[1:]:
        diff = [k for k in shared if r[k] != first[k]]
        if diff:
            raise ValueError(f"merge_reports: the reports differ in {diff}")
    labels = [lab for r in reports for lab in r["variants"]]
    if len(set(labels)) != len(labels):
        raise ValueError(f"merge_reports: a variant is in more than one report: {labels}")
    out = {k: first[k] for k in shared}
    out["variants"] = {lab: v for r in reports for lab, v in r["variants"].items()}
    out["goals"] = goals(out)
    out["parts"] = [{"variants": list(r["variants"]), "wall_time_s": r["wall_time_s"],
                     "machine": r["machine"]} for r in reports]
    out["wall_time_s"] = round(sum(r["wall_time_s"] for r in reports), 1)
    out["machine"] = first["machine"]
    return out


def combine_files(paths: Sequence[Path], goals: Callable[[dict], list[dict]],
                  out_dir: Path, fitness_label: str, metric_label: str) -> dict[str, Any]:
    """:func:`merge_reports` of report files, written under ``out_dir`` with the GIFs they
    name (copied from beside each file)."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    out_dir.mkdir(parents=True, exist_ok=True)
    for path, r in zip(paths, reports, strict=True):
        for v in r["variants"].values():
            for g in v["gifs"].values():
                src, dst = Path(path).parent / g["path"], out_dir / g["path"]
                if src.resolve() != dst.resolve():
                    shutil.copyfile(src, dst)
    return write_report(merge_reports(reports, goals), out_dir, fitness_label, metric_label)


def merl_beats(report: dict, label: str, key: str = "team_return",
               higher: bool = True, threshold: float | None = None) -> dict[str, Any]:
    """The usual goal: MERL better than every other arm with disjoint 95% CIs (and, with
    ``threshold``, its mean at least that)."""
    v = report["variants"][label]
    merl = v[key]["merl"]
    wins = {a: above(merl, s, higher) for a, s in v[key].items() if a != "merl"}
    met = all(wins.values())
    text = f"{label}: MERL's {key.replace('_', ' ')} above every ablation, disjoint 95% CIs"
    if threshold is not None:
        met = met and merl["mean"] >= threshold
        text = f"{label}: MERL's {key.replace('_', ' ')} >= {threshold} and above every " \
               "ablation with disjoint 95% CIs"
    nums = {a: fmt_ci(s["mean"], s["ci95"]) for a, s in v[key].items()}
    return {"goal": text, "met": bool(met), "numbers": nums, "disjoint_wins": wins}


# ---------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------
def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label).strip("_")


def write_json(path: Path, data: Any) -> Path:
    """Pretty JSON, written atomically."""
    from feudal_es.atomic import atomic_write_text

    return atomic_write_text(path, json.dumps(data, indent=1) + "\n")


def write_csv(path: Path, rows: list[dict]) -> Path:
    """Rows of a per-seed table as CSV (columns: the union, in first-seen order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return path


def csv_rows(report: dict) -> list[dict]:
    """One row per (variant, arm, seed) and per (variant, reference policy)."""
    metric, rows = report["metric"], []
    for label, v in report["variants"].items():
        for r in v["runs"]:
            row = {"variant": label, "policy": r["arm"], "seed": r["seed"],
                   "env_steps": r["env_steps"], "rounds": r["rounds"],
                   "heldout_team_return": float(np.mean(r["heldout_team_return"]))}
            if "heldout_" + metric in r:
                row[metric] = float(np.mean(r["heldout_" + metric]))
            rows.append({**row, "train_time_s": r["train_time_s"]})
        for n, d in v["references_per_episode"].items():
            row = {"variant": label, "policy": n, "seed": "", "env_steps": 0, "rounds": 0,
                   "heldout_team_return": float(np.mean(d["team_return"]))}
            if metric in d:
                row[metric] = float(np.mean(d[metric]))
            rows.append(row)
    return rows


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


def fmt_ci(m: float, hw: float, digits: int = 3) -> str:
    """``mean ± half-width`` for a markdown table."""
    if not math.isfinite(hw):
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {hw:.{digits}f}"


def markdown(report: dict, metric_label: str) -> str:
    """The study's summary: held-out table per variant, goals as met / not met."""
    name, metric = report["study"], report["metric"]
    lines = [f"# {name}", "",
             f"Seeds {report['seeds']} (all seeds of an arm in one program); "
             f"{report['eval_episodes']} held-out episodes (root key {report['heldout_seed']},"
             " the same for every policy). Arms: mean ± 95% t-interval over seeds of the "
             "per-seed means; references: over episodes. "
             f"Wall time {report['wall_time_s']:.0f} s"
             + (" (the sum of separate runs: " + "; ".join(
                 f"{', '.join(part['variants'])} {part['wall_time_s']:.0f} s"
                 for part in report["parts"]) + ")" if "parts" in report else "") + ".", "",
             f"![{name}]({name}.png)", ""]
    both = metric != "team_return"  # a second column for the study's own metric
    lines += ["| variant | env steps / run | policy | rounds | team return |"
              + (f" {metric_label} |" if both else ""),
              "|---|---|---|---|---|" + ("---|" if both else "")]

    def cells(s: dict, m: dict | None) -> str:
        own = f" {fmt_ci(m['mean'], m['ci95']) if m else '-'} |" if both else ""
        return f"{fmt_ci(s['mean'], s['ci95'])} |{own}"

    for label, v in report["variants"].items():
        for a, s in v["team_return"].items():
            lines.append(f"| {label} | {v['budget_env_steps']:,} | {ARM_LABELS[a]} | "
                         f"{v['rounds'][a]} | {cells(s, v.get(metric, {}).get(a))}")
        for n, d in v["references"].items():
            lines.append(f"| {label} | - | {n} (reference) | - | "
                         f"{cells(d['team_return'], d.get(metric))}")
    for label, v in report["variants"].items():  # after the table, which they would cut
        for arm, g in v["gifs"].items():
            lines.append(f"\n{label} · {ARM_LABELS[arm]}, best seed ({g['seed']}): "
                         f"![{arm}]({g['path']})")
    lines += ["", "Goals:", ""]
    for g in report["goals"]:
        lines.append(f"- {g['goal']}: **{'met' if g['met'] else 'not met'}** "
                     f"({'; '.join(f'{k} {v}' for k, v in g['numbers'].items())})")
    lines += ["", f"Configs: `{name}.json` -> `variants.<variant>.config` and "
              "`arm_overrides`; rounds per arm under `rounds`.", ""]
    return "\n".join(lines)


def machine_note() -> dict[str, Any]:
    """What the numbers ran on (load average shows CPU sharing)."""
    import jax

    from bench.common import cpu_name

    return {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg(),
            "jax": jax.__version__, "python": platform.python_version(),
            "cpu": cpu_name()}


@dataclasses.dataclass
class Timer:
    """Wall-clock seconds since construction."""

    t0: float = dataclasses.field(default_factory=time.perf_counter)

    def __call__(self) -> float:
        return time.perf_counter() - self.t0


class LoadSampler:
    """The 1-minute load average, sampled every ``period`` seconds on a daemon thread.

    A study's wall time means little without the CPU sharing it ran under; one reading at
    the start and end misses a concurrent job in between.
    """

    def __init__(self, period: float = 60.0):
        import threading

        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)
        self._thread.start()

    def _run(self, period: float) -> None:
        while not self._stop.wait(period):
            self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, Any]:
        """Mean, min and max of the samples so far (and how many there are)."""
        s = self.samples
        return {"samples": len(s), "mean": round(sum(s) / len(s), 2),
                "min": round(min(s), 2), "max": round(max(s), 2)}

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return self.summary()


def study_main(run: Callable[..., Any], doc: str, argv: list[str] | None = None,
               options: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    """The command line every study shares: ``--scale``, ``--seeds``, ``--out``;
    ``options(parser)`` adds a study's own, passed to ``run`` as keywords."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the env-step budget")
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--out", type=Path, default=RESULTS)
    if options is not None:
        options(p)
    a = vars(p.parse_args(argv))
    run(a.pop("scale"), tuple(a.pop("seeds")), a.pop("out"), **a)


def load_config(name: str) -> dict[str, Any]:
    """A recipe of ``configs/`` (the settings a study shares across its arms)."""
    path = Path(__file__).resolve().parent.parent / "configs" / f"{name}.json"
    return json.loads(path.read_text())
