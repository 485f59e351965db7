"""Study 1: Coverage — normalized coverage cost J(T)/J(0) on held-out episodes for the
random policy, decentralized Lloyd, clairvoyant Lloyd, and the learned MAPPO-only,
ES-only and MERL actors (trained at an equal env-step budget). Goal: MERL at or below
decentralized Lloyd.

    python -m experiments.coverage [--scale 1.0] [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from experiments.common import (
    HELDOUT_SEED,
    MODE_LABELS,
    MODES,
    RESULTS,
    SEEDS,
    Timer,
    equal_budget,
    fmt_ci,
    machine_note,
    mean_ci,
    new_figure,
    plot_curves,
    run_modes,
    save_figure,
    study_config,
    study_main,
    summarize,
    write_csv,
    write_json,
)

MAX_STEPS = 40
BUDGET = 61_440  # env steps per run at --scale 1 (CPU-sized)
EVAL_EPISODES = 64
ENV_KWARGS: dict[str, Any] = dict(num_agents=4, grid_size=16, map_size=8, num_features=4,
                                  max_steps=MAX_STEPS, max_speed=0.03)


def base_config() -> dict[str, Any]:
    """The TrainerConfig (as a dict) shared by all learned modes."""
    return study_config("feudal_es/Coverage-v0", ENV_KWARGS)


def baselines(episodes: int) -> dict[str, list[float]]:
    """J(T)/J(0) per held-out episode of the non-learned policies (same episodes as the
    learned actors' evaluation: same root key, same per-episode key split)."""
    import jax

    from envs.coverage import Coverage
    from envs.policies import (
        lloyd_clairvoyant,
        lloyd_decentralized,
        random_policy,
        rollout_metric,
    )

    env = Coverage(**ENV_KWARGS)
    key = jax.random.key(HELDOUT_SEED)
    return {name: [float(v) for v in np.asarray(rollout_metric(env, pol, key, episodes))]
            for name, pol in (("random", random_policy),
                              ("decentralized Lloyd", lloyd_decentralized),
                              ("clairvoyant Lloyd", lloyd_clairvoyant))}


def run(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS,
        run_root: Path = Path("runs/experiments"), eval_episodes: int = EVAL_EPISODES,
        modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """Run the study; writes coverage.{json,csv,png,md} under ``out_dir``."""
    clock = Timer()
    print("[coverage] baselines", flush=True)
    base_j = baselines(eval_episodes)
    print("[coverage] learned", flush=True)
    base = base_config()
    spent, runs = run_modes(base, MAX_STEPS, int(BUDGET * scale), seeds, eval_episodes,
                            run_root / "coverage", metric="coverage_cost", modes=modes)
    learned = summarize(runs, "heldout_coverage_cost", modes)
    table = {}
    for name, vals in base_j.items():  # deterministic policies: CI over episodes
        m, hw = mean_ci(vals)
        table[name] = {"mean": m, "ci95": hw, "over": f"{len(vals)} episodes"}
    for mode in modes:
        table[MODE_LABELS[mode]] = {**learned[mode], "over": f"{len(seeds)} seeds"}
    lloyd = table["decentralized Lloyd"]
    goal_met = learned["merl"]["mean"] <= lloyd["mean"] if "merl" in learned else None

    fig, (ax1, ax2) = new_figure(2)
    plot_curves(ax1, runs, f"Coverage: {spent // 1000}k env steps / run",
                "team fitness 1 - J(T)/J(0)", modes)
    for name, vals in base_j.items():
        ax1.axhline(1 - np.mean(vals), ls="--", lw=1, color="gray")
        ax1.annotate(name, (ax1.get_xlim()[0], 1 - np.mean(vals)), fontsize=7,
                     va="bottom", color="gray")
    names = list(table)
    ax2.barh(names, [table[n]["mean"] for n in names],
             xerr=[np.nan_to_num(table[n]["ci95"]) for n in names], capsize=3,
             color=["gray"] * len(base_j) + ["C0", "C1", "C2"][: len(modes)])
    ax2.invert_yaxis()
    ax2.set_xlabel(f"J(T)/J(0) on {eval_episodes} held-out episodes (lower is better)")
    ax2.set_title("Held-out normalized coverage cost, mean ± 95% CI", fontsize=10)
    ax2.grid(axis="x", alpha=0.3)
    save_figure(fig, out_dir / "coverage.png")

    report = {"study": "coverage", "seeds": list(seeds), "eval_episodes": eval_episodes,
              "heldout_seed": HELDOUT_SEED, "config": base, "budget_env_steps": spent,
              "rounds": equal_budget(base, MAX_STEPS, spent)[1],
              "baselines_per_episode": base_j, "table": table,
              "goal_merl_at_or_below_decentralized_lloyd": goal_met, "runs": runs,
              "wall_time_s": clock(), "machine": machine_note()}
    write_json(out_dir / "coverage.json", report)
    write_csv(out_dir / "coverage.csv",
              [{"policy": r["mode"], "seed": r["seed"], "env_steps": r["env_steps"],
                "heldout_coverage_cost": float(np.mean(r["heldout_coverage_cost"]))}
               for r in runs]
              + [{"policy": n, "seed": "", "env_steps": 0,
                  "heldout_coverage_cost": table[n]["mean"]} for n in base_j])
    (out_dir / "coverage.md").write_text(markdown(report))
    return report


def markdown(report: dict) -> str:
    """The study's summary table and verdict."""
    lines = ["# coverage: J(T)/J(0) on held-out episodes", "",
             f"{report['eval_episodes']} held-out episodes (root key {report['heldout_seed']}),"
             " the same for every policy. Learned actors: mean ± 95% t-interval over seeds "
             f"{report['seeds']} of the per-seed means, after {report['budget_env_steps']} "
             "training env steps each; baselines (deterministic except random): mean ± 95% "
             f"t-interval over episodes. Wall time {report['wall_time_s']:.0f} s.", "",
             "![coverage](coverage.png)", "", "| policy | J(T)/J(0) (lower is better) | over |",
             "|---|---|---|"]
    for name, row in report["table"].items():
        lines.append(f"| {name} | {fmt_ci(row['mean'], row['ci95'])} | {row['over']} |")
    met = report["goal_merl_at_or_below_decentralized_lloyd"]
    lines += ["", "Goal: MERL at or below decentralized Lloyd — "
              + ("met." if met else "NOT met."), "",
              "Config: `coverage.json` -> `config` (rounds per mode under `rounds`).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    study_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
