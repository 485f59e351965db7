"""Where the Coverage imitator loses to decentralized Lloyd, episode by episode (issue 32).

The Coverage study compares means over its 64 held-out episodes. This diagnostic plays the
study's imitator (holding "cover", no fine-tuning) and decentralized Lloyd on those same
episodes and keeps what the means hide: each episode's J(T)/J(0), the episodes a policy
ends worse than it started (J(T)/J(0) > 1), how often the imitator is the better of the
two, the team's spread at the end (mean distance of the robots from their centroid) and
the mean cost curve; and what a *blind* robot does (one that has sensed under
:data:`BLIND` of the density's mass at the start): how fast it moves over the first
:data:`EARLY` steps and how far that move points to the world's centre. It trains
nothing: the imitator is the study's (trained on first use, as the study does, by
:func:`experiments.coverage.pretrain`).

    python -m experiments.coverage_tails [--out DIR]     # ~1 min with the imitator trained

Writes ``<out>/coverage-tails.{json,md}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.cli import diagnostic_main
from experiments.machine import Timer, machine_note
from experiments.report import RESULTS, write_pair
from feudal_es.stats import mean_ci

EPISODES = 64
CURVE_EVERY = 5  # steps between the curve's points
WORSE = 1.0  # J(T)/J(0) above this: the episode ends worse than it started
BLIND = 0.02  # a robot that has sensed less than this share of the mass at the start
EARLY = 5  # the steps over which a robot's first move is measured


def spread(pos: np.ndarray) -> np.ndarray:
    """``[...]`` mean distance of the robots from their centroid, of ``pos[..., N, 2]``."""
    return np.linalg.norm(pos - pos.mean(axis=-2, keepdims=True), axis=-1).mean(axis=-1)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of the angle between the vectors of the last axis (0 for a zero vector)."""
    norm = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return np.where(norm > 0, (a * b).sum(-1) / np.where(norm > 0, norm, 1.0), 0.0)


def by_difficulty(reference: Sequence[float], imitator: Sequence[Sequence[float]],
                  others: dict[str, Sequence[float]], parts: int = 4) -> dict[str, Any]:
    """Where a study's imitator wins and loses against a reference policy on the same
    episodes. ``imitator`` is ``[seeds, episodes]`` (each seed's per-episode costs);
    its mean over seeds is compared with ``reference`` episode by episode: the paired
    difference (imitator minus reference) with its 95% t-interval over episodes, and the
    means of both (and of each of ``others``) over ``parts`` equal groups of the episodes
    ordered by the reference's cost, easiest first (a stable sort; the last group takes
    the remainder). Means over seeds hide this: an imitator can beat the reference on its
    hard episodes and lose on its easy ones."""
    ref = np.asarray(reference, np.float64)
    im = np.asarray(imitator, np.float64).mean(axis=0)
    if im.shape != ref.shape:
        raise ValueError(f"imitator episodes {im.shape} != reference episodes {ref.shape}")
    if ref.ndim != 1 or len(ref) < parts:
        raise ValueError(f"{parts} groups need at least {parts} episodes, got {ref.shape}")
    m, hw = mean_ci(im - ref)
    order = np.argsort(ref, kind="stable")
    size = len(ref) // parts
    groups = [order[i * size:(i + 1) * size if i < parts - 1 else len(ref)]
              for i in range(parts)]
    policies = {"reference": ref, "imitator": im,
                **{k: np.asarray(v, np.float64) for k, v in others.items()}}
    return {"paired": {"mean": m, "ci95": hw, "n": int(ref.size)},
            "imitator_better": int((im < ref).sum()),
            "groups": [{k: float(v[g].mean()) for k, v in policies.items()}
                       for g in groups]}


