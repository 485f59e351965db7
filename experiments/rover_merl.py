"""Study: MERL's rover domain as MERL's code has it (``feudal_es/RoverMERL-v0``; issue 31).
Does team fitness that reaches the executor make the feudal method win where MERL won?

Arms (every one at the same env-step budget, settings from ``configs/rover_merl.json``
shared by all): the feudal variants ``merl`` (ES on the selector, MAPPO on the executor),
``merl_actor`` (whole-actor ES, the MAPPO learner migrated in when its team fitness is
higher) and ``merl_two_stage`` (``merl`` for :data:`STAGE_ROUNDS` rounds, then
``merl_actor``); MERL's baselines: MAPPO on the held option's reward with random options
(``mappo_uniform``), MAPPO on MERL's mixed reward (local + team) and on the team reward,
and whole-actor ES (MERL's EA-only). Options end when their POI is observed
(``actor.option_ends``) in every arm that holds options.

Goals (issue 31, 8 rovers / coupling 4): ES-only <= 0.15 (MERL's EA-only); the method
(:data:`METHOD`, the feudal variant ``python -m experiments.sweep rover_merl`` chose) >=
0.55 and above every baseline with disjoint 95% CIs; its mean training curve past 0.5
within 500k env steps. 12 rovers / coupling 6: the method above every baseline. Rover-v0
at coupling 4 (``--variants v0``: the feudal variants and ES-only on
``configs/rover_v0.json``, the Rover study's settings with the best probe of
``python -m experiments.sweep rover_v0_2m``, at the study's budget): the method there
(:data:`METHOD_V0`, that sweep's) >= 0.670 (ES-only's at 2M) and above ``merl`` with
disjoint CIs, its curve past 0.5 within 300k env steps.

    python -m experiments.rover_merl [--scale 1.0] [--seeds 0 ... 9] [--variants 8x4 12x6 v0]
        [--keep-earlier]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from experiments.arms import arm_config
from experiments.cli import load_config, study_main
from experiments.report import RESULTS
from experiments.stats import above, fmt_ci
from experiments.training import SEEDS, Variant, compare_arms

MAX_STEPS = 50
BUDGET = 2_000_000  # env steps per run at --scale 1 (MERL's logs run to 2M)
EVAL_EPISODES = 64
STAGE_ROUNDS = 20  # merl_two_stage's first stage: ~270k env steps, past merl's plateau
FEUDAL = ("merl", "merl_actor", "merl_two_stage")
# "the method" the goals test: the feudal variant the sweep chose on seeds 100-101 and its
# own validation episodes (experiments/results/sweep-rover_merl.json, key "method"), never
# the reported seeds' best
METHOD = "merl"
BASELINES = ("mappo_uniform", "mappo_mixed", "mappo_team", "es")
ARMS = FEUDAL + BASELINES
V0_ARMS = (*FEUDAL, "es")  # Rover-v0: the feudal variants against selector-only merl
METHOD_V0 = "merl_two_stage"  # the feudal variant the rover_v0_2m sweep chose
VARIANTS = {"8x4": (8, 4), "12x6": (12, 6)}  # MERL's pairings: rovers x coupling
V0 = "v0"  # the project's Rover-v0 at coupling 4 (configs/rover_v0.json): does the method
V0_LABEL = "Rover-v0 / coupling 4"  # keep MERL's speed and pass ES-only's 2M level?
GOAL_REWARD, GOAL_EA_ONLY, GOAL_CURVE = 0.55, 0.15, (0.5, 500_000)
GOAL_V0, GOAL_V0_CURVE = 0.670, (0.5, 300_000)  # ES-only at 2M (results/rover-2m)
LABELS = dict(metric_label="fraction of POIs observed",
              fitness_label="team reward (fraction of POIs observed)")


def base_config(rovers: int, coupling: int) -> dict[str, Any]:
    """``configs/rover_merl.json`` at ``rovers`` / ``coupling``, options that end."""
    cfg = load_config("rover_merl")
    cfg["env_kwargs"] = {**cfg.get("env_kwargs", {}), "num_agents": rovers,
                         "coupling": coupling, "max_steps": MAX_STEPS}
    cfg["actor"] = {**cfg.get("actor", {}), "option_ends": True}
    return cfg


def v0_config() -> dict[str, Any]:
    """``configs/rover_v0.json`` (the Rover study's ``configs/rover.json`` with the best
    probe of the full-budget ``rover_v0_2m`` sweep) at coupling 4, 8 rovers."""
    cfg = load_config("rover_v0")
    cfg["env_kwargs"] = {**cfg.get("env_kwargs", {}), "coupling": 4, "max_steps": MAX_STEPS}
    return cfg


def extra() -> dict[str, dict]:
    """Per-arm settings beyond :data:`experiments.arms.ARMS`."""
    return {"merl_two_stage": {"selector_stage_rounds": STAGE_ROUNDS}}


def crossing(run_rows: list[dict], arm: str, level: float) -> float | None:
    """Env steps where ``arm``'s seed-mean training curve first reaches ``level``."""
    from experiments.stats import common_grid, on_grid

    mine = [r for r in run_rows if r["arm"] == arm]
    grid = common_grid(mine, points=200)
    mean = np.mean([on_grid(r["curve"]["env_steps"], r["curve"]["fitness"], grid)
                    for r in mine], axis=0)
    hit = np.flatnonzero(mean >= level)
    return float(grid[hit[0]]) if hit.size else None


