"""Where the Coverage imitator loses to decentralized Lloyd, episode by episode (issue 32).

The Coverage study compares means over its 64 held-out episodes. This diagnostic plays the
study's imitator (holding "cover", no fine-tuning) and decentralized Lloyd on those same
episodes and keeps what the means hide: each episode's J(T)/J(0), the episodes a policy
ends worse than it started (J(T)/J(0) > 1), how often the imitator is the better of the
two, the team's spread at the end (mean distance of the robots from their centroid) and
the mean cost curve. It trains nothing: the imitator is the study's (trained on first use,
as the study does, by :func:`experiments.coverage.pretrain`).

    python -m experiments.coverage_tails [--out DIR]     # ~1 min with the imitator trained

Writes ``<out>/coverage-tails.{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from experiments.machine import Timer, machine_note
from experiments.report import RESULTS, write_json

EPISODES = 64
CURVE_EVERY = 5  # steps between the curve's points
WORSE = 1.0  # J(T)/J(0) above this: the episode ends worse than it started


def spread(pos: np.ndarray) -> np.ndarray:
    """``[...]`` mean distance of the robots from their centroid, of ``pos[..., N, 2]``."""
    return np.linalg.norm(pos - pos.mean(axis=-2, keepdims=True), axis=-1).mean(axis=-1)


def play(path: Path, episodes: int = EPISODES) -> dict[str, dict[str, np.ndarray]]:
    """``{policy: {"cost": [E, T], "pos": [E, T + 1, N, 2]}}`` for the imitator at
    ``path`` and decentralized Lloyd on the study's held-out episodes."""
    import jax

    from agents import FeudalActor
    from envs.episode import run_episode, stateless
    from envs.policies import lloyd_decentralized
    from experiments.coverage import COVER, base_config
    from experiments.training import heldout_keys
    from feudal_es.config import TrainerConfig
    from feudal_es.pretrain import load_pretrained
    from feudal_es.resolve import resolve_env
    from feudal_es.rollout import episode

    cfg = TrainerConfig.from_dict(base_config())
    env = resolve_env(cfg.env, cfg.env_kwargs).core
    actor_cfg = dataclasses.replace(cfg.actor, options="fixed", fixed_option=COVER)
    actor = load_pretrained(path, FeudalActor.from_env(jax.random.key(0), env, actor_cfg))
    record = lambda out: out.metrics["coverage_cost"]
    keys = heldout_keys(episodes)
    imitator = jax.jit(jax.vmap(lambda k: episode(env, actor, k, True, keep_states=True,
                                                  record=record)))(keys)
    lloyd = jax.jit(jax.vmap(lambda k: run_episode(
        k, env, stateless(lloyd_decentralized, env), keep_states=True, record=record)))(keys)
    return {name: {"cost": np.asarray(ep.outs), "pos": np.asarray(ep.states.pos)}
            for name, ep in (("imitator", imitator), ("decentralized Lloyd", lloyd))}


def summary(played: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """The per-policy figures of the report (plain floats and lists)."""
    rows: dict[str, Any] = {}
    for name, ep in played.items():
        final, end = ep["cost"][:, -1], spread(ep["pos"][:, -1])
        worse = final > WORSE
        rows[name] = {
            "mean": float(final.mean()), "median": float(np.median(final)),
            "quartiles": [float(q) for q in np.percentile(final, [25, 75])],
            "episodes_worse_than_start": int(worse.sum()),
            "mean_where_not_worse": float(final[~worse].mean()),
            "spread_start": float(spread(ep["pos"][:, 0]).mean()),
            "spread_end": float(end.mean()),
            "spread_end_worse": float(end[worse].mean()) if worse.any() else None,
            "spread_end_not_worse": float(end[~worse].mean()),
            "corr_spread_end_cost": float(np.corrcoef(end, final)[0, 1]),
            "curve": [float(c) for c in ep["cost"][:, CURVE_EVERY - 1::CURVE_EVERY].mean(0)],
            "curve_worse": [float(c) for c in
                            ep["cost"][worse][:, CURVE_EVERY - 1::CURVE_EVERY].mean(0)]
            if worse.any() else [],
            "per_episode": [float(c) for c in final],
        }
    im, ll = (played[k]["cost"][:, -1] for k in ("imitator", "decentralized Lloyd"))
    return {"policies": rows, "imitator_better": int((im < ll).sum()),
            "both_worse_than_start": int(((im > WORSE) & (ll > WORSE)).sum())}


def markdown(report: dict[str, Any]) -> str:
    """The report as a README-style table and a few lines."""
    n, rows = report["episodes"], report["policies"]
    lines = [f"# Coverage: the imitator against decentralized Lloyd, episode by episode "
             f"({n} held-out episodes)", "",
             f"Imitator: `{report['imitator']}` (the Coverage study's, holding cover). "
             "J(T)/J(0), lower is better; spread: the robots' mean distance from their "
             "centroid (world side 1).", "",
             "| policy | mean | median | quartiles | episodes ending worse than the start "
             "| mean over the others | spread at the start / end (worse episodes; others) |",
             "|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        q = ", ".join(f"{v:.3f}" for v in r["quartiles"])
        worse = "-" if r["spread_end_worse"] is None else f"{r['spread_end_worse']:.3f}"
        lines.append(f"| {name} | {r['mean']:.3f} | {r['median']:.3f} | {q} | "
                     f"{r['episodes_worse_than_start']} | {r['mean_where_not_worse']:.3f} | "
                     f"{r['spread_start']:.3f} / {r['spread_end']:.3f} ({worse}; "
                     f"{r['spread_end_not_worse']:.3f}) |")
    steps = ", ".join(str(CURVE_EVERY * (i + 1))
                      for i in range(len(rows["imitator"]["curve"])))
    lines += ["", f"The imitator is the better of the two in {report['imitator_better']} of "
              f"{n} episodes; both end worse than the start in "
              f"{report['both_worse_than_start']}.", "",
              f"Mean J(t)/J(0) at t = {steps}:", ""]
    for name, r in rows.items():
        lines.append(f"- {name}: " + ", ".join(f"{c:.2f}" for c in r["curve"])
                     + ("; over its episodes ending worse: "
                        + ", ".join(f"{c:.2f}" for c in r["curve_worse"])
                        if r["curve_worse"] else ""))
    lines += ["", f"Wall time {report['wall_time_s']:.0f} s on {report['machine']['cpu']}."]
    return "\n".join(lines) + "\n"


def run(out_dir: Path = RESULTS, episodes: int = EPISODES) -> dict[str, Any]:
    """Play, summarize, write ``coverage-tails.{json,md}``; return the report."""
    from experiments.coverage import pretrain

    clock = Timer()
    path = pretrain(1.0)
    report = {"study": "coverage-tails", "episodes": episodes, "imitator": path.name,
              **summary(play(path, episodes))}
    report.update(wall_time_s=round(clock(), 1), machine=machine_note())
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "coverage-tails.json", report)
    (out_dir / "coverage-tails.md").write_text(markdown(report))
    return report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=EPISODES)
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    print(markdown(run(a.out, a.episodes)), end="")


if __name__ == "__main__":
    main()
