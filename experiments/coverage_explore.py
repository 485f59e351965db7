"""Does exploring first pay on Coverage? A premise check for issue 32 (trains nothing).

:mod:`experiments.coverage_tails` found that the imitator and decentralized Lloyd both
send a robot that has sensed nothing toward the world's centre, and that the episodes
they lose are those where the team never senses much of the density. This check plays a
scripted decentralized explorer for the first ``k`` steps of an episode and then hands
over to decentralized Lloyd, to the Coverage study's imitator (holding "cover") or to a
Lloyd that knows more than a robot observes (which part of clairvoyant Lloyd's knowledge
matters: the density, or the cell, i.e. where the other robots are):

- the explorer (:func:`envs.policies.frontier_decentralized`): each robot steps toward
  the nearest cell it has not sensed inside its own decentralized cell (the cells no
  nearer to a comm neighbour than to it), using only what decentralized Lloyd uses;
- own-map Lloyd (:func:`envs.policies.lloyd_own_map`): the robot's sensed map, its true
  cell; :func:`true_density_comm_cell`: the true density, the cell decentralized Lloyd
  takes (comm neighbours only); clairvoyant Lloyd: both true; memory Lloyd
  (:func:`envs.policies.lloyd_memory`): the robot's sensed map, the cell its memory of
  the robots it has met draws (decentralized);
- ``k = 0`` is the policy alone.

It plays the sweeps' validation episodes (key 654,321), not the studies' held-out ones,
because it informs what to build next, and the held-out episodes are kept for the goals.

    python -m experiments.coverage_explore [--out DIR]      # ~1 min with the imitator trained

Writes ``<out>/coverage-explore.{json,md}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.cli import diagnostic_main
from experiments.machine import Timer, machine_note
from experiments.report import RESULTS, write_pair
from experiments.stats import fmt_ci, mean_ci

EPISODES = 64
EXPLORE_STEPS = (0, 5, 10, 15, 20)
WORSE = 1.0  # J(T)/J(0) above this: the episode ends worse than it started


def true_density_comm_cell(key: Any, env: Any, state: Any) -> Any:
    """Lloyd step on the true density over decentralized Lloyd's cell (the cells no nearer
    to one of the robot's comm neighbours than to it): clairvoyant in density, blind to
    the robots out of comm range."""
    from envs.policies import _centroids, _own_cells, _toward

    del key
    cells = _own_cells(env, state, None)
    return _toward(env, state.pos, _centroids(env, state.pos, state.density[None], cells))


def play(path: Path, explore_steps: Sequence[int] = EXPLORE_STEPS,
         episodes: int = EPISODES) -> dict[str, dict[int, list[float]]]:
    """``{hand-over policy: {k: per-episode J(T)/J(0)}}``."""
    import jax
    import jax.numpy as jnp

    from envs.episode import run_episode
    from envs.policies import (
        frontier_decentralized,
        lloyd_clairvoyant,
        lloyd_decentralized,
        lloyd_memory,
        lloyd_own_map,
    )
    from experiments.coverage import study_imitator
    from experiments.training import VALIDATION_SEED, heldout_keys

    env, actor = study_imitator(path)
    keys = heldout_keys(episodes, VALIDATION_SEED)

    def imitator(key, obs, state, option, t):
        option, out = actor.step(key, obs, env.comm_graph(state), option, t, True,
                                 done=actor.options_done(env, state))
        return out.env_action, option

    def scripted(policy):
        return lambda key, obs, state, option, t: (policy(key, env, state), option)

    out: dict[str, dict[int, list[float]]] = {}
    for name, cover in (("decentralized Lloyd", scripted(lloyd_decentralized)),
                        ("imitator", imitator),
                        ("own-map Lloyd (true cell)", scripted(lloyd_own_map)),
                        ("true density, comm-neighbour cell",
                         scripted(true_density_comm_cell)),
                        ("clairvoyant Lloyd", scripted(lloyd_clairvoyant)),
                        ("memory Lloyd (remembered cell)", scripted(lloyd_memory))):
        def final_cost(key, k, cover=cover):  # k traced: one program per hand-over policy
            def act(key, obs, state, option, t):
                action, option = cover(key, obs, state, option, t)
                explored = frontier_decentralized(key, env, state)
                return jnp.where(t < k, explored, action), option

            return run_episode(key, env, act, actor.initial_option(env.num_agents),
                               record=lambda o: o.metrics["coverage_cost"]).outs[-1]

        play_all = jax.jit(jax.vmap(final_cost, in_axes=(0, None)))
        out[name] = {k: np.asarray(play_all(keys, jnp.int32(k))).tolist()
                     for k in explore_steps}
    return out


def summary(costs: Sequence[float], alone: Sequence[float]) -> dict[str, Any]:
    """One row: mean ± 95% t-interval over episodes, median, episodes ending worse than
    they started, and the paired difference from ``alone`` (the same episodes at k = 0)."""
    costs_a = np.asarray(costs, np.float64)
    mean, ci = mean_ci(costs_a.tolist())
    diff, diff_ci = mean_ci((costs_a - np.asarray(alone, np.float64)).tolist())
    return {"mean": mean, "ci95": ci, "median": float(np.median(costs_a)),
            "worse": int(np.sum(costs_a > WORSE)), "minus_alone": diff,
            "minus_alone_ci95": diff_ci, "per_episode": [float(c) for c in costs_a]}


def markdown(report: dict[str, Any]) -> str:
    """The report's table (one row per hand-over policy and ``k``)."""
    lines = [f"# Coverage: explore for k steps, then cover ({report['episodes']} validation "
             f"episodes, key {report['episodes_key']})", "",
             f"Imitator: `{report['imitator']}` (the Coverage study's, holding cover). "
             "J(T)/J(0) over episodes, lower is better; k = 0 is the policy alone.", "",
             "| then | k (explore steps) | mean ± 95% CI | median | episodes ending worse "
             "than the start | minus k = 0, paired |", "|---|---|---|---|---|---|"]
    for name, rows in report["results"].items():
        for k, r in rows.items():
            lines.append(f"| {name} | {k} | {fmt_ci(r['mean'], r['ci95'])} | "
                         f"{r['median']:.3f} | {r['worse']} | "
                         f"{fmt_ci(r['minus_alone'], r['minus_alone_ci95'])} |")
    lines += ["", f"Wall time {report['wall_time_s']:.0f} s on {report['machine']['cpu']}."]
    return "\n".join(lines) + "\n"


def run(out_dir: Path = RESULTS, episodes: int = EPISODES) -> dict[str, Any]:
    """Play, summarize, write ``coverage-explore.{json,md}``; return the report."""
    from experiments.coverage import pretrain
    from experiments.training import VALIDATION_SEED

    clock = Timer()
    path = pretrain(1.0)
    played = play(path, EXPLORE_STEPS, episodes)
    results = {name: {str(k): summary(costs, rows[0]) for k, costs in rows.items()}
               for name, rows in played.items()}
    report = {"study": "coverage-explore", "episodes": episodes,
              "episodes_key": VALIDATION_SEED, "imitator": path.name, "results": results,
              "wall_time_s": round(clock(), 1), "machine": machine_note()}
    return write_pair(out_dir, "coverage-explore", report, markdown(report))


def main(argv: list[str] | None = None) -> None:
    diagnostic_main(run, markdown, __doc__, EPISODES, argv)


if __name__ == "__main__":
    main()