def _curve_goal(label: str, v: dict, arm: str, level: float, by: int) -> dict:
    at = crossing(v["runs"], arm, level)
    return {"goal": f"{label}: {arm}'s mean training curve passes {level} within {by:,} "
                    "env steps",
            "met": bool(at is not None and at <= by),
            "numbers": {arm: "never" if at is None else f"{at:,.0f} steps"}}


def goals(report: dict) -> list[dict]:
    out = []
    for label, v in report["variants"].items():
        tr = v["team_return"]
        best = METHOD_V0 if label == V0_LABEL else METHOD
        wins = {a: above(tr[best], tr[a]) for a in BASELINES if a in tr}
        nums = {a: fmt_ci(s["mean"], s["ci95"]) for a, s in tr.items()}
        if label == V0_LABEL:
            win = above(tr[best], tr["merl"]) if best != "merl" else False
            out.append({"goal": f"{label}: the method ({best}, the sweep's) >= {GOAL_V0} "
                                "(ES-only at 2M) and above merl, disjoint 95% CIs",
                        "met": bool(tr[best]["mean"] >= GOAL_V0 and win), "numbers": nums,
                        "disjoint_wins": {"merl": win}})
            out.append(_curve_goal(label, v, best, *GOAL_V0_CURVE))
        elif label.startswith("8 rovers"):
            if "es" in tr:
                out.append({"goal": f"{label}: ES-only (whole actor) <= {GOAL_EA_ONLY} "
                                    "(MERL's EA-only)",
                            "met": bool(tr["es"]["mean"] <= GOAL_EA_ONLY),
                            "numbers": {"es": nums["es"]}})
            out.append({"goal": f"{label}: the method ({best}, the sweep's) >= "
                                f"{GOAL_REWARD} and above every baseline, disjoint 95% CIs",
                        "met": bool(tr[best]["mean"] >= GOAL_REWARD and all(wins.values())),
                        "numbers": nums, "disjoint_wins": wins})
            out.append(_curve_goal(label, v, best, *GOAL_CURVE))
        else:
            out.append({"goal": f"{label}: the method ({best}, the sweep's) above every "
                                "baseline, disjoint 95% CIs",
                        "met": bool(all(wins.values())), "numbers": nums,
                        "disjoint_wins": wins})
    return out


