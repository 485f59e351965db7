"""Which imitated option fails? A diagnostic of the feudal imitation on Coverage (issue 32).

The sweep's probe ``feudal-explore-cover-wide-seen`` imitates two options on a schedule:
"explore" the frontier explorer for the first 15 steps, then "cover" clairvoyant Lloyd.
This trains that probe's imitator for one sweep seed and plays the sweeps' validation
episodes with each phase taken either by the imitator's option or by a scripted policy:

- explore (t < 15) by the scripted explorer (:func:`envs.policies.frontier_decentralized`)
  or by the learned "explore" option;
- cover (t >= 15) by decentralized Lloyd, by the learned "cover" option or by clairvoyant
  Lloyd (the expert; it reads the true density, so only a yardstick).

The explore phase is judged where it hands over (J and the team's sensed share of the
density at t = 15) and by what each cover makes of it. Validation episodes (key 654,321)
and a sweep seed (100), never the studies' held-out episodes or reported seeds.

    python -m experiments.coverage_options [--out DIR]    # ~7 min: one imitation

Writes ``<out>/coverage-options.{json,md}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from experiments.cli import diagnostic_main
from experiments.machine import Timer, machine_note
from experiments.report import RESULTS, write_pair
from experiments.stats import fmt_ci, mean_ci

EPISODES = 64
PROBE = "feudal-explore-cover-wide-seen"
SEED = 100  # the sweep's first seed
EXPLORERS = ("frontier explorer (scripted)", "explore option (learned)")
COVERS = ("decentralized Lloyd", "cover option (learned)", "clairvoyant Lloyd (expert)")


def play(actor: Any, env: Any, episodes: int) -> dict[str, dict[str, Any]]:
    """``{f"{explorer} | {cover}": {"final", "handover_cost", "handover_sensed"}}``, each a
    per-episode list: J(T)/J(0), and J(t)/J(0) and the sensed share where the actor's
    schedule hands over from "explore" to "cover" (its first selector period)."""
    import jax
    import jax.numpy as jnp

    from envs.episode import run_episode
    from envs.policies import frontier_decentralized, lloyd_clairvoyant, lloyd_decentralized
    from experiments.training import VALIDATION_SEED, heldout_keys

    handover = actor.selector_period
    keys = heldout_keys(episodes, VALIDATION_SEED)

    def episode(key, e, c):  # e, c traced: one program for every pairing
        def act(key, obs, state, option, t):
            option, out = actor.step(key, obs, env.comm_graph(state), option, t, True)
            explore = jnp.where(e == 0, frontier_decentralized(key, env, state),
                                out.env_action)
            cover = jnp.select([c == 0, c == 1], [lloyd_decentralized(key, env, state),
                                                  out.env_action],
                               lloyd_clairvoyant(key, env, state))
            return jnp.where(t < handover, explore, cover), option

        outs = run_episode(key, env, act, actor.initial_option(env.num_agents),
                           record=lambda o: (o.metrics["coverage_cost"],
                                             o.metrics["sensed_fraction"])).outs
        return outs[0][-1], outs[0][handover - 1], outs[1][handover - 1]

    play_all = jax.jit(jax.vmap(episode, in_axes=(0, None, None)))
    out = {}
    for e, explorer in enumerate(EXPLORERS):
        for c, cover in enumerate(COVERS):
            final, cost, sensed = (np.asarray(x).tolist() for x in
                                   play_all(keys, jnp.int32(e), jnp.int32(c)))
            out[f"{explorer} | {cover}"] = {"final": final, "handover_cost": cost,
                                            "handover_sensed": sensed}
    return out


def markdown(report: dict[str, Any]) -> str:
    """The report's table: one row per (explore, cover) pairing."""
    lines = [f"# Coverage: which imitated option fails ({report['episodes']} validation "
             f"episodes, key {report['episodes_key']})", "",
             f"Imitator: the probe `{report['probe']}`, seed {report['seed']} (validation "
             f"loss {report['val_loss']:.3f}, {report['steps']} gradient steps). Explore "
             f"for the first {report['handover']} steps, then cover; J(T)/J(0) over "
             "episodes, lower is better; at the hand-over, J(t)/J(0) and the share of the "
             "density the team has sensed.", "",
             "| explore by | cover by | J(T)/J(0) | median | J at the hand-over | sensed at "
             "the hand-over |", "|---|---|---|---|---|---|"]
    for name, r in report["results"].items():
        explorer, cover = name.split(" | ")
        lines.append(f"| {explorer} | {cover} | {fmt_ci(r['mean'], r['ci95'])} | "
                     f"{r['median']:.3f} | {fmt_ci(*r['handover_cost'])} | "
                     f"{fmt_ci(*r['handover_sensed'])} |")
    lines += ["", f"Wall time {report['wall_time_s']:.0f} s (imitation "
              f"{report['imitation_s']:.0f} s) on {report['machine']['cpu']}."]
    return "\n".join(lines) + "\n"


def run(out_dir: Path = RESULTS, episodes: int = EPISODES) -> dict[str, Any]:
    """Imitate, play, summarize, write ``coverage-options.{json,md}``; return the report."""
    from experiments.coverage_lpac import PROBES, imitate_seed, scaled_env, split_recipe
    from experiments.training import VALIDATION_SEED
    from feudal_es.resolve import resolve_env

    clock = Timer()
    recipe = PROBES[PROBE]
    actor, record = imitate_seed(recipe, SEED)
    env = resolve_env("feudal_es/Coverage-v0", {**scaled_env(1), **split_recipe(recipe)[1]})
    played = play(actor, env.core, episodes)
    results = {}
    for name, r in played.items():
        mean, ci = mean_ci(r["final"])
        results[name] = {"mean": mean, "ci95": ci, "median": float(np.median(r["final"])),
                         "handover_cost": mean_ci(r["handover_cost"]),
                         "handover_sensed": mean_ci(r["handover_sensed"]), "per_episode": r}
    report = {"study": "coverage-options", "probe": PROBE, "seed": SEED,
              "episodes": episodes, "episodes_key": VALIDATION_SEED,
              "handover": actor.selector_period, "val_loss": record["val_loss"],
              "steps": record["steps"], "imitation_s": record["wall_s"],
              "results": results, "wall_time_s": round(clock(), 1),
              "machine": machine_note()}
    return write_pair(out_dir, "coverage-options", report, markdown(report))


def main(argv: list[str] | None = None) -> None:
    diagnostic_main(run, markdown, __doc__, EPISODES, argv)


if __name__ == "__main__":
    main()
