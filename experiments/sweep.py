"""The sweeps that choose a study's one shared setting, their probes listed.

A probe is the study's config (``configs/<study>.json``) with a few fields changed. Every
probe trains *every* arm of the study (MERL and its ablations) on the same seeds at the
same reduced env-step budget, and the probes are ranked by the mean over the arms of the
team return on validation episodes, so no arm is tuned alone. The sweep's seeds and
validation episodes are not the study's: its seeds start at 100 and its episodes come
from :data:`VALIDATION_SEED`, not the held-out key the study reports on.

    python -m experiments.sweep rover            # ~20 min on 2 CPU cores
    python -m experiments.sweep discovery        # likewise dispersion, coverage

Writes ``experiments/results/sweep-<study>.{json,md}``: per probe and arm the mean and 95%
interval over seeds, the ranking, and the wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments import coverage, rover, rover_merl, swarm
from experiments.arms import ABLATION_ARMS, arm_config, equal_budget, merge
from experiments.machine import Timer, machine_note
from experiments.report import RESULTS, read_if_alike, slug, write_json
from experiments.stats import fmt_ci, summarize
from experiments.training import SWEEP_SEEDS, VALIDATION_SEED, train_arm

# Rover-v0's options that end (and stop paying) with the option's own row: the base of
# every later rover_v0 probe
_OPTIONS_END = {"env_kwargs": {"option_obs": True, "paid_until_observed": True},
                "actor": {"selector_period": 25, "option_ends": True}}
# ... and the rover_v0 sweep's pick: the selector's own input beside the embedding
_V0_PICK = merge(_OPTIONS_END, {"env_kwargs": {"selector_info": True},
                                "actor": {"selector_input": "both"}})
V0_SWEEP_BUDGET = 2_112_000
SEEDS = SWEEP_SEEDS  # four seeds: two per device on a 2-core CPU
BUDGET = 250_000  # env steps per run, every arm
EVAL_EPISODES = 32


@dataclasses.dataclass(frozen=True)
class Study:
    """What a sweep needs of a study: its base config (``base(run_root)``, called once per
    sweep: Coverage pretrains the executor every arm starts from there), horizon, probes,
    arms, the arms' own overrides, the env-step budget per run and the seeds; ``feudal``
    lists the study's variants of the feudal method: the sweep names the one the study
    reports as *the method* (the variant with the best validation mean at the best
    probe), so no reported seed picks it."""

    base: Callable[[Path], dict]
    max_steps: int
    probes: Sequence[tuple[str, dict]]
    extra: dict[str, dict] = dataclasses.field(default_factory=dict)
    arms: tuple[str, ...] = ABLATION_ARMS
    budget: int = BUDGET
    seeds: tuple[int, ...] = SEEDS
    feudal: tuple[str, ...] = ()  # variants of the method: the best probe's best one wins
    within_round: bool = False  # arms equal to within one round (see equal_budget)


def _coverage_base(run_root: Path) -> dict:
    bc = coverage.pretrain(1.0, run_root.parent / coverage.IMITATORS)
    return coverage.base_config(str(bc))


# the probes of the swarm studies (Rover's settings on another env): the selector period
# the Rover sweep chose and the earlier one, a lower MAPPO lr, a smaller ES sigma
_SWARM_PROBES = [
    ("selector period 25", {"actor": {"selector_period": 25}}),
    ("selector period 10", {"actor": {"selector_period": 10}}),
    ("selector period 25, MAPPO lr 1e-3", {"actor": {"selector_period": 25},
                                           "mappo": {"lr": 1e-3, "critic_lr": 1e-3}}),
    ("selector period 25, ES sigma 0.05", {"actor": {"selector_period": 25},
                                           "es": {"sigma": 0.05}}),
]


STUDIES: dict[str, Study] = {
    "rover": Study(
        lambda _: rover.base_config(4), rover.MAX_STEPS,
        # each probe names every field it sets, so the sweep repeats whatever
        # configs/rover.json now holds (it holds the winner: selector period 25)
        probes=[
            ("selector period 10", {"actor": {"selector_period": 10}}),
            ("selector period 10, MAPPO lr 1e-3", {"actor": {"selector_period": 10},
                                                   "mappo": {"lr": 1e-3, "critic_lr": 1e-3}}),
            ("selector period 10, ES sigma 0.05", {"actor": {"selector_period": 10},
                                                   "es": {"sigma": 0.05}}),
            ("selector period 25", {"actor": {"selector_period": 25}}),
        ],
        extra={"mappo_fixed": {"actor": {"fixed_option": 0}}}),
    # Discovery at the harder coupling, where switching options matters
    "discovery": Study(
        lambda _: swarm.base_config("feudal_es/Discovery-v0",
                                    dict(num_agents=4, num_targets=4, coupling=3)),
        swarm.MAX_STEPS, _SWARM_PROBES, extra={"mappo_fixed": {"actor": {"fixed_option": 0}}},
        budget=128_000),
    "dispersion": Study(
        lambda _: swarm.base_config("feudal_es/Dispersion-v0", dict(num_agents=4)),
        swarm.MAX_STEPS, _SWARM_PROBES, extra={"mappo_fixed": {"actor": {"fixed_option": 1}}},
        budget=128_000),
    # Coverage fine-tunes a BC executor: the actor lr decides how much of the imitation
    # survives; the selector period how often "explore" can interrupt covering
    "coverage": Study(
        _coverage_base, coverage.MAX_STEPS,
        probes=[
            ("actor lr 3e-4, selector period 8", {"mappo": {"lr": 3e-4},
                                                  "actor": {"selector_period": 8}}),
            ("actor lr 1e-4, selector period 8", {"mappo": {"lr": 1e-4},
                                                  "actor": {"selector_period": 8}}),
            ("actor lr 1e-3, selector period 8", {"mappo": {"lr": 1e-3},
                                                  "actor": {"selector_period": 8}}),
            ("actor lr 3e-4, selector period 20", {"mappo": {"lr": 3e-4},
                                                   "actor": {"selector_period": 20}}),
            # added after the four above had run (issue 32): an L2-SP anchor to the
            # imitator (MAPPOConfig.anchor_coef) at the chosen lr and period. Unanchored,
            # fine-tuning drifts to a squared distance of ~8.6 from the imitator over this
            # budget with gradient norms ~1.3 (one calibration run at seed 100): 1 should
            # hold it near distance 1, 0.1 only slow it. They run beside the probe above
            # rerun on one machine with one imitator (see the README's Coverage sweep)
            ("actor lr 3e-4, selector period 20, anchor 0.1", {
                "mappo": {"lr": 3e-4, "anchor_coef": 0.1}, "actor": {"selector_period": 20}}),
            ("actor lr 3e-4, selector period 20, anchor 1", {
                "mappo": {"lr": 3e-4, "anchor_coef": 1.0}, "actor": {"selector_period": 20}}),
        ],
        extra={"mappo_fixed": {"actor": {"fixed_option": coverage.COVER}}},
        arms=coverage.ARMS, budget=40_000, feudal=coverage.ARMS),
    # MERL's rover (issue 31): ES's step size decides whether whole-actor ES (ES-only,
    # merl_actor's stage 2) can move the executor at all; it also picks the method among
    # the feudal variants. A quarter of the study's budget, two seeds (one per core).
    "rover_merl": Study(
        lambda _: rover_merl.base_config(8, 4), rover_merl.MAX_STEPS,
        # the selector's own input (RoverMERL's selector_info: rover id one-hot and the
        # POIs' observed flags), alone or beside the embedding: an input MAPPO cannot move
        probes=[
            ("ES sigma 0.1", {"es": {"sigma": 0.1}}),
            ("ES sigma 0.03", {"es": {"sigma": 0.03}}),
            ("ES sigma 0.1, selector own input", {
                "es": {"sigma": 0.1}, "env_kwargs": {"selector_info": True},
                "actor": {"selector_input": "own"}}),
            ("ES sigma 0.1, selector own input and embedding", {
                "es": {"sigma": 0.1}, "env_kwargs": {"selector_info": True},
                "actor": {"selector_input": "both"}}),
        ],
        extra=rover_merl.extra(), arms=rover_merl.ARMS, budget=500_000, seeds=(100, 101),
        feudal=rover_merl.FEUDAL),
    # the project's Rover-v0 at coupling 4 (issue 31's last goal: the method above
    # selector-only MERL and past ES-only's 0.670): RoverMERL's lessons carried over one by
    # one (options that end and stop paying, the option's own row, the selector's own
    # input). The arms are the study's v0 arms; the best probe goes to configs/rover_v0.json
    "rover_v0": Study(
        lambda _: rover.base_config(4), rover_merl.MAX_STEPS,
        probes=[
            ("Rover study's settings", {"actor": {"selector_period": 25}}),
            ("options end", _OPTIONS_END),
            ("options end, selector own input", merge(_OPTIONS_END, {
                "env_kwargs": {"selector_info": True}, "actor": {"selector_input": "own"}})),
            # added after the three above had run: each fitness over twice the episodes
            # (MERL's own uses 10) from half the candidates, so a round's ES costs the same
            # env steps; the elitist migration compares on the same episodes
            ("options end, 8 episodes x 16 candidates", merge(_OPTIONS_END, {
                "episodes": 8, "es": {"pop_size": 16}})),
            # added after the four above had run, aimed at the selector, which the feudal
            # arms share: a hidden layer; the rover's id and the POIs' flags beside the
            # embedding (an input MAPPO cannot move); ES's step size on the whole actor
            ("options end, selector hidden 32", merge(_OPTIONS_END, {
                "actor": {"selector_hidden": [32]}})),
            ("options end, selector own input and embedding", _V0_PICK),
            ("options end, ES sigma 0.05", merge(_OPTIONS_END, {"es": {"sigma": 0.05}})),
        ],
        extra=rover_merl.extra(), arms=rover_merl.V0_ARMS, budget=500_000,
        seeds=(100, 101), feudal=rover_merl.FEUDAL),
    # Rover-v0 at the study's own budget, which decides configs/rover_v0.json and the
    # method from now on: at 40% of it (the sweep above) the feudal variants are alike,
    # at 2M they part. The base is the rover_v0 sweep's pick; the probes aim at how fast
    # whole-actor ES moves (its step, its noise, more directions per generation at the
    # same env steps). Four seeds, two per core. Its budget is the one the earlier v0
    # studies spent (2M rounded up to whole rounds of 4 x 32 ES episodes); each arm takes
    # the fewest whole rounds that reach it, as the v0 study does.
    "rover_v0_2m": Study(
        lambda _: rover.base_config(4), rover_merl.MAX_STEPS,
        probes=[
            ("own input and embedding (the rover_v0 sweep's pick)", _V0_PICK),
            ("own input and embedding, ES lr 0.1", merge(_V0_PICK, {"es": {"lr": 0.1}})),
            ("own input and embedding, ES sigma 0.2", merge(_V0_PICK, {
                "es": {"sigma": 0.2}})),
            ("own input and embedding, 2 episodes x 64 candidates", merge(_V0_PICK, {
                "episodes": 2, "es": {"pop_size": 64}})),
            # added 2026-12-06 after the four above, the study and two confirmations had
            # run (rule unchanged, committed before these ran): sigma 0.1 suits the arms
            # that migrate the MAPPO learner in, 0.2 whole-actor ES alone. The grid's
            # midpoint, and a step size per coordinate adapted from the fitness ranks
            # (SNES, Wierstra et al. 2014; evosax's, from 0.2), so the executor's noise
            # and the selector's need not share one
            ("own input and embedding, ES sigma 0.15", merge(_V0_PICK, {
                "es": {"sigma": 0.15}})),
            ("own input and embedding, SNES from sigma 0.2", merge(_V0_PICK, {
                "es": {"kind": "evosax:SNES", "sigma": 0.2}})),
        ],
        extra=rover_merl.extra(), arms=rover_merl.V0_ARMS, budget=V0_SWEEP_BUDGET,
        seeds=(100, 101, 102, 103), feudal=rover_merl.FEUDAL, within_round=True),
}


def run(study: str, seeds: Sequence[int] | None = None, budget: int | None = None,
        eval_episodes: int = EVAL_EPISODES, out_dir: Path = RESULTS,
        run_root: Path = Path("runs/sweeps"), probes: Sequence[str] | None = None
        ) -> dict[str, Any]:
    """Run ``study``'s probes (all, or those named in ``probes``) at ``budget`` env steps
    per run (default: the study's); write the report. Named probes join the probes of the
    report already there when it was run alike (same seeds, budget, validation episodes),
    so the ranking spans both jobs; otherwise the report holds this job's probes alone."""
    spec, clock = STUDIES[study], Timer()
    budget = spec.budget if budget is None else budget
    seeds = spec.seeds if seeds is None else tuple(seeds)
    if min(seeds) < min(SEEDS):
        raise ValueError(f"a sweep's seeds start at {min(SEEDS)} (the studies report seeds "
                         f"0-9); got {list(seeds)}")
    chosen = [p for p in spec.probes if probes is None or p[0] in probes]
    if not chosen:
        raise ValueError(f"no probe of {study!r} is named {list(probes or [])}; its probes: "
                         f"{[name for name, _ in spec.probes]}")
    results, shared = [], spec.base(run_root)
    for name, over in chosen:
        base = merge(shared, over)
        spent, rounds = equal_budget(base, spec.max_steps, budget, spec.arms, spec.extra,
                                     spec.within_round)
        arms = {}
        for arm in spec.arms:
            t = Timer()
            rows, _ = train_arm(arm_config(base, arm, spec.extra.get(arm)), seeds,
                                rounds[arm], spec.max_steps, eval_episodes,
                                run_root / study / slug(name) / arm, arm=arm,
                                eval_root=VALIDATION_SEED)
            arms[arm] = {**summarize([np.mean(r["heldout_team_return"]) for r in rows]),
                         "seconds": round(t(), 1)}
            print(f"[sweep {study}] {name} · {arm}: {arms[arm]['mean']:.3f} "
                  f"± {arms[arm]['ci95']:.3f} ({arms[arm]['seconds']:.0f} s)", flush=True)
        results.append({"probe": name, "overrides": over, "env_steps": spent,
                        "arms": arms, "score": float(np.mean([a["mean"]
                                                              for a in arms.values()])),
                        "cpu": machine_note()["cpu"]})
    alike = {"study": study, "seeds": list(seeds), "env_steps_per_run": budget,
             "eval_episodes": eval_episodes, "validation_seed": VALIDATION_SEED}
    earlier = _earlier(out_dir / f"sweep-{study}.json", alike, [r["probe"] for r in results],
                       [name for name, _ in spec.probes]) if probes is not None else []
    results = [*earlier, *results]
    ranked = sorted(results, key=lambda r: -r["score"])
    report = {**alike,
              "score": "mean over arms of the validation team return (higher is better)",
              "probes": results, "best": ranked[0]["probe"],
              **({"method": max(spec.feudal, key=lambda a: ranked[0]["arms"][a]["mean"])}
                 if spec.feudal else {}),
              "wall_time_s": round(clock(), 1), "machine": machine_note()}
    if earlier:
        report["earlier_probes"] = [r["probe"] for r in earlier]
        report["wall_time_s"] += json.loads(
            (out_dir / f"sweep-{study}.json").read_text())["wall_time_s"]
    write_json(out_dir / f"sweep-{study}.json", report)
    (out_dir / f"sweep-{study}.md").write_text(markdown(report))
    return report


def _earlier(path: Path, alike: dict, now: list[str], listed: list[str]) -> list[dict]:
    """The probes of the report at ``path`` that this job did not rerun and the study
    still lists, when that report was run alike (``alike``'s keys); else none."""
    old = read_if_alike(path, alike)
    if old is None:
        return []
    cpu = old.get("machine", {}).get("cpu", "not recorded")  # where a row without one ran
    return [{**r, "cpu": r.get("cpu", cpu)} for r in old.get("probes", [])
            if r["probe"] not in now and r["probe"] in listed]


def markdown(report: dict) -> str:
    """The sweep as a table: one row per probe, one column per arm, then the score."""
    arms = list(report["probes"][0]["arms"])
    head = ["probe", *arms, "score (mean over arms)"]
    lines = [f"Sweep of `{report['study']}`: seeds {report['seeds']}, "
             f"{report['probes'][0]['env_steps']:,} env steps per run, "
             f"{report['eval_episodes']} validation episodes; mean ± 95% interval over "
             f"seeds. A probe is the study's `configs/` file with the fields it names "
             f"set. Best: **{report['best']}**"
             + (f"; the method: **{report['method']}**" if "method" in report else "")
             + f". Wall time "
             f"{report['wall_time_s'] / 60:.1f} min"
             + (f" (two jobs; the earlier ran {', '.join(report['earlier_probes'])})"
                if report.get("earlier_probes") else "") + ".", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in report["probes"]:
        cells = [fmt_ci(p["arms"][a]["mean"], p["arms"][a]["ci95"]) for a in arms]
        lines.append(f"| {p['probe']} | " + " | ".join(cells) + f" | {p['score']:.3f} |")
    cpus = {p.get("cpu") for p in report["probes"]}
    if len(cpus) > 1:  # probes joined from jobs on other machines: say which ran where
        lines += ["", "Machines: " + "; ".join(
            f"{p['probe']}: {p.get('cpu', 'not recorded')}" for p in report["probes"]) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()  # one JAX CPU device per core, before JAX runs anything
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study", choices=list(STUDIES))
    p.add_argument("--probes", nargs="+", help="run only these probes (by name)")
    p.add_argument("--seeds", type=int, nargs="+",
                   help="default: the study's (100 103 for most)")
    p.add_argument("--budget", type=int, help="env steps per run (default: the study's)")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    run(a.study, a.seeds, a.budget, out_dir=a.out, probes=a.probes)


if __name__ == "__main__":
    main()
