"""MAPPO training throughput vs rollout-only throughput of the same actor and env.

From one run, for Coverage and Discovery at their default sizes (8 agents, 16x16 maps)
with the default actor: swarm-steps per second of

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
import os
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # ``python bench/mappo.py``: import from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # (bench/envs.py shadows envs)

import jax

from agents import ActorConfig, CentralCritic, FeudalActor
from bench.common import Report, add_json_arg, best_times, markdown_table
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--epochs", nargs="+", type=int,
                        default=[mappo.MAPPOConfig().epochs, 1])
    parser.add_argument("--minibatches", type=int, default=mappo.MAPPOConfig().minibatches)
    parser.add_argument("--num-envs", type=int, default=mappo.MAPPOConfig().num_envs)
    parser.add_argument("--num-steps", type=int, default=mappo.MAPPOConfig().num_steps)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    add_json_arg(parser)
    args = parser.parse_args(argv)
    report = Report("mappo", args, argv)

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
    report.write({"runs": rows},
                 {"rollout_sps": "swarm steps/s (num_envs x num_steps per call / s)",
                  "train_sps": "swarm steps/s", "ratio": "train_sps / rollout_sps"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