def run(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS,
        run_root: Path = Path("runs/experiments"), variants: tuple[str, ...] = ("8x4",),
        eval_episodes: int = EVAL_EPISODES, arms: tuple[str, ...] = ARMS,
        resume: bool = False, keep_earlier: bool = False) -> dict[str, Any]:
    """Run the study; writes rover_merl.{json,csv,png,md} and the per-episode score
    histogram rover_merl-scores.png under ``out_dir``. ``keep_earlier``: the variants not
    run now stay in the report when the earlier rover_merl.json holds them run alike
    (e.g. 8x4 from one job, 12x6 from the next: each is a job of hours)."""
    arms = tuple(arms)
    if not set(arms) <= set(ARMS):
        raise ValueError(f"arms must be among {ARMS}, got {arms}")
    vs = [variant(k, arms) for k in variants]
    keep = [variant(k, arms) for k in (*VARIANTS, V0) if k not in variants] \
        if keep_earlier else []
    report = compare_arms("rover_merl", vs, int(BUDGET * scale), seeds, eval_episodes,
                          metric="observed_frac", out_dir=out_dir, run_root=run_root,
                          goals=goals, resume=resume, keep=keep, **LABELS)
    score_histogram(report, out_dir / "rover_merl-scores.png")
    return report


def variant(key: str, arms: tuple[str, ...]) -> Variant:
    """The study's setting ``key`` (``"8x4"``, ``"12x6"`` or :data:`V0`) over ``arms``
    (Rover-v0 keeps only its own arms among them)."""
    if key == V0:  # the feudal variants against ES-only on the project's Rover
        mine = tuple(a for a in V0_ARMS if a in arms)
        return Variant(V0_LABEL, v0_config(), MAX_STEPS, arms=mine, extra=extra(),
                       within_round=True)
    rovers, coupling = VARIANTS[key]
    return Variant(f"{rovers} rovers / coupling {coupling}", base_config(rovers, coupling),
                   MAX_STEPS, arms=arms, extra=extra())


def score_histogram(report: dict, path: Path) -> Path:
    """Share of held-out episodes (all seeds pooled) at each team score, per arm and
    variant: "takes two POIs, never the second leg" is a spike at 0.5."""
    from experiments.arms import ARM_LABELS
    from experiments.plots import new_figure, save_figure

    labels = list(report["variants"])
    fig, axes = new_figure(len(labels), 1, width=12.0, height=3.2)
    for ax, label in zip(axes[:, 0], labels, strict=True):
        v = report["variants"][label]
        arms = list(v["team_return"])
        scores = sorted({round(x, 4) for r in v["runs"] for x in r["heldout_team_return"]})
        width = 0.8 / max(1, len(arms))
        for i, arm in enumerate(arms):
            vals = np.round([x for r in v["runs"] if r["arm"] == arm
                             for x in r["heldout_team_return"]], 4)
            share = [np.mean(vals == s) for s in scores]
            ax.bar(np.arange(len(scores)) + i * width, share, width, color=f"C{i}",
                   label=ARM_LABELS[arm])
        ax.set_xticks(np.arange(len(scores)) + 0.4 - width / 2, [f"{s:g}" for s in scores])
        ax.set_xlabel("team score of a held-out episode (fraction of POIs observed)")
        ax.set_ylabel("share of episodes")
        ax.set_title(f"{label}: {report['eval_episodes']} held-out episodes x "
                     f"{len(report['seeds'])} seeds per arm")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the bars
    return save_figure(fig, path)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variants", nargs="+", default=["8x4"], choices=[*VARIANTS, V0])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--keep-earlier", action="store_true",
                   help="keep the variants not run now from the earlier rover_merl.json "
                        "when it ran them alike (same seeds, episodes, configs, budget)")


def main(argv: list[str] | None = None) -> None:
    study_main(run, __doc__, argv, _options)


def config_of(arm: str, rovers: int = 8, coupling: int = 4) -> dict[str, Any]:
    """The TrainerConfig dict an arm trains (for a one-off run from the CLI)."""
    return arm_config(base_config(rovers, coupling), arm, extra().get(arm))


if __name__ == "__main__":
    main()