def play(path: Path, episodes: int = EPISODES) -> dict[str, dict[str, np.ndarray]]:
    """``{policy: {"cost": [E, T], "pos": [E, T + 1, N, 2], "sensed": [E, T + 1, N],
    "team_sensed": [E], "max_step": float, "centre": float}}`` for the imitator at ``path`` and
    decentralized Lloyd on the study's held-out episodes (``sensed``: the share of the
    density's mass each robot has sensed; ``team_sensed``: the team's together at the
    end; ``max_step``: the env's largest step in world units; ``centre``: the world's
    centre along either axis)."""
    import jax

    from envs.episode import run_episode, stateless
    from envs.policies import lloyd_decentralized
    from experiments.coverage import study_imitator
    from experiments.training import heldout_keys
    from feudal_es.rollout import episode

    env, actor = study_imitator(path)
    record = lambda out: out.metrics["coverage_cost"]
    keys = heldout_keys(episodes)
    imitator = jax.jit(jax.vmap(lambda k: episode(env, actor, k, True, keep_states=True,
                                                  record=record)))(keys)
    lloyd = jax.jit(jax.vmap(lambda k: run_episode(
        k, env, stateless(lloyd_decentralized, env), keep_states=True, record=record)))(keys)
    out = {}
    for name, ep in (("imitator", imitator), ("decentralized Lloyd", lloyd)):
        seen = np.asarray(ep.states.seen)  # [E, T + 1, N, G, G]
        density = np.asarray(ep.states.density[:, 0])  # [E, G, G], fixed in an episode
        total = density.sum(axis=(-2, -1))
        out[name] = {
            "cost": np.asarray(ep.outs), "pos": np.asarray(ep.states.pos),
            "sensed": (seen * density[:, None, None]).sum(axis=(-2, -1))
            / total[:, None, None],
            "team_sensed": (seen[:, -1].any(axis=1) * density).sum(axis=(-2, -1)) / total,
            "max_step": float(env.max_speed), "centre": env.world_size / 2}
    return out


def summary(played: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """The per-policy figures of the report (plain floats and lists)."""
    rows: dict[str, Any] = {}
    for name, ep in played.items():
        final, end = ep["cost"][:, -1], spread(ep["pos"][:, -1])
        worse = final > WORSE
        blind = ep["sensed"][:, 0] < BLIND  # [E, N]
        move = ep["pos"][:, EARLY] - ep["pos"][:, 0]  # [E, N, 2]
        speed = np.linalg.norm(move, axis=-1) / (EARLY * ep["max_step"])
        centre = cosine(move, ep["centre"] - ep["pos"][:, 0])
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
            "blind_share": float(blind.mean()),
            "blind_speed": float(speed[blind].mean()) if blind.any() else None,
            "blind_cos_centre": float(centre[blind].mean()) if blind.any() else None,
            "sighted_speed": float(speed[~blind].mean()) if (~blind).any() else None,
            "sighted_cos_centre": float(centre[~blind].mean()) if (~blind).any() else None,
            "team_sensed_worse": float(ep["team_sensed"][worse].mean())
            if worse.any() else None,
            "team_sensed_not_worse": float(ep["team_sensed"][~worse].mean()),
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
    lines += ["", f"Blind robots (sensing under {BLIND:.0%} of the mass at the start) and "
              f"their first {EARLY} steps (speed as a share of the largest; the cosine of "
              "the move with the direction to the world's centre):", ""]
    num = lambda v: "-" if v is None else f"{v:.2f}"
    for name, r in rows.items():
        lines.append(f"- {name}: {r['blind_share']:.0%} of the robots start blind; they "
                     f"move at {num(r['blind_speed'])}, cosine {num(r['blind_cos_centre'])} "
                     f"(the others {num(r['sighted_speed'])}, "
                     f"{num(r['sighted_cos_centre'])}). The team has sensed "
                     f"{num(r['team_sensed_worse'])} of the mass by the end of the episodes "
                     f"ending worse, {num(r['team_sensed_not_worse'])} of the others.")
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
    return write_pair(out_dir, "coverage-tails", report, markdown(report))


def main(argv: list[str] | None = None) -> None:
    diagnostic_main(run, markdown, __doc__, EPISODES, argv)


if __name__ == "__main__":
    main()
