"""Study 2: coupled Discovery (the MERL rover domain) with coupling 2 and 3 — team
fitness against environment steps for MERL, ES-only and MAPPO-only at an equal env-step
budget. Goal: MERL above both ablations with disjoint 95% CIs at the end of the budget.

    python -m experiments.discovery [--scale 1.0] [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.common import (
    RESULTS,
    SEEDS,
    compare_modes,
    study_config,
    study_main,
)

MAX_STEPS = 40
BUDGET = 76_800  # env steps per run at --scale 1 (CPU-sized)
EVAL_EPISODES = 64


def base_config(coupling: int) -> dict[str, Any]:
    """The TrainerConfig (as a dict) shared by all three modes: the ES settings are what
    ES-only and MERL use, the MAPPO settings what MAPPO-only and MERL use."""
    return study_config("feudal_es/Discovery-v0", dict(
        num_agents=4, num_targets=4, coupling=coupling, max_steps=MAX_STEPS, map_size=8,
        capture_radius=0.1))


def run(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS,
        run_root: Path = Path("runs/experiments"), couplings: tuple[int, ...] = (2, 3),
        eval_episodes: int = EVAL_EPISODES) -> dict[str, Any]:
    """Run the study; writes discovery.{json,csv,png,md} under ``out_dir``."""
    variants = {f"coupling {c}": base_config(c) for c in couplings}
    return compare_modes(
        "discovery", variants, {k: MAX_STEPS for k in variants}, int(BUDGET * scale),
        seeds, eval_episodes, metric="discovered_frac", metric_label="targets discovered",
        fitness_label="team fitness (targets discovered / episode)", out_dir=out_dir,
        run_root=run_root,
        goal="MERL above both ES-only and MAPPO-only with non-overlapping 95% CIs at the "
             "end of the budget.")


def main(argv: list[str] | None = None) -> None:
    study_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
