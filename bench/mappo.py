"""MAPPO and MERL training throughput on the bundled envs.

Three measurements, each side of a ratio timed in the same run:

- **MERL training env-steps/s** (``--merl-rounds``, on by default): MAPPO samples + ES
  fitness steps per wall second of ``ESTrainer`` rounds, each round's time as its
  ``metrics.jsonl`` row records it (gradient steps, ES generation, evaluation, the row and
  best-selector writes; compile excluded: the first round is not timed; the end of run's
  plot and checkpoint are shown apart, "with the run's final writes") on Discovery with
  8 agents, vector observations and the MLP executor (``feudal_es.config.VEC_ACTOR``),
  one seed and two seeds in one program (issue goal: >= 20k env-steps/s).
- **the MAPPO update, fused vs split**: one train step with the epochs x minibatches loop
  as one ``lax.scan`` in one jit, against the Python loop over jitted pieces, for the CNN
  actor (maps) and the MLP actor (vectors): why ``MAPPOConfig.update="auto"`` splits for
  a CNN only.
- **training vs rollout-only** for Coverage and Discovery at their default sizes (8
  agents, 16x16 maps) with the default actor: swarm-steps per second of

  rollout   ``feudal_es.mappo.make_rollout`` — collection only (actor + critic forward,
            env step, auto-reset), ``num_steps x num_envs`` per call, one jit;
  train     ``feudal_es.mappo.make_train_step`` — the same collection plus the PPO update
            (``epochs x minibatches`` gradient steps over the batch), one jit;

and their ratio (the training overhead; issue goal >= 0.3). Rows are given for the
default ``epochs`` and for ``--epochs`` alternatives, since the update costs about
``epochs x (forward + backward)`` over the batch against one forward for collection.
Timings are the best of ``--repeats`` calls after a compile call, interleaved.

Run: ``python bench/mappo.py`` (``--markdown`` adds a table for bench/RESULTS.md,
``--json PATH`` writes the numbers as JSON, see bench/common.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # ``python bench/mappo.py``: import from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import jax

from agents import ActorConfig, CentralCritic, FeudalActor
from bench.common import Report, add_json_arg, best_times, markdown_table, train_timed
from envs.coverage import Coverage
from envs.discovery import Discovery
from feudal_es import mappo

ENVS = {"Coverage": Coverage, "Discovery": Discovery}


def measure(env_name: str, epochs: int, args: argparse.Namespace) -> dict:
    """Rollout-only and training swarm-steps/s of one env and ``epochs`` setting."""
    env = ENVS[env_name]()
    key = jax.random.key(0)
    actor = FeudalActor.from_env(key, env, ActorConfig())
    critic = CentralCritic.from_env(key, env)
    cfg = mappo.MAPPOConfig(num_envs=args.num_envs, num_steps=args.num_steps, epochs=epochs,
                            minibatches=args.minibatches)
    ts = mappo.init_train_state(key, env, actor, critic, cfg)
    fns = {"rollout": mappo.make_rollout(env, cfg), "train": mappo.make_train_step(env, cfg)}
    compile_s, state = {}, {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        state[name] = jax.block_until_ready(fn(ts))[0]
        compile_s[name] = time.perf_counter() - t0

    def runner(name):
        def run():
            state[name] = jax.block_until_ready(fns[name](state[name]))[0]
        return run

    best = best_times({name: runner(name) for name in fns}, args.repeats)
    sps = {name: cfg.batch_size / t for name, t in best.items()}
    return {"env": env_name, "epochs": epochs, "minibatches": cfg.minibatches,
            "rollout_sps": sps["rollout"], "train_sps": sps["train"],
            "ratio": sps["train"] / sps["rollout"],
            "compile_rollout_s": compile_s["rollout"], "compile_train_s": compile_s["train"]}


MERL_CONFIG = dict(  # the MERL setting timed on Discovery (8 agents, vector observations)
    env="feudal_es/Discovery-v0",
    env_kwargs=dict(num_agents=8, max_steps=50, obs_mode="vec", coupling=2),
    mode="merl", grad_steps_per_outer=4, episodes=4,
    es=dict(pop_size=32, sigma=0.1, lr=0.05, optimizer="adam"),
    mappo=dict(num_envs=32, num_steps=50, epochs=4, minibatches=4),
    critic=dict(hidden=[64, 64], layer_norm=False), checkpoint_every=10**6,
    plot_every=10**6, gif=False,
    auto=())  # exactly these settings: no defaults by observation kind


def merl_throughput(seeds: tuple[int, ...], rounds: int) -> dict:
    """MERL training env-steps/s (MAPPO + ES fitness steps) over ``rounds`` timed rounds."""
    import shutil
    import tempfile

    from feudal_es.config import VEC_ACTOR, TrainerConfig
    from feudal_es.trainer import ESTrainer

    actor = dataclasses.replace(VEC_ACTOR, selector_period=10)
    cfg = TrainerConfig(**MERL_CONFIG, actor=actor, n_outer=rounds + 1, seed=seeds[0],
                        seeds=seeds if len(seeds) > 1 else ())
    per_round = (cfg.grad_steps_per_outer * cfg.mappo.batch_size
                 + cfg.es.num_candidates * cfg.episodes * cfg.env_kwargs["max_steps"])
    out = Path(tempfile.mkdtemp(prefix="bench-merl-"))
    try:
        times = train_timed(ESTrainer(cfg, out / "run"))  # every seed in one program
        compile_s, seconds, round_s = times["compile_s"], times["run_s"], times["round_s"]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    steps = rounds * per_round * len(seeds)
    return {"seeds": len(seeds), "rounds": rounds, "env_steps_per_round": per_round,
            "compile_s": compile_s, "seconds": seconds, "round_seconds": round_s,
            "env_steps_per_s": steps / round_s,
            "env_steps_per_s_with_final_writes": steps / seconds,
            "mappo_share": cfg.grad_steps_per_outer * cfg.mappo.batch_size / per_round}


def update_modes(repeats: int) -> list[dict]:
    """One train step with the fused and with the split update, per actor kind."""
    from feudal_es.config import COMPACT_ACTOR, VEC_ACTOR

    rows = []
    for kind, env, actor in (
            ("compact CNN (8x8 maps)", Discovery(num_agents=8, map_size=8), COMPACT_ACTOR),
            ("default CNN (16x16 maps)", Discovery(num_agents=8), ActorConfig()),
            ("MLP (vec)", Discovery(num_agents=8, obs_mode="vec"), VEC_ACTOR)):
        key = jax.random.key(0)
        cfg = mappo.MAPPOConfig(num_envs=16, num_steps=50, epochs=4, minibatches=4)
        ts = mappo.init_train_state(key, env, FeudalActor.from_env(key, env, actor),
                                    CentralCritic.from_env(key, env), cfg)
        fns, compile_s = {}, {}
        for mode in ("fused", "split"):
            fns[mode] = mappo.make_train_step(env, dataclasses.replace(cfg, update=mode))
            t0 = time.perf_counter()
            jax.block_until_ready(fns[mode](ts))
            compile_s[mode] = time.perf_counter() - t0
        best = best_times({m: (lambda f=f, ts=ts: jax.block_until_ready(f(ts)))
                           for m, f in fns.items()}, repeats)
        rows.append({"actor": kind, "fused_s": best["fused"], "split_s": best["split"],
                     "fused_over_split": best["split"] / best["fused"],
                     "compile_fused_s": compile_s["fused"],
                     "compile_split_s": compile_s["split"],
                     "conv_macs": mappo.conv_macs(env.observation_space, actor),
                     "auto": "fused" if mappo.uses_fused_update(cfg, env.observation_space,
                                                                actor) else "split"})
    return rows


def main(argv: list[str] | None = None) -> int:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()  # one JAX CPU device per core, as the trainer's CLI runs
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--epochs", nargs="+", type=int,
                        default=[mappo.MAPPOConfig().epochs, 1])
    parser.add_argument("--minibatches", type=int, default=mappo.MAPPOConfig().minibatches)
    parser.add_argument("--num-envs", type=int, default=mappo.MAPPOConfig().num_envs)
    parser.add_argument("--num-steps", type=int, default=mappo.MAPPOConfig().num_steps)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--merl-rounds", type=int, default=16,
                        help="MERL rounds timed (after one compile round); 0 skips it")
    parser.add_argument("--skip-update-modes", action="store_true")
    add_json_arg(parser)
    args = parser.parse_args(argv)
    report = Report("mappo", args, argv)
    results: dict = {}
    if args.merl_rounds:
        results["merl"] = [merl_throughput(s, args.merl_rounds) for s in ((0,), (0, 1))]
        print(markdown_table(
            ["MERL on Discovery (8 agents, vec obs, MLP executor)", "env steps / round",
             "MAPPO share", "training env-steps/s", "with the run's final writes",
             "compile (s)"], "lrrrrr",
            [(f"{r['seeds']} seed(s) in one program", r["env_steps_per_round"],
              f"{r['mappo_share']:.2f}", f"{r['env_steps_per_s']:.0f}",
              f"{r['env_steps_per_s_with_final_writes']:.0f}",
              f"{r['compile_s']:.0f}") for r in results["merl"]]))
        print("goal: >= 20000 training env-steps/s\n")
    if not args.skip_update_modes:
        results["update_modes"] = update_modes(args.repeats)
        print(markdown_table(
            ["actor", "fused update (s / train step)", "split (s)", "split / fused",
             "compile fused / split (s)", "auto picks"], "lrrrrl",
            [(r["actor"], f"{r['fused_s']:.3f}", f"{r['split_s']:.3f}",
              f"{r['fused_over_split']:.2f}",
              f"{r['compile_fused_s']:.0f} / {r['compile_split_s']:.0f}", r["auto"])
             for r in results["update_modes"]]))
        print()

    print(f"MAPPO train vs rollout: jax {jax.__version__} on {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPU cores, {platform.machine()}; num_envs={args.num_envs}, "
          f"num_steps={args.num_steps}, default ActorConfig, 8 agents")
    rows = [measure(e, ep, args) for e in args.envs for ep in args.epochs]
    head = (f"{'env':10s} {'epochs':>6s} {'rollout sps':>12s} {'train sps':>10s} "
            f"{'ratio':>6s} {'compile r/t (s)':>16s}")
    print(head)
    for r in rows:
        print(f"{r['env']:10s} {r['epochs']:6d} {r['rollout_sps']:12.1f} {r['train_sps']:10.1f} "
              f"{r['ratio']:6.3f} {r['compile_rollout_s']:7.1f}/{r['compile_train_s']:.1f}")
    print("goal: train sps >= 0.3 x rollout sps")
    # The structure of the ratio: a train step = the same collection + `epochs` passes of
    # forward + backward over the batch, so ratio = 1 / (1 + epochs * u) with u = (cost of
    # one update epoch) / (cost of the collection), measured per env and epochs setting.
    for r in rows:
        u = (1.0 / r["ratio"] - 1.0) / r["epochs"]
        print(f"{r['env']:10s} epochs={r['epochs']}: one update epoch costs {u:.1f}x the "
              f"collection; ratio 0.3 would need u <= {(1 / 0.3 - 1) / r['epochs']:.2f}")
    if args.markdown:
        print()
        print(markdown_table(
            ["env", "epochs x minibatches", "rollout-only SPS", "training SPS", "ratio"],
            "llrrr", [(r["env"], f"{r['epochs']} x {r['minibatches']}", f"{r['rollout_sps']:.1f}",
                      f"{r['train_sps']:.1f}", f"{r['ratio']:.3f}") for r in rows]))
    report.write({"runs": rows, **results},
                 {"rollout_sps": "swarm steps/s (num_envs x num_steps per call / s)",
                  "train_sps": "swarm steps/s", "ratio": "train_sps / rollout_sps"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
