"""Study: JaxMARL's MPE simple_spread on our JAX path — our MAPPO (``configs/mpe.json``,
the best probe of ``bench/vs_jaxmarl.py``'s listed sweep) at 0.4M env steps over 10 seeds,
against JaxMARL's own MAPPO-RNN baseline run on this machine in the same job (through
``../shared/anchors/jaxmarl`` when that folder exists).

Goal (issue 18): our return at 0.4M steps >= JaxMARL MAPPO-RNN's. Returns are in JaxMARL's
logging units (3 x our team return); both sides sample actions.

    python -m experiments.mpe [--scale 1.0] [--seeds 0 1 ... 9]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from experiments.cli import load_config, study_main
from experiments.report import RESULTS
from experiments.stats import fmt_ci
from experiments.training import SEEDS, Variant, compare_arms

MAX_STEPS = 26
BUDGET = 400_000
EVAL_EPISODES = 64
AGENTS = 3  # JaxMARL logs 3 x the mean agent reward (our team reward)
README_ANCHOR = -52.7  # the anchor README's MAPPO-RNN at 0.4M, when it cannot be run here


def base_config() -> dict[str, Any]:
    cfg = load_config("mpe")
    cfg.pop("n_outer", None)
    cfg.pop("mode", None)
    return {**cfg, "deterministic_eval": False}


def peer(steps: int) -> dict[str, Any]:
    """JaxMARL MAPPO-RNN at ``steps`` through the anchor (or the README's figure)."""
    from bench.vs_jaxmarl import ANCHOR, anchor

    got = anchor("mappo_rnn", steps)
    if got is None or "error" in got:
        why = got["error"] if got else f"no {ANCHOR}"
        print(f"warning: JaxMARL's MAPPO-RNN not measured ({why}); the goal compares "
              f"against the anchor README's {README_ANCHOR}", file=sys.stderr)
        return {"source": "anchor README (not runnable here)", "final_return": README_ANCHOR,
                **({"error": got["error"]} if got else {})}
    return {"source": "measured in this job", **got}


def run(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS,
        run_root: Path = Path("runs/experiments"),
        eval_episodes: int = EVAL_EPISODES, resume: bool = False) -> dict[str, Any]:
    """Run the study; writes mpe.{json,csv,png,md} under ``out_dir``."""
    budget = int(BUDGET * scale)
    anchor = peer(budget) if scale >= 1 else {"source": "skipped below --scale 1",
                                              "final_return": README_ANCHOR}

    def goals(report: dict) -> list[dict]:
        ours = report["variants"]["simple_spread"]["team_return"]["mappo"]
        m, hw = AGENTS * ours["mean"], AGENTS * ours["ci95"]
        theirs = float(anchor["final_return"])
        report["anchor_mappo_rnn"] = anchor
        return [{"goal": f"our return at {budget:,} steps >= JaxMARL MAPPO-RNN's",
                 "met": bool(m >= theirs),
                 "numbers": {"ours (JaxMARL units, held-out)": fmt_ci(m, hw),
                             f"MAPPO-RNN ({anchor['source']})": f"{theirs:.3f}"}}]

    variant = Variant("simple_spread", base_config(), MAX_STEPS, arms=("mappo",))
    return compare_arms("mpe", [variant], budget, seeds, eval_episodes,
                        metric="team_return", metric_label="team return",
                        fitness_label="team return (our units)", out_dir=out_dir,
                        run_root=run_root, goals=goals, resume=resume)


def main(argv: list[str] | None = None) -> None:
    study_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
