"""Study: Coverage (LPAC coverage control) — an executor pretrained by imitating the
clairvoyant Lloyd (CVT) controller, then fine-tuned by MERL, by MAPPO-only with
uniform-random options, or by MAPPO-only always holding "cover", at an equal env-step
budget, against decentralized and clairvoyant Lloyd and a random policy; metric J(T)/J(0).

Goal (issue 18): BC + MERL's held-out J(T)/J(0) below decentralized Lloyd's with disjoint
95% CIs.

    python -m experiments.coverage [--scale 1.0] [--seeds 0 1 ... 9]
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from experiments.cli import load_config, study_main
from experiments.report import RESULTS
from experiments.stats import above, fmt_ci
from experiments.training import SEEDS, Variant, compare_arms, heldout_keys, reference_returns

BUDGET = 100_000  # env steps per run at --scale 1 (the CNN actor trains at ~3k steps/s)
EVAL_EPISODES = 64
CONFIG = load_config("coverage")  # the config every arm shares: the compact LPAC actor
ENV_KWARGS: dict[str, Any] = CONFIG["env_kwargs"]
MAX_STEPS = ENV_KWARGS["max_steps"]
COVER = 1  # Coverage's skill_names.index("cover")
ARMS = ("merl", "mappo_uniform", "mappo_fixed")


def base_config(init_from: str = "") -> dict[str, Any]:
    """The TrainerConfig (as a dict) every arm shares: ``configs/coverage.json``."""
    return {**copy.deepcopy(CONFIG), "init_from": init_from}


def pretrain(path: Path, scale: float) -> Path:
    """Behaviour cloning + DAgger of clairvoyant Lloyd holding "cover" (``feudal-es
    pretrain``), the executor every arm starts from."""
    from feudal_es import cli

    path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path = path.with_suffix(".config.json")
    cfg_path.write_text(json.dumps(base_config()))
    rounds, steps = (3, 300) if scale >= 0.5 else (1, 20)
    cli.main(["pretrain", "--config", str(cfg_path), "--expert", "lloyd_clairvoyant",
              "--option", "cover", "--rounds", str(rounds), "--steps", str(steps),
              "--out", str(path)])
    return path


def references(episodes: int) -> dict[str, dict[str, list[float]]]:
    from envs.coverage import Coverage
    from envs.policies import lloyd_clairvoyant, lloyd_decentralized, random_policy

    return reference_returns(Coverage(**ENV_KWARGS), {
        "decentralized Lloyd": lloyd_decentralized, "clairvoyant Lloyd": lloyd_clairvoyant,
        "random": random_policy}, episodes, "coverage_cost")


def bc_start(path: Path, episodes: int) -> dict[str, list[float]]:
    """The pretrained executor before any fine-tuning, holding "cover", on the held-out
    episodes (what every arm starts from)."""
    import dataclasses

    import jax
    import numpy as np

    from agents import FeudalActor
    from feudal_es.config import TrainerConfig
    from feudal_es.pretrain import load_pretrained
    from feudal_es.resolve import resolve_env
    from feudal_es.rollout import make_population_rollouts
    from feudal_es.theta import selector_theta

    cfg = TrainerConfig.from_dict(base_config())
    core = resolve_env(cfg.env, cfg.env_kwargs).core
    actor_cfg = dataclasses.replace(cfg.actor, options="fixed", fixed_option=COVER)
    actor = load_pretrained(path, FeudalActor.from_env(jax.random.key(0), core, actor_cfg))
    rollouts = jax.jit(make_population_rollouts(core, True))
    ret, metrics = jax.device_get(rollouts(actor, selector_theta(actor)[None],
                                           heldout_keys(episodes)))
    return {"team_return": np.asarray(ret[0]).tolist(),
            "coverage_cost": np.asarray(metrics["coverage_cost"][0]).tolist()}


def goals(report: dict) -> list[dict]:
    v = report["variants"]["4 robots"]
    merl, lloyd = v["coverage_cost"]["merl"], v["references"]["decentralized Lloyd"]
    lloyd = lloyd["coverage_cost"]
    return [{"goal": "BC + MERL's J(T)/J(0) below decentralized Lloyd's, disjoint 95% CIs",
             "met": above(merl, lloyd, higher=False),
             "numbers": {"BC + MERL": fmt_ci(merl["mean"], merl["ci95"]),
                         "decentralized Lloyd": fmt_ci(lloyd["mean"], lloyd["ci95"])}}]


def run(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS,
        run_root: Path = Path("runs/experiments"),
        eval_episodes: int = EVAL_EPISODES, resume: bool = False) -> dict[str, Any]:
    """Run the study; writes coverage.{json,csv,png,md} under ``out_dir``."""
    from feudal_es.checkpoint import SUFFIX

    init = pretrain(run_root / "coverage" / f"bc_lloyd_clairvoyant{SUFFIX}", scale)
    variant = Variant("4 robots", base_config(str(init)), MAX_STEPS, arms=ARMS,
                      extra={"mappo_fixed": {"actor": {"fixed_option": COVER}}},
                      references=lambda e: {**references(e),
                                            "BC start (holding cover)": bc_start(init, e)})
    return compare_arms("coverage", [variant], int(BUDGET * scale), seeds, eval_episodes,
                        metric="coverage_cost", metric_label="J(T)/J(0) (lower is better)",
                        fitness_label="team fitness 1 - J(T)/J(0)", out_dir=out_dir,
                        run_root=run_root, goals=goals, higher=False, resume=resume)


def main(argv: list[str] | None = None) -> None:
    study_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
