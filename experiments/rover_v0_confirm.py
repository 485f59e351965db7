"""A confirmation of the Rover-v0 goal on fresh seeds and fresh episodes (issue 31).

The Rover-v0 study (``python -m experiments.rover_merl --variants v0``, seeds 0-9) names
its method and setting by a sweep on validation seeds. This script replays the goal where
no study or sweep has trained or played: :data:`METHOD` (the study's method) on training
seeds :data:`SEEDS` (neither the study's 0-9 nor the sweeps' >= 100) and held-out
episodes of their own key :data:`HELDOUT_KEY`, with ``configs/rover_v0.json`` and the
study's budget and arms unchanged.

Its first run (2026-12-05, ``experiments/results/rover_v0_confirm-2026-12-05.md``) fixed
``merl_two_stage`` from a full-budget check made after the study had run (the study's
own method was then ``merl``, chosen at 40% of the budget). The full-budget sweep
(``python -m experiments.sweep rover_v0_2m``) now chooses the setting and the method
for both, so the two agree.

    python -m experiments.rover_v0_confirm [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from experiments.arms import arm_config
from experiments.machine import Timer, machine_note
from experiments.report import RESULTS, write_json
from experiments.rover_merl import (
    BUDGET,
    EVAL_EPISODES,
    GOAL_V0,
    METHOD_V0,
    V0,
    V0_ARMS,
    variant,
)
from experiments.stats import above, fmt_ci, summarize
from experiments.training import train_arm

METHOD = METHOD_V0  # the study's method: the full-budget sweep's pick
SEEDS = tuple(range(10, 20))  # training seeds no study or sweep has used
HELDOUT_KEY = 20_261_205  # held-out episodes no study or sweep has played
NAME = "rover_v0_confirm"


def run(out_dir: Path = RESULTS, run_root: Path = Path("runs/experiments")) -> dict[str, Any]:
    """Train the v0 arms (the method and ``merl`` first) on :data:`SEEDS`, play
    :data:`HELDOUT_KEY`'s episodes; write ``rover_v0_confirm.{json,md}``."""
    clock, v = Timer(), variant(V0, V0_ARMS)  # the study's setting, arms and budget rule
    order = (METHOD, "merl", *(a for a in v.arms if a not in (METHOD, "merl")))
    spent, rounds = v.rounds(BUDGET)
    arms: dict[str, Any] = {}
    for arm in order:
        t = Timer()
        rows, _ = train_arm(arm_config(v.base, arm, v.extra.get(arm)), SEEDS, rounds[arm],
                            v.max_steps, EVAL_EPISODES, run_root / NAME / arm, arm=arm,
                            eval_root=HELDOUT_KEY)
        per_episode = np.concatenate([r["heldout_team_return"] for r in rows])
        arms[arm] = {**summarize([np.mean(r["heldout_team_return"]) for r in rows]),
                     "episodes_at": {f"{k}/4": float(np.mean(np.isclose(per_episode, k / 4)))
                                     for k in range(5)},
                     "rounds": rounds[arm], "seconds": round(t(), 1)}
        print(f"[{NAME}] {arm}: {arms[arm]['mean']:.3f} ± {arms[arm]['ci95']:.3f} "
              f"({arms[arm]['seconds']:.0f} s)", flush=True)
    met = bool(arms[METHOD]["mean"] >= GOAL_V0 and above(arms[METHOD], arms["merl"]))
    report = {"study": NAME, "method": METHOD, "seeds": list(SEEDS),
              "heldout_seed": HELDOUT_KEY, "eval_episodes": EVAL_EPISODES,
              "env_steps_per_run": spent, "config": v.base, "arms": arms,
              "goal": f"{METHOD} >= {GOAL_V0} and above merl, disjoint 95% CIs",
              "met": met, "wall_time_s": round(clock(), 1), "machine": machine_note()}
    write_json(out_dir / f"{NAME}.json", report)
    (out_dir / f"{NAME}.md").write_text(markdown(report))
    return report


def markdown(report: dict) -> str:
    """The confirmation as a table and its one goal."""
    lines = [f"# {report['study']}", "",
             f"Seeds {report['seeds']}, {report['eval_episodes']} held-out episodes of key "
             f"{report['heldout_seed']}, {report['env_steps_per_run']:,} env steps per run "
             f"(each arm the fewest whole rounds that reach it); "
             f"the method fixed before the run: `{report['method']}`. Wall time "
             f"{report['wall_time_s'] / 60:.1f} min.", "",
             "| arm | rounds | team reward | seeds | held-out episodes at 0 / 1/4 / 1/2 / 3/4 "
             "/ all |", "|---|---|---|---|---|"]
    for arm, s in report["arms"].items():
        shares = " / ".join(f"{100 * v:.0f}%" for v in s["episodes_at"].values())
        lines.append(f"| {arm} | {s['rounds']} | {fmt_ci(s['mean'], s['ci95'])} | "
                     f"{min(s['per_seed']):.3f}-{max(s['per_seed']):.3f} | {shares} |")
    lines += ["", f"Goal: {report['goal']}: **{'met' if report['met'] else 'not met'}**."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULTS)
    run(p.parse_args(argv).out)


if __name__ == "__main__":
    main()
