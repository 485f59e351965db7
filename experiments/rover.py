"""Study: the Rover task (MERL's rover domain, tightly coupled), couplings 4 and 6 —
MERL vs MAPPO-only (uniform-random options; a fixed option) vs ES-only (whole actor) at an
equal env-step budget, with the hand-coded team assignment and nearest-POI references.

Goals (issue 18): at coupling 4, MERL's held-out team reward >= 0.55 (the MERL paper's
best logs at 2.6-3.9M frames) and above both ablations with disjoint 95% CIs.

    python -m experiments.rover [--scale 1.0] [--seeds 0 1 ... 9]
    python -m experiments.rover --scale 2 --couplings 4 --arms merl es --out DIR  # 2M steps

The couplings can also run as separate jobs (``--couplings 6``) and be joined into one
report by :func:`combine`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.arms import ABLATION_ARMS
from experiments.cli import load_config, study_main
from experiments.report import RESULTS, combine_files
from experiments.training import SEEDS, Variant, compare_arms, merl_beats, reference_returns

MAX_STEPS = 50
BUDGET = 1_000_000  # env steps per run at --scale 1
EVAL_EPISODES = 64
COUPLINGS = (4, 6)
GOAL_REWARD = 0.55
LABELS = dict(metric_label="fraction of POIs observed",
              fitness_label="team reward (fraction of POIs observed)")


def base_config(coupling: int) -> dict[str, Any]:
    """``configs/rover.json`` (shared by every arm) at ``coupling`` (8 rovers, 4 POIs)."""
    cfg = load_config("rover")
    cfg["env_kwargs"] = {**cfg.get("env_kwargs", {}), "coupling": coupling,
                         "max_steps": MAX_STEPS}
    return cfg


def references(coupling: int):
    """Held-out team returns of the reference policies at ``coupling``."""
    def run(episodes: int) -> dict[str, dict[str, list[float]]]:
        from envs.policies import random_policy
        from envs.rover import Rover, nearest_poi_policy, team_policy

        env = Rover(coupling=coupling, max_steps=MAX_STEPS)
        return reference_returns(env, {"team assignment": team_policy,
                                       "nearest POI": nearest_poi_policy,
                                       "random": random_policy}, episodes, "observed_frac")
    return run


def goals(report: dict) -> list[dict]:
    out = []
    for label in report["variants"]:
        c4 = label == "coupling 4"
        out.append(merl_beats(report, label, threshold=GOAL_REWARD if c4 else None))
    return out


def run(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS,
        run_root: Path = Path("runs/experiments"), couplings: tuple[int, ...] = COUPLINGS,
        eval_episodes: int = EVAL_EPISODES, arms: tuple[str, ...] = ABLATION_ARMS,
        resume: bool = False
        ) -> dict[str, Any]:
    """Run the study; writes rover.{json,csv,png,md} and two GIFs per coupling (the best
    MERL and MAPPO-only seeds) under ``out_dir``. ``arms`` (MERL among them) runs a subset
    of the ablations at the same settings and budget."""
    arms, couplings = tuple(arms), tuple(couplings)
    if "merl" not in arms or not set(arms) <= set(ABLATION_ARMS):
        raise ValueError(f"arms must include 'merl' and be among {ABLATION_ARMS}, got {arms}")
    variants = [Variant(f"coupling {c}", base_config(c), MAX_STEPS,
                        extra={"mappo_fixed": {"actor": {"fixed_option": 0}}},
                        references=references(c), arms=arms,
                        gif_arms=("merl", "mappo_uniform"))
                for c in couplings]
    return compare_arms("rover", variants, int(BUDGET * scale), seeds, eval_episodes,
                        metric="observed_frac", out_dir=out_dir, run_root=run_root,
                        goals=goals, resume=resume, **LABELS)


def combine(paths: list[Path], out_dir: Path = RESULTS) -> dict[str, Any]:
    """One ``rover`` report from runs of different couplings (``rover.json`` files), with
    the goals recomputed; writes rover.{json,csv,png,md} under ``out_dir``."""
    return combine_files(paths, goals, out_dir, **LABELS)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--couplings", type=int, nargs="+", default=list(COUPLINGS))
    p.add_argument("--arms", nargs="+", default=list(ABLATION_ARMS), choices=ABLATION_ARMS)


def main(argv: list[str] | None = None) -> None:
    study_main(run, __doc__, argv, _options)


if __name__ == "__main__":
    main()
