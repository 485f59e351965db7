"""Which evolution strategy should evolve the selector? MERL on Rover coupling 4 (the Rover
study's shared settings, ``configs/rover.json``, at its budget) with the selector evolved
by each of :data:`STRATEGIES`, nothing else changed: the same σ (each strategy's initial
or constant step size), population, episodes and MAPPO executor, so every strategy spends
the same env steps per round. No strategy is tuned.

Seeds 100-109 and the sweeps' validation episodes (:data:`VALIDATION_SEED`), never the
reported seeds 0-9 nor the held-out key: this chooses a setting, it does not report one.
Per strategy: mean ± 95% t-interval over seeds and the IQM with its stratified bootstrap
95% interval (rliable), and the ranking by IQM, with which pairs are apart.

    python -m experiments.strategies            # ~15 min on 2 CPU cores
    python -m experiments.strategies --resume   # keep the strategies a stopped run finished

Writes ``experiments/results/strategies.{json,md}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from experiments.arms import arm_config, equal_budget, merge
from experiments.machine import Timer, machine_note
from experiments.report import RESULTS, read_if_alike, slug, write_json
from experiments.stats import fmt_ci, fmt_iqm, summarize
from experiments.training import VALIDATION_SEED, train_arm

SEEDS = tuple(range(100, 110))
EPISODES = 64
COUPLING = 4
# name -> ESConfig overrides (the kind alone: every other ES setting is the study's)
STRATEGIES: dict[str, dict[str, Any]] = {
    "nes": {"kind": "nes"},
    "cem": {"kind": "cem"},
    "CMA-ES": {"kind": "evosax:CMA_ES"},
    "SNES": {"kind": "evosax:SNES"},
    "PGPE": {"kind": "evosax:PGPE"},
    "GA": {"kind": "ga"},
}


def config_of(name: str) -> dict[str, Any]:
    """The TrainerConfig dict of strategy ``name``: Rover's MERL arm, ``es`` overridden."""
    from experiments import rover

    return merge(arm_config(rover.base_config(COUPLING), "merl"), {"es": STRATEGIES[name]})


def run(seeds: tuple[int, ...] = SEEDS, scale: float = 1.0, episodes: int = EPISODES,
        out_dir: Path = RESULTS, run_root: Path = Path("runs/strategies"),
        names: tuple[str, ...] = tuple(STRATEGIES), resume: bool = False) -> dict[str, Any]:
    """Train and score every strategy of ``names``; write the report."""
    from experiments import rover

    if min(seeds) < 100:
        raise ValueError(f"this comparison chooses a setting: its seeds start at 100 (the "
                         f"studies report 0-9); got {list(seeds)}")
    clock = Timer()
    base = config_of(names[0])
    spent, rounds = equal_budget(base, rover.MAX_STEPS, int(rover.BUDGET * scale), ["merl"])
    out: dict[str, Any] = {}
    for name in names:
        t = Timer()
        rows, _ = train_arm(config_of(name), seeds, rounds["merl"], rover.MAX_STEPS, episodes,
                            run_root / slug(name), "observed_frac", arm=name,
                            eval_root=VALIDATION_SEED, resume=resume)
        out[name] = {**summarize([np.mean(r["heldout_team_return"]) for r in rows]),
                     "kind": STRATEGIES[name]["kind"], "seconds": round(t(), 1),
                     "curves": [r["curve"] for r in rows]}
        print(f"[strategies] {name}: {out[name]['mean']:.3f} ± {out[name]['ci95']:.3f} "
              f"({out[name]['seconds']:.0f} s)", flush=True)
    alike = {"env": base["env"], "env_kwargs": base.get("env_kwargs", {}),
             "seeds": list(seeds), "env_steps_per_run": spent, "episodes": episodes,
             "validation_seed": VALIDATION_SEED}
    earlier = _earlier(out_dir / "strategies.json", alike, base["es"], out)
    out = {**earlier, **out}
    ranked = sorted(out, key=lambda n: -out[n].get("iqm", [out[n]["mean"]])[0])
    report = {"what": __doc__.split("\n\n")[0].replace("\n", " "), "env": base["env"],
              "env_kwargs": base.get("env_kwargs", {}), "mode": "merl",
              "es": base["es"], "seeds": list(seeds), "env_steps_per_run": spent,
              "rounds": rounds["merl"], "episodes": episodes,
              "validation_seed": VALIDATION_SEED, "strategies": out, "ranking_by_iqm": ranked,
              "apart_from_the_best": {n: _apart(out[ranked[0]], out[n]) for n in ranked[1:]},
              "wall_time_s": round(clock(), 1), "machine": machine_note()}
    if earlier:
        report["earlier"] = sorted(earlier)
    write_json(out_dir / "strategies.json", report)
    (out_dir / "strategies.md").write_text(markdown(report))
    return report


def _earlier(path: Path, alike: dict, es: dict, now: dict) -> dict[str, dict]:
    """The strategies of the report at ``path`` that this job did not rerun and this
    comparison still lists, when that report was run alike (the same env, seeds, budget,
    validation episodes and ES settings but the kind); else none. So CMA-ES can join a
    table whose other rows an earlier job measured, and the report says which."""
    old = read_if_alike(path, alike)
    if old is None or _shared(old.get("es", {})) != _shared(es):
        return {}
    return {n: r for n, r in old.get("strategies", {}).items()
            if n not in now and n in STRATEGIES}


def _shared(es: dict) -> dict:
    """The ES settings every strategy shares (all but the kind)."""
    return {k: v for k, v in es.items() if k != "kind"}


def _apart(a: dict, b: dict) -> bool:
    """Whether ``a``'s IQM interval lies wholly above ``b``'s."""
    if "iqm" not in a or "iqm" not in b:
        return False
    return a["iqm"][1] > b["iqm"][2]


def markdown(report: dict) -> str:
    """The comparison as a table, best IQM first."""
    s = report["strategies"]
    lines = [f"Selector strategies on `{report['env']}` (coupling "
             f"{report['env_kwargs'].get('coupling')}), MERL, {report['env_steps_per_run']:,} "
             f"env steps per run, seeds {report['seeds'][0]}-{report['seeds'][-1]}, "
             f"{report['episodes']} validation episodes; ES settings shared "
             f"({', '.join(f'{k} {v}' for k, v in _shared(report['es']).items())}). "
             f"Wall time {report['wall_time_s'] / 60:.1f} min"
             + (f" (this job; {', '.join(report['earlier'])} from an earlier job run "
                f"alike, each with its own seconds in the JSON)" if report.get("earlier")
                else "") + ".", "",
             "| strategy | kind | mean ± 95% CI | IQM [95% CI] | IQM apart from the best |",
             "|---|---|---|---|---|"]
    best = report["ranking_by_iqm"][0]
    for n in report["ranking_by_iqm"]:
        apart = "(best)" if n == best else (
            "yes" if report["apart_from_the_best"][n] else "no")
        lines.append(f"| {n} | `{s[n]['kind']}` | {fmt_ci(s[n]['mean'], s[n]['ci95'])} | "
                     f"{fmt_iqm(s[n])} | {apart} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the env-step budget")
    p.add_argument("--only", nargs="+", choices=list(STRATEGIES), default=list(STRATEGIES))
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--resume", action="store_true",
                   help="keep the strategies a stopped run of this comparison finished")
    a = p.parse_args(argv)
    run(tuple(a.seeds), a.scale, out_dir=a.out, names=tuple(a.only), resume=a.resume)


if __name__ == "__main__":
    main()
