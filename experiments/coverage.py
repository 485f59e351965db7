"""Study: Coverage (LPAC coverage control) — an executor pretrained by LPAC's imitation of
the clairvoyant Lloyd (CVT) controller (the recipe of ``experiments.coverage_lpac``), then
fine-tuned by MERL, by MAPPO-only with uniform-random options, by MAPPO-only always
holding "cover", or left frozen under an ES-evolved selector, at an equal env-step budget,
against the imitator alone, decentralized and clairvoyant Lloyd and a random policy;
metric J(T)/J(0), lower is better.

Goals (issues 18 and 32): BC + MERL below decentralized Lloyd with disjoint 95% CIs; the
fine-tuning arm the Coverage sweep chose (:data:`METHOD`, best validation mean at its best
probe, seeds 100-103) at or below the imitator alone (never above it with disjoint CIs)
and below decentralized Lloyd with disjoint CIs.

    python -m experiments.coverage [--scale 1.0] [--seeds 0 1 ... 9]
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from experiments.cli import load_config, study_main
from experiments.report import RESULTS
from experiments.stats import above, fmt_ci
from experiments.training import SEEDS, Variant, compare_arms, heldout_keys, reference_returns

BUDGET = 100_000  # env steps per run at --scale 1 (the CNN actor trains at ~3k steps/s)
EVAL_EPISODES = 64
CONFIG = load_config("coverage")  # the task and the compact LPAC actor
ENV_KWARGS: dict[str, Any] = CONFIG["env_kwargs"]  # the task (what Lloyd is scored on)
# LPAC's imitation sweep's choice over configs/coverage.json (configs/coverage_lpac.json):
# what the robots observe beyond the task (e.g. the sensed-map memory; the task is the
# same) and the actor's fields it changed
_LPAC = load_config("coverage_lpac")
OBSERVE: dict[str, Any] = {k: v for k, v in _LPAC["env_kwargs"].items() if k not in ENV_KWARGS}
ACTOR: dict[str, Any] = {k: v for k, v in _LPAC["actor"].items()
                         if CONFIG["actor"].get(k) != v}
RECIPE = Path(__file__).resolve().parent.parent / "configs" / "coverage_lpac_pretrain.json"
MAX_STEPS = ENV_KWARGS["max_steps"]
COVER = 1  # Coverage's skill_names.index("cover")
ARMS = ("merl", "mappo_uniform", "mappo_fixed", "es_selector")
# the fine-tuning arm the goals test: the best validation mean at the best probe of
# `python -m experiments.sweep coverage` (experiments/results/sweep-coverage.json)
METHOD = "merl"
# the folder beside the run roots (runs/imitators) that keeps the imitator every arm starts
# from, named by a digest of its inputs (:func:`pretrain`)
IMITATORS = "imitators"
# what of a TrainerConfig `feudal-es pretrain` reads (the rest sets fine-tuning), less the
# actor's selector period: imitation holds one option, and no leaf depends on the period
IMITATION_FIELDS = ("env", "env_kwargs", "actor", "seed")


def base_config(init_from: str = "", lpac: bool = True) -> dict[str, Any]:
    """The TrainerConfig (as a dict) every arm shares: ``configs/coverage.json`` with
    LPAC's observation and actor (:data:`OBSERVE`, :data:`ACTOR`); ``lpac=False``:
    ``configs/coverage.json`` alone (what the imitation sweep's probes change)."""
    cfg = copy.deepcopy(CONFIG)
    if not lpac:
        return {**cfg, "init_from": init_from}
    return {**cfg, "env_kwargs": {**ENV_KWARGS, **OBSERVE},
            "actor": {**cfg["actor"], **copy.deepcopy(ACTOR)}, "init_from": init_from}


def pretrain(scale: float, store: Path = Path("runs") / IMITATORS) -> Path:
    """LPAC's imitation of clairvoyant Lloyd holding "cover" (``feudal-es pretrain
    --recipe configs/coverage_lpac_pretrain.json``), the executor every arm starts from;
    below ``scale`` 0.5 (a smoke run) one short round of behaviour cloning.

    The actor is stored under ``store`` by a digest of what makes it (the config's env,
    env kwargs, actor but its selector period, and seed; the recipe, the arguments and the
    source of ``feudal_es``, ``envs`` and ``agents``), so the study, its sweep (whatever
    its probes set for fine-tuning) and the zoo train it once (it takes minutes at full
    size) and a change to any of those trains it afresh. The pretraining seed is the
    config's (0), the same for every arm and run that starts from it."""
    from feudal_es import cli
    from feudal_es.atomic import atomic_write_text
    from feudal_es.checkpoint import SUFFIX

    short = [] if scale >= 0.5 else ["--rounds", "1", "--steps", "20", "--episodes", "8"]
    args = ["--expert", "lloyd_clairvoyant", "--option", "cover", *short, "--no-progress"]
    config = base_config()
    made_by = {k: config.get(k) for k in IMITATION_FIELDS}
    made_by["actor"] = {k: v for k, v in made_by["actor"].items() if k != "selector_period"}
    inputs = {"config": made_by, "recipe": json.loads(RECIPE.read_text()), "args": args,
              "source": _source_digest()}
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    path = store / f"coverage_lpac-{digest}{SUFFIX}"
    if path.exists():  # written atomically: it exists only once complete
        print(f"[coverage] the imitator of these inputs is already trained: {path}",
              flush=True)
        return path
    store.mkdir(parents=True, exist_ok=True)
    cfg_path = atomic_write_text(path.with_suffix(".config.json"), json.dumps(config))
    atomic_write_text(path.with_suffix(".inputs.json"), json.dumps(inputs, indent=1))
    cli.main(["pretrain", "--config", str(cfg_path), "--recipe", str(RECIPE), *args,
              "--out", str(path)])
    return path


def _source_digest() -> str:
    """SHA-256 over the ``.py`` files of the packages an imitator's training runs."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted(p for pkg in ("feudal_es", "envs", "agents")
                    for p in (root / pkg).rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def references(episodes: int) -> dict[str, dict[str, list[float]]]:
    from envs.coverage import Coverage
    from envs.policies import lloyd_clairvoyant, lloyd_decentralized, random_policy

    return reference_returns(Coverage(**ENV_KWARGS), {
        "decentralized Lloyd": lloyd_decentralized, "clairvoyant Lloyd": lloyd_clairvoyant,
        "random": random_policy}, episodes, "coverage_cost")


def study_imitator(path: Path) -> tuple[Any, Any]:
    """``(env, actor)``: the study's Coverage env (its JAX core) and the imitator saved at
    ``path``, holding "cover" (no selector: the executor alone)."""
    import dataclasses

    import jax

    from agents import FeudalActor
    from feudal_es.config import TrainerConfig
    from feudal_es.pretrain import load_pretrained
    from feudal_es.resolve import resolve_env

    cfg = TrainerConfig.from_dict(base_config())
    core = resolve_env(cfg.env, cfg.env_kwargs).core
    actor_cfg = dataclasses.replace(cfg.actor, options="fixed", fixed_option=COVER)
    return core, load_pretrained(path, FeudalActor.from_env(jax.random.key(0), core,
                                                            actor_cfg))


def bc_start(path: Path, episodes: int) -> dict[str, list[float]]:
    """The pretrained executor before any fine-tuning, holding "cover", on the held-out
    episodes (what every arm starts from)."""
    import jax
    import numpy as np

    from feudal_es.rollout import make_population_rollouts
    from feudal_es.theta import selector_theta

    core, actor = study_imitator(path)
    rollouts = jax.jit(make_population_rollouts(core, True))
    ret, metrics = jax.device_get(rollouts(actor, selector_theta(actor)[None],
                                           heldout_keys(episodes)))
    return {"team_return": np.asarray(ret[0]).tolist(),
            "coverage_cost": np.asarray(metrics["coverage_cost"][0]).tolist()}


def goals(report: dict) -> list[dict]:
    v = report["variants"]["4 robots"]
    cost, refs = v["coverage_cost"], v["references"]
    lloyd = refs["decentralized Lloyd"]["coverage_cost"]
    bc = refs[BC_START]["coverage_cost"]
    merl, best = cost["merl"], cost[METHOD]
    ci = lambda s: fmt_ci(s["mean"], s["ci95"])
    return [{"goal": "BC + MERL's J(T)/J(0) below decentralized Lloyd's, disjoint 95% CIs",
             "met": above(merl, lloyd, higher=False),
             "numbers": {"BC + MERL": ci(merl), "decentralized Lloyd": ci(lloyd)}},
            {"goal": f"BC + fine-tuning ({METHOD}, the sweep's) never above the imitator "
                     "alone with disjoint 95% CIs",
             "met": not above(best, bc, higher=True),  # higher J is worse
             "numbers": {METHOD: ci(best), BC_START: ci(bc)}},
            {"goal": f"BC + fine-tuning ({METHOD}, the sweep's) below decentralized Lloyd, "
                     "disjoint 95% CIs",
             "met": above(best, lloyd, higher=False),
             "numbers": {METHOD: ci(best), "decentralized Lloyd": ci(lloyd)}}]


BC_START = "BC start (holding cover)"  # the imitator alone, a reference row


def run(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS, out_dir: Path = RESULTS,
        run_root: Path = Path("runs/experiments"),
        eval_episodes: int = EVAL_EPISODES, resume: bool = False) -> dict[str, Any]:
    """Run the study; writes coverage.{json,csv,png,md} under ``out_dir``."""
    init = pretrain(scale, run_root.parent / IMITATORS)
    variant = Variant("4 robots", base_config(str(init)), MAX_STEPS, arms=ARMS,
                      extra={"mappo_fixed": {"actor": {"fixed_option": COVER}}},
                      references=lambda e: {**references(e),
                                            BC_START: bc_start(init, e)})
    return compare_arms("coverage", [variant], int(BUDGET * scale), seeds, eval_episodes,
                        metric="coverage_cost", metric_label="J(T)/J(0) (lower is better)",
                        fitness_label="team fitness 1 - J(T)/J(0)", out_dir=out_dir,
                        run_root=run_root, goals=goals, higher=False, resume=resume)


def main(argv: list[str] | None = None) -> None:
    study_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
