"""Studies: Discovery (coupling 2 and 3) and Dispersion with vector observations and the
MLP actor — MERL vs MAPPO-only (uniform-random options; a fixed option) vs ES-only (whole
actor) at an equal env-step budget. No numeric goal: the verdict reported is whether MERL
is above every ablation with disjoint 95% CIs.

The training settings are ``configs/rover.json``'s (no per-env tuning), with the env
swapped and the MAPPO rollout set to the 40-step episode: every arm's round is then a
divisor of 256k (MERL 10,240, MAPPO-only and ES-only 5,120 env steps), so the budget is
256k exactly instead of rounding up to the next common multiple (460,800 with Rover's
50-step rollout).

    python -m experiments.swarm [--scale 1.0] [--seeds 0 1 ... 9]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.cli import load_config, study_main
from experiments.report import RESULTS
from experiments.training import SEEDS, Variant, compare_arms, merl_beats

MAX_STEPS = 40
BUDGET = 256_000  # env steps per run at --scale 1
EVAL_EPISODES = 64


def base_config(env: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``configs/rover.json``'s training settings on ``env`` (vector observations), the
    MAPPO rollout one episode long."""
    cfg = load_config("rover")
    cfg["env"] = env
    cfg["env_kwargs"] = {**env_kwargs, "max_steps": MAX_STEPS, "obs_mode": "vec"}
    cfg["mappo"] = {**cfg["mappo"], "num_steps": MAX_STEPS}
    return cfg


def goals(report: dict) -> list[dict]:
    return [merl_beats(report, label) for label in report["variants"]]


def discovery(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS,
              run_root: Path = Path("runs/experiments"), couplings: tuple[int, ...] = (2, 3),
              eval_episodes: int = EVAL_EPISODES, resume: bool = False) -> dict[str, Any]:
    """Discovery at each coupling; writes discovery.{json,csv,png,md}."""
    variants = [Variant(f"coupling {c}", base_config(
        "feudal_es/Discovery-v0", dict(num_agents=4, num_targets=4, coupling=c)), MAX_STEPS,
        extra={"mappo_fixed": {"actor": {"fixed_option": 0}}}) for c in couplings]
    return compare_arms("discovery", variants, int(BUDGET * scale), seeds, eval_episodes,
                        metric="discovered_frac", metric_label="targets discovered (fraction)",
                        fitness_label="team fitness (targets discovered)", out_dir=out_dir,
                        run_root=run_root, goals=goals, resume=resume)


def dispersion(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS,
               run_root: Path = Path("runs/experiments"),
               eval_episodes: int = EVAL_EPISODES, resume: bool = False) -> dict[str, Any]:
    """Dispersion with 4 agents; writes dispersion.{json,csv,png,md}."""
    variants = [Variant("4 robots", base_config("feudal_es/Dispersion-v0",
                                                dict(num_agents=4)), MAX_STEPS,
                        extra={"mappo_fixed": {"actor": {"fixed_option": 1}}})]
    return compare_arms("dispersion", variants, int(BUDGET * scale), seeds, eval_episodes,
                        metric="reached_frac", metric_label="goals reached (fraction)",
                        fitness_label="team fitness (goals reached)", out_dir=out_dir,
                        run_root=run_root, goals=goals, resume=resume)


def run(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS
        ) -> None:
    discovery(scale, seeds, out_dir)
    dispersion(scale, seeds, out_dir)


def main(argv: list[str] | None = None) -> None:
    study_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
