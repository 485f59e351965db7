"""Which imitated option fails? A diagnostic of the feudal imitation on Coverage (issue 32).

The sweep's probe ``feudal-explore-cover-wide-seen`` imitates two options on a schedule:
"explore" the frontier explorer for the first 15 steps, then "cover" clairvoyant Lloyd.
This trains that probe's imitator (or another feudal probe's, ``--probe``) for one sweep
seed and plays the sweeps' validation episodes with each phase taken either by the
imitator's option or by a scripted policy:

- explore (t < 15) by the scripted explorer (:func:`envs.policies.frontier_decentralized`)
  or by the learned "explore" option;
- cover (t >= 15) by decentralized Lloyd, by the learned "cover" option or by the
  probe's "cover" expert (clairvoyant Lloyd reads the true density, so it is only a
  yardstick; ``lloyd_memory`` reads only what the robot observes).

The explore phase is judged where it hands over (J and the team's sensed share of the
density at t = 15) and by what each cover makes of it. Validation episodes (key 654,321)
and a sweep seed (100), never the studies' held-out episodes or reported seeds.

    python -m experiments.coverage_options [--probe NAME] [--out DIR]  # one imitation

Writes ``<out>/coverage-options.{json,md}`` (another probe:
``coverage-options-<probe>.{json,md}``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from experiments.cli import diagnostic_parser
from experiments.machine import Timer, machine_note
from experiments.report import RESULTS, write_pair
from experiments.stats import fmt_ci, mean_ci

EPISODES = 64
PROBE = "feudal-explore-cover-wide-seen"
SEED = 100  # the sweep's first seed
EXPLORERS = ("frontier explorer (scripted)", "explore option (learned)")
EXPERT_NAMES = {"lloyd_clairvoyant": "clairvoyant Lloyd", "lloyd_memory": "memory Lloyd",
                "lloyd_own_map": "own-map Lloyd"}


def covers(expert: str = "lloyd_clairvoyant") -> tuple[str, str, str]:
    """The three cover policies' names, the last the probe's "cover" expert."""
    return ("decentralized Lloyd", "cover option (learned)",
            f"{EXPERT_NAMES.get(expert, expert)} (expert)")


def play(actor: Any, env: Any, episodes: int, expert: str = "lloyd_clairvoyant"
         ) -> dict[str, dict[str, Any]]:
    """``{f"{explorer} | {cover}": {"final", "handover_cost", "handover_sensed"}}``, each a
    per-episode list: J(T)/J(0), and J(t)/J(0) and the sensed share where the actor's
    schedule hands over from "explore" to "cover" (its first selector period); the
    third cover is the policy ``expert`` (a name of ``envs.gif.POLICIES``)."""
    import jax
    import jax.numpy as jnp

    from envs.episode import run_episode
    from envs.policies import frontier_decentralized, lloyd_decentralized
    from experiments.training import VALIDATION_SEED, heldout_keys
    from feudal_es.pretrain import expert_policy

    cover_expert = expert_policy("feudal_es/Coverage-v0", expert)[1]

    handover = actor.selector_period
    keys = heldout_keys(episodes, VALIDATION_SEED)

    def episode(key, e, c):  # e, c traced: one program for every pairing
        def act(key, obs, state, option, t):
            option, out = actor.step(key, obs, env.comm_graph(state), option, t, True)
            explore = jnp.where(e == 0, frontier_decentralized(key, env, state),
                                out.env_action)
            cover = jnp.select([c == 0, c == 1], [lloyd_decentralized(key, env, state),
                                                  out.env_action],
                               cover_expert(key, env, state))
            return jnp.where(t < handover, explore, cover), option

        outs = run_episode(key, env, act, actor.initial_option(env.num_agents),
                           record=lambda o: (o.metrics["coverage_cost"],
                                             o.metrics["sensed_fraction"])).outs
        return outs[0][-1], outs[0][handover - 1], outs[1][handover - 1]

    play_all = jax.jit(jax.vmap(episode, in_axes=(0, None, None)))
    out = {}
    for e, explorer in enumerate(EXPLORERS):
        for c, cover in enumerate(covers(expert)):
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


def run(out_dir: Path = RESULTS, episodes: int = EPISODES, probe: str = PROBE
        ) -> dict[str, Any]:
    """Imitate ``probe`` (a feudal probe of the LPAC sweep), play, summarize, write
    ``coverage-options[-<probe>].{json,md}``; return the report."""
    from experiments.coverage_lpac import PROBES, imitate_seed, scaled_env, split_recipe
    from experiments.training import VALIDATION_SEED
    from feudal_es.resolve import resolve_env

    clock = Timer()
    feudal = [n for n, r in PROBES.items() if r.get("schedule")]
    if probe not in feudal:
        said = "imitates one option" if probe in PROBES else "is not a probe of the sweep"
        raise ValueError(f"{probe!r} {said}; this diagnostic needs a feudal probe (one "
                         f"expert per option, on a schedule): {', '.join(feudal)}")
    recipe = PROBES[probe]
    expert = recipe["experts"][1]
    actor, record = imitate_seed(recipe, SEED)
    env = resolve_env("feudal_es/Coverage-v0", {**scaled_env(1), **split_recipe(recipe)[1]})
    played = play(actor, env.core, episodes, expert)
    results = {}
    for name, r in played.items():
        mean, ci = mean_ci(r["final"])
        results[name] = {"mean": mean, "ci95": ci, "median": float(np.median(r["final"])),
                         "handover_cost": mean_ci(r["handover_cost"]),
                         "handover_sensed": mean_ci(r["handover_sensed"]), "per_episode": r}
    name = "coverage-options" if probe == PROBE else f"coverage-options-{probe}"
    report = {"study": name, "probe": probe, "seed": SEED,
              "episodes": episodes, "episodes_key": VALIDATION_SEED,
              "handover": actor.selector_period, "val_loss": record["val_loss"],
              "steps": record["steps"], "imitation_s": record["wall_s"],
              "results": results, "wall_time_s": round(clock(), 1),
              "machine": machine_note()}
    return write_pair(out_dir, name, report, markdown(report))


def main(argv: list[str] | None = None) -> None:
    p = diagnostic_parser(__doc__, EPISODES)
    p.add_argument("--probe", default=PROBE, help=f"a feudal probe (default: {PROBE})")
    a = p.parse_args(argv)
    print(markdown(run(a.out, a.episodes, a.probe)), end="")


if __name__ == "__main__":
    main()
