"""Training the arms and running a study: every seed of an arm in one program at the
arm's share of an equal env-step budget, held-out evaluation of the final policies and of
hand-written reference policies, and one study (arms x seeds on each variant) end to end
with its goals and output files.

Held-out evaluation: ``eval_episodes`` episodes from ``split(key(HELDOUT_SEED), E)``, a key
no training run uses, the same episodes for every arm, seed and reference policy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.arms import (
    ABLATION_ARMS,
    ARMS,
    arm_config,
    equal_budget,
    merge,
    round_sizes,
    steps_per_round,
)
from experiments.machine import Timer, machine_note
from experiments.report import read_if_alike, slug, write_json, write_report
from experiments.stats import above, fmt_ci, summarize
from feudal_es.atomic import atomic_write_text

__all__ = ["HELDOUT_SEED", "SEEDS", "SWEEP_SEEDS", "VALIDATION_SEED", "Variant",
           "compare_arms", "heldout_keys", "merl_beats", "reference_returns", "run_variant",
           "train_arm"]

SEEDS = tuple(range(10))  # every study's default seeds
HELDOUT_SEED = 123_456  # root of the held-out evaluation episodes (never used in training)
VALIDATION_SEED = 654_321  # root of every sweep's validation episodes (not the held-out key)
SWEEP_SEEDS = (100, 101, 102, 103)  # a sweep's seeds start here, disjoint from SEEDS


def heldout_keys(episodes: int, root: int = HELDOUT_SEED) -> Any:
    """The held-out episodes' keys (the same for every arm, seed and reference); another
    ``root`` gives another set (the sweeps' validation episodes)."""
    import jax

    return jax.random.split(jax.random.key(root), episodes)


def train_arm(config: dict, seeds: Sequence[int], rounds: int, max_steps: int,
              eval_episodes: int, run_dir: Path, metric: str | None = None,
              arm: str = "", eval_root: int = HELDOUT_SEED, resume: bool = False,
              log: Callable[[str], None] = print) -> tuple[list[dict], Any]:
    """Train every seed of ``config`` for ``rounds`` rounds (two or more seeds: one
    program, :func:`feudal_es.train`), then play the final policies on the held-out
    episodes (of key ``eval_root``). Returns one result per seed (curve, held-out team
    returns and final ``metric`` per episode, times) and the trainer (for GIFs: seed ``i``
    is ``trainer.write_gif(path, index=i)``).

    ``resume``: a run already in ``run_dir`` of exactly this config (an interrupted study)
    continues from its newest checkpoint, so a finished arm is only evaluated again;
    anything else there (another config, no checkpoint) is removed and trained afresh.
    Without ``resume`` the arm always starts from scratch. An arm checkpoints every
    :data:`CHECKPOINT_EVERY` rounds (the newest kept), so a study killed mid-arm loses at
    most that many rounds; its training seconds are recorded at each checkpoint."""
    import jax

    from feudal_es.config import TrainerConfig

    cfg = TrainerConfig.from_dict({**config, "seeds": list(seeds) if len(seeds) > 1 else [],
                                   "seed": int(seeds[0]), "n_outer": rounds,
                                   "checkpoint_every": CHECKPOINT_EVERY,
                                   "keep_checkpoints": 1, "plot_every": 10**6,
                                   "gif": False})
    per_round = steps_per_round(cfg, max_steps)
    t0 = time.perf_counter()
    trainer, before = (_resumed(cfg, run_dir, log) if resume else (None, 0.0))
    resumed = trainer is not None
    finished = resumed and trainer.round >= rounds  # nothing left to train
    every = (cfg if trainer is None else trainer.config).checkpoint_every

    def record(rows: Any) -> None:  # every training second this arm has cost, over sessions
        r = (rows[0] if isinstance(rows, list) else rows)["round"] + 1
        if before is not None and (r % every == 0 or r == rounds):
            seconds = before + time.perf_counter() - t0
            atomic_write_text(run_dir / TIMING, json.dumps({"train_time_s": seconds}))

    if trainer is None:
        import feudal_es

        shutil.rmtree(run_dir, ignore_errors=True)  # a study's arm starts from scratch
        trainer = feudal_es.train(cfg, run_dir, on_round=record)
    elif not finished:
        trainer.run(on_round=record)  # the rounds left
    train_time = 0.0 if finished else time.perf_counter() - t0
    if before is not None and not finished:  # the file says what the rows say: a finished
        atomic_write_text(run_dir / TIMING,  # arm resumed later reports the same seconds
                          json.dumps({"train_time_s": before + train_time}))
    ret, metrics = trainer.evaluate(jax.random.key(eval_root), eval_episodes)
    total = time.perf_counter() - t0
    spent = None if before is None else round(before + train_time, 2)
    out = []
    for i, (seed, h) in enumerate(zip(seeds, trainer.histories, strict=True)):
        row = {"arm": arm, "mode": cfg.mode, "seed": int(seed), "rounds": rounds,
               "env_steps": rounds * per_round,
               "curve": {"env_steps": [(r["round"] + 1) * per_round for r in h],
                         "fitness": [r["selector_fitness"] for r in h]},
               "heldout_team_return": [float(v) for v in ret[i]],
               "train_time_s": spent, "total_time_s": round(total, 2),
               "seeds_in_program": len(seeds)}
        if resumed:
            row["resumed"] = True
        if metric is not None and metric in metrics:
            row["heldout_" + metric] = [float(v) for v in metrics[metric][i]]
        out.append(row)
    return out, trainer


TIMING = "arm_train_time.json"  # train_arm's record of an arm's training seconds
CHECKPOINT_EVERY = 10  # rounds between an arm's checkpoints (a study resumes mid-arm)
BOOKKEEPING = ("checkpoint_every", "keep_checkpoints", "plot_every", "gif")


def _same_run(saved: Any, cfg: Any) -> bool:
    """Whether ``saved`` trains what ``cfg`` does (how often it checkpoints aside)."""
    return dataclasses.replace(saved, **{f: getattr(cfg, f) for f in BOOKKEEPING}) == cfg


def _resumed(cfg: Any, run_dir: Path, log: Callable[[str], None]) -> tuple[Any, float | None]:
    """``(trainer, seconds already trained)`` continuing ``run_dir`` when it holds a run of
    exactly ``cfg`` with a checkpoint at or before ``cfg.n_outer``; ``(None, 0.0)``
    otherwise. The seconds are ``None`` when the run predates :data:`TIMING`."""
    import feudal_es

    if not (run_dir / "config.json").is_file():
        return None, 0.0
    try:
        trainer = feudal_es.resume(run_dir, n_outer=cfg.n_outer)
    except (ValueError, OSError) as e:
        log(f"  {run_dir}: not resumable ({e}); training it afresh")
        return None, 0.0
    if not _same_run(trainer.config, cfg) or trainer.round > cfg.n_outer:
        log(f"  {run_dir}: holds another config or more rounds; training it afresh")
        return None, 0.0
    log(f"  {run_dir}: resuming at round {trainer.round} of {cfg.n_outer}")
    try:
        before = json.loads((run_dir / TIMING).read_text())["train_time_s"]
    except (OSError, ValueError, KeyError, TypeError):
        before = None
    return trainer, before


def reference_returns(env: Any, policies: dict[str, Callable], episodes: int,
                      metric: str | None = None, root: int = HELDOUT_SEED
                      ) -> dict[str, dict[str, list[float]]]:
    """Team return (and final ``metric``) per held-out episode of each reference policy
    (``policy(key, env, state) -> actions``), on the learned arms' held-out episodes
    (another ``root``: a sweep's validation episodes, :func:`heldout_keys`)."""
    import jax

    from envs.episode import run_episode, stateless

    out = {}
    for name, pol in policies.items():
        def one(k, pol=pol):
            ep = run_episode(k, env, stateless(pol, env))
            return ep.team_return, (ep.outs.metrics[metric][-1] if metric else ep.team_return)

        ret, met = jax.device_get(jax.jit(jax.vmap(one))(heldout_keys(episodes, root)))
        out[name] = {"team_return": [float(v) for v in ret]}
        if metric:
            out[name][metric] = [float(v) for v in met]
    return out


@dataclasses.dataclass
class Variant:
    """One setting of a study: its base config and what is compared on it."""

    label: str
    base: dict[str, Any]
    max_steps: int
    arms: tuple[str, ...] = ABLATION_ARMS
    extra: dict[str, dict] = dataclasses.field(default_factory=dict)  # per-arm overrides
    references: Callable[[int], dict[str, dict[str, list[float]]]] | None = None
    gif_arms: tuple[str, ...] = ()  # arms whose best seed's final policy is drawn as a GIF
    within_round: bool = False  # arms equal to within one round (see equal_budget)

    def rounds(self, budget: int) -> tuple[int, dict[str, int]]:
        """The env-step budget and each arm's rounds (:func:`equal_budget`)."""
        return equal_budget(self.base, self.max_steps, budget, self.arms, self.extra,
                            self.within_round)


def run_variant(study: str, v: Variant, budget: int, seeds: Sequence[int],
                eval_episodes: int, metric: str, run_root: Path, out_dir: Path,
                log: Callable[[str], None] = print, resume: bool = False) -> dict[str, Any]:
    """Every arm of ``v`` over ``seeds`` at an equal env-step budget, plus its references
    (``resume``: see :func:`train_arm`)."""
    spent, rounds = v.rounds(budget)
    sizes = round_sizes(v.base, v.max_steps, v.arms, v.extra)
    refs = v.references(eval_episodes) if v.references else {}
    runs, gifs = [], {}
    for arm in v.arms:
        clock = Timer()
        cfg = arm_config(v.base, arm, v.extra.get(arm))
        journal = arm_journal(out_dir, study, v.label, arm)
        what = {"config": cfg, "seeds": [int(s) for s in seeds], "rounds": rounds[arm],
                "max_steps": v.max_steps, "eval_episodes": eval_episodes,
                "heldout_seed": HELDOUT_SEED, "metric": metric}
        rows = journaled_rows(journal, what) if resume else None
        trainer = None
        if rows is None:
            rows, trainer = train_arm(cfg, seeds, rounds[arm], v.max_steps, eval_episodes,
                                      run_root / study / slug(v.label) / arm, metric, arm,
                                      resume=resume, log=log)
            write_json(journal, {**_json(what), "rows": rows})
        else:
            log(f"  [{study}] {v.label} · {arm}: finished by an earlier job ({journal})")
        runs += rows
        means = [np.mean(r["heldout_team_return"]) for r in rows]
        log(f"  [{study}] {v.label} · {arm}: {rounds[arm]} rounds x {len(seeds)} seeds, "
            f"{rounds[arm] * sizes[arm]} env steps each, held-out team return {np.mean(means):.3f} "
            f"(seeds {min(means):.3f}..{max(means):.3f}), {clock():.0f} s")
        if arm in v.gif_arms and trainer is not None:
            best = int(np.argmax(means))
            path = out_dir / f"{study}-{slug(v.label)}-{arm}.gif"
            trainer.write_gif(path, index=best)
            gifs[arm] = {"path": path.name, "seed": int(seeds[best])}
    return {"label": v.label, "config": v.base, "arm_overrides": {
                a: merge(ARMS[a], v.extra.get(a, {})) for a in v.arms},
            "budget_env_steps": spent, "rounds": rounds,
            "round_env_steps": sizes,
            "team_return": {a: summarize([np.mean(r["heldout_team_return"]) for r in runs
                                          if r["arm"] == a]) for a in v.arms},
            metric: {a: summarize([np.mean(r["heldout_" + metric]) for r in runs
                                   if r["arm"] == a and "heldout_" + metric in r])
                     for a in v.arms if any("heldout_" + metric in r for r in runs)},
            "references": {n: {k: {**summarize(vals), "over": "episodes"}
                               for k, vals in d.items()} for n, d in refs.items()},
            "references_per_episode": refs, "gifs": gifs, "runs": runs}


def _json(x: Any) -> Any:
    return json.loads(json.dumps(x))


def arm_journal(out_dir: Path, study: str, label: str, arm: str) -> Path:
    """Where a finished arm's per-seed results wait for the rest of its study
    (``<out_dir>/<study>-arms/<variant>-<arm>.json``): a study of hours that stops
    part-way keeps every arm it finished even when its run directories are gone (a new
    machine), because these files live beside the results and can be committed; the
    complete report removes them (:func:`compare_arms`)."""
    return out_dir / f"{study}-arms" / f"{slug(label)}-{arm}.json"


def journaled_rows(path: Path, what: dict[str, Any]) -> list[dict] | None:
    """The rows journaled at ``path`` when that arm was trained and evaluated exactly as
    ``what`` says (config, seeds, rounds, horizon, held-out episodes, metric); None
    otherwise (no file, unreadable, or another setting: the arm is trained again)."""
    try:
        saved = json.loads(path.read_text())
        rows = saved.pop("rows")
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    if saved != _json(what) or not isinstance(rows, list):
        return None
    return [{**r, "journaled": True} for r in rows]


def journaled(journal: Path, what: dict[str, Any], compute: Callable[[], dict[str, Any]],
               resume: bool = True) -> dict[str, Any]:
    """The row ``compute()`` returns, written to ``journal`` with ``what`` (the settings
    it ran with) before it is used; with ``resume``, a journal of the same settings is
    read instead (a finished seed of a job that was stopped is not run again)."""
    rows = journaled_rows(journal, what) if resume else None
    if rows is not None:
        print(f"finished by an earlier job ({journal})", flush=True)
        return rows[0]
    row = compute()
    write_json(journal, {**what, "rows": [row]})
    return row


def kept_variants(path: Path, alike: dict[str, Any], variants: Sequence[Variant],
                  budget: int) -> dict[str, dict[str, Any]]:
    """The results of ``variants`` in the earlier report at ``path`` that this study would
    reproduce: the report run alike (every key of ``alike``), and each variant with the
    same base config, arms and their settings, env-step budget and rounds as now. Each
    kept variant says which job measured it (``"earlier_job"``)."""
    old = read_if_alike(path, alike) or {}
    out = {}
    for v in variants:
        was = old.get("variants", {}).get(v.label)
        spent, rounds = v.rounds(budget)
        now = {"config": v.base, "budget_env_steps": spent, "rounds": rounds,
               "arm_overrides": {a: merge(ARMS[a], v.extra.get(a, {})) for a in v.arms}}
        if was and all(was.get(k) == _json(x) for k, x in now.items()):
            out[v.label] = {**was, "earlier_job": {
                "wall_time_s": old.get("wall_time_s"), "machine": old.get("machine")}}
    return out


def compare_arms(name: str, variants: Sequence[Variant], budget: int, seeds: Sequence[int],
                 eval_episodes: int, metric: str, metric_label: str, fitness_label: str,
                 out_dir: Path, run_root: Path, goals: Callable[[dict], list[dict]],
                 higher: bool = True, resume: bool = False, keep: Sequence[Variant] = ()
                 ) -> dict[str, Any]:
    """Run every variant; write ``<name>.json`` (raw per-seed results, configs, goals),
    ``<name>.csv``, ``<name>.png`` (curves with 95% bands, held-out bars) and
    ``<name>.md``. ``goals(report)`` -> ``[{"goal", "met", "numbers"}]``. ``resume``: an
    interrupted study keeps the arms it finished (from their journals,
    :func:`arm_journal`; rows say ``"journaled"``) and continues the one it stopped in
    from its run directory (:func:`train_arm`; rows say ``"resumed"``). ``keep``:
    variants this job does not run whose results the earlier ``<name>.json`` holds run
    alike (:func:`kept_variants`) stay in the report, first, marked as the earlier job's."""
    clock = Timer()
    report: dict[str, Any] = {"study": name, "seeds": list(seeds),
                              "eval_episodes": eval_episodes, "heldout_seed": HELDOUT_SEED,
                              "metric": metric, "metric_higher_is_better": higher,
                              "resumed": resume, "variants": {}}
    alike = {k: report[k] for k in ("study", "seeds", "eval_episodes", "heldout_seed",
                                    "metric")}
    report["variants"].update(kept_variants(out_dir / f"{name}.json", alike, keep, budget))
    for label in report["variants"]:
        print(f"[{name}] {label}: kept from the earlier job's {name}.json", flush=True)
    for v in variants:
        print(f"[{name}] {v.label}", flush=True)
        report["variants"][v.label] = run_variant(name, v, budget, seeds, eval_episodes,
                                                  metric, run_root, out_dir, resume=resume)
    report["goals"] = goals(report)
    report["wall_time_s"] = round(clock(), 1)
    report["machine"] = machine_note()
    written = write_report(report, out_dir, fitness_label, metric_label)
    for v in variants:  # the report holds them now
        for arm in v.arms:
            arm_journal(out_dir, name, v.label, arm).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (out_dir / f"{name}-arms").rmdir()  # only when empty
    return written


def merl_beats(report: dict, label: str, key: str = "team_return",
               higher: bool = True, threshold: float | None = None) -> dict[str, Any]:
    """The usual goal: MERL better than every other arm with disjoint 95% CIs (and, with
    ``threshold``, its mean at least that)."""
    v = report["variants"][label]
    merl = v[key]["merl"]
    wins = {a: above(merl, s, higher) for a, s in v[key].items() if a != "merl"}
    met = all(wins.values())
    text = f"{label}: MERL's {key.replace('_', ' ')} above every ablation, disjoint 95% CIs"
    if threshold is not None:
        met = met and merl["mean"] >= threshold
        text = f"{label}: MERL's {key.replace('_', ' ')} >= {threshold} and above every " \
               "ablation with disjoint 95% CIs"
    nums = {a: fmt_ci(s["mean"], s["ci95"]) for a, s in v[key].items()}
    return {"goal": text, "met": bool(met), "numbers": nums, "disjoint_wins": wins}
