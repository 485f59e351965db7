"""A study's output files: the report as JSON, its per-seed table as CSV, its Markdown
summary and its figure, all written from one report dict, so a report can be rewritten
(or several partial runs merged into one) without training again.
"""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.arms import ARM_LABELS
from experiments.plots import plot_profiles, plot_study
from experiments.stats import fmt_ci, fmt_iqm

__all__ = ["RESULTS", "combine_files", "csv_rows", "markdown", "merge_reports", "slug",
           "write_csv", "write_json", "write_pair", "write_report"]

RESULTS = Path(__file__).resolve().parent / "results"  # every study's default --out


def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label).strip("_")


def write_json(path: Path, data: Any) -> Path:
    """Pretty JSON, written atomically."""
    from feudal_es.atomic import atomic_write_text

    return atomic_write_text(path, json.dumps(data, indent=1) + "\n")


def write_pair(out_dir: Path, stem: str, report: dict, text: str) -> dict:
    """``<out_dir>/<stem>.json`` (``report``) and ``<stem>.md`` (``text``); the report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / f"{stem}.json", report)
    (out_dir / f"{stem}.md").write_text(text)
    return report


def read_if_alike(path: Path, alike: dict) -> dict | None:
    """The report at ``path`` when it holds every key of ``alike`` with the same value (an
    earlier job of the same comparison, whose rows a later job may keep); else None (no
    file, not JSON, or run otherwise)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return old if all(old.get(k) == v for k, v in alike.items()) else None


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


def markdown(report: dict, metric_label: str) -> str:
    """The study's summary: held-out table per variant, goals as met / not met."""
    name, metric = report["study"], report["metric"]
    lines = [f"# {name}", "",
             f"Seeds {report['seeds']} (all seeds of an arm in one program); "
             f"{report['eval_episodes']} held-out episodes (root key {report['heldout_seed']},"
             " the same for every policy). Arms: mean ± 95% t-interval over seeds of the "
             "per-seed means, and their IQM with its stratified bootstrap 95% interval "
             "(rliable); references: over episodes. "
             f"Wall time {report['wall_time_s']:.0f} s"
             + (" (the sum of separate runs: " + "; ".join(
                 f"{', '.join(part['variants'])} {part['wall_time_s']:.0f} s"
                 for part in report["parts"]) + ")" if "parts" in report else "") + ".", "",
             f"![{name}]({name}.png)", ""]
    if '"iqm"' in json.dumps(report["variants"]):  # rliable was there: the profiles too
        lines += [f"Performance profiles: ![{name} profiles]({name}-profiles.png)", ""]
    both = metric != "team_return"  # a second column for the study's own metric
    lines += ["| variant | env steps / run | policy | rounds | team return | IQM [95% CI] |"
              + (f" {metric_label} | IQM [95% CI] |" if both else ""),
              "|---|---|---|---|---|---|" + ("---|---|" if both else "")]

    def cells(s: dict, m: dict | None) -> str:
        own = (f" {fmt_ci(m['mean'], m['ci95']) if m else '-'} | "
               f"{fmt_iqm(m) if m else '-'} |") if both else ""
        return f"{fmt_ci(s['mean'], s['ci95'])} | {fmt_iqm(s)} |{own}"

    for label, v in report["variants"].items():
        for a, s in v["team_return"].items():
            # each arm's own steps: its rounds x round size (the budget itself, unless
            # the arms were equalized within one round)
            steps = v["rounds"][a] * v["round_env_steps"][a] if "round_env_steps" in v \
                else v["budget_env_steps"]
            lines.append(f"| {label} | {steps:,} | {ARM_LABELS[a]} | "
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


def write_report(report: dict, out_dir: Path, fitness_label: str,
                 metric_label: str) -> dict[str, Any]:
    """``<study>.{png,json,csv,md}`` and ``<study>-profiles.png`` of a finished report
    under ``out_dir``."""
    name = report["study"]
    plot_study(report, out_dir / f"{name}.png", fitness_label, metric_label)
    plot_profiles(report, out_dir / f"{name}-profiles.png", metric_label)
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


def refresh(path: Path) -> list[Path]:
    """A finished report file given what later code adds without retraining: the IQM of
    every summary (:func:`experiments.stats.add_iqm`) and ``<study>-profiles.png`` beside
    it. Returns the files written."""
    from experiments.stats import add_iqm

    report = json.loads(Path(path).read_text())
    if "variants" not in report:
        raise ValueError(f"{path}: not a study report (no 'variants')")
    write_json(Path(path), add_iqm(report))
    png = plot_profiles(report, Path(path).with_name(f"{report['study']}-profiles.png"),
                        report["metric"].replace("_", " "))
    return [Path(path), *([png] if png else [])]


if __name__ == "__main__":  # python -m experiments.report refresh FILE...
    import sys

    if len(sys.argv) < 3 or sys.argv[1] != "refresh":
        raise SystemExit("usage: python -m experiments.report refresh RESULTS_JSON...")
    for f in sys.argv[2:]:
        print(*refresh(Path(f)))
