"""Gymnasium vector env throughput: ``SwarmVectorEnv`` (vmap) vs ``SyncVectorEnv`` vs the core.

    python -m bench.gym_vector                   # Coverage, 1024 vs 16 copies
    python -m bench.gym_vector --steps 5 --repeats 1 --env Dispersion
    python -m bench.gym_vector --json out.json   # also the numbers as JSON (bench/common.py)

What is measured, env-steps/s (one env step = one step of one copy), all three timed
interleaved in one run (best of ``--repeats``, compile excluded by a warm-up):

- ``vector``: ``gymnasium.make_vec(id, num_envs=--num-envs,
  vectorization_mode="vector_entry_point")``, i.e. :class:`envs.gym_vector.SwarmVectorEnv`:
  numpy actions in, numpy observations / rewards / infos out, autoreset included.
- ``sync``: gymnasium's ``SyncVectorEnv`` of the same id (``vectorization_mode="sync"``,
  ``--sync-envs`` copies: a Python loop over single ``SwarmGymEnv`` copies, so its rate
  per copy does not grow with the count).
- ``core``: the ceiling, the raw ``jit(vmap(env.step))`` of the functional core at
  ``--num-envs`` copies, called from Python once per step with the actions and keys
  already on the device and nothing brought back to the host. (No reset branch: the
  vector env computes its autoreset only on steps after an episode ended, ``lax.cond``,
  i.e. once per ``max_steps`` steps.)
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/gym_vector.py``: import from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import gymnasium as gym
import jax
import numpy as np

import envs
from bench.common import Report, add_json_arg, best_times, cpu_name, markdown_table

ACTION_SETS = 4  # distinct pre-drawn action batches, cycled (no sampling in the timed loop)


def vector_loop(venv: gym.vector.VectorEnv, actions: list[np.ndarray], steps: int) -> None:
    """``steps`` vector-env steps with pre-drawn numpy actions (outputs reach numpy)."""
    for i in range(steps):
        venv.step(actions[i % len(actions)])


def core_loop(num_envs: int, core: envs.SwarmEnv, seed: int = 0):
    """``run(steps)``: the raw ``jit(vmap(env.step))`` at ``num_envs`` copies, from Python
    once per step, on-device actions, blocking once at the end."""
    step = jax.jit(jax.vmap(core.step))
    keys = jax.random.split(jax.random.key(seed), num_envs)
    _, state = jax.jit(jax.vmap(core.reset))(keys)
    acts = [jax.random.uniform(jax.random.key(i), (num_envs, core.num_agents, 2),
                               minval=-1.0, maxval=1.0) for i in range(ACTION_SETS)]
    step_keys = [jax.random.split(jax.random.key(seed + 1 + i), num_envs)
                 for i in range(ACTION_SETS)]  # pre-split: no key ops in the timed loop
    carry = {"state": state}

    def run(steps: int) -> None:
        state, out = carry["state"], None
        for i in range(steps):
            _, state, out = step(step_keys[i % ACTION_SETS], state, acts[i % ACTION_SETS])
        jax.block_until_ready((state, out))
        carry["state"] = state

    return run


def measure(env_name: str, num_envs: int, sync_envs: int, steps: int, repeats: int,
            env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """env-steps/s of the three paths (see the module docstring) and their ratios."""
    env_id = envs.gym_registration.gym_env_id(env_name, "Swarm")
    env_kwargs = env_kwargs or {}
    t0 = time.perf_counter()
    envs.register()  # the bundled Gymnasium ids (importing envs registers nothing)
    venv = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                        **env_kwargs)
    sync = gym.make_vec(env_id, num_envs=sync_envs, vectorization_mode="sync", **env_kwargs)
    rng = np.random.default_rng(0)
    draw = lambda v: [rng.uniform(-1, 1, v.action_space.shape).astype(np.float32)
                      for _ in range(ACTION_SETS)]
    act_v, act_s = draw(venv), draw(sync)
    core = venv.unwrapped.env
    core_run = core_loop(num_envs, core)
    venv.reset(seed=0)
    sync.reset(seed=0)
    vector_loop(venv, act_v, 2)  # warm-up: compile step (and its autoreset branch)
    vector_loop(sync, act_s, 2)
    core_run(2)
    warm_s = time.perf_counter() - t0
    best = best_times({"vector": lambda: vector_loop(venv, act_v, steps),
                       "sync": lambda: vector_loop(sync, act_s, steps),
                       "core": lambda: core_run(steps)}, repeats)
    rate = {"vector": num_envs * steps / best["vector"], "sync": sync_envs * steps / best["sync"],
            "core": num_envs * steps / best["core"]}
    venv.close()
    sync.close()
    return {"env": env_name, "env_id": env_id, "agents": int(core.num_agents),
            "num_envs": num_envs, "sync_envs": sync_envs, "steps": steps,
            "vector_env_steps_per_s": rate["vector"], "sync_env_steps_per_s": rate["sync"],
            "core_env_steps_per_s": rate["core"],
            "vector_over_sync": rate["vector"] / rate["sync"],
            "vector_over_core": rate["vector"] / rate["core"],
            "vector_step_s": best["vector"] / steps, "sync_step_s": best["sync"] / steps,
            "core_step_s": best["core"] / steps, "warmup_s": warm_s}


def summary_rows(doc: dict[str, Any]) -> list[Any]:
    """bench/all.py's rows: vector env vs SyncVectorEnv, and vs the core's ceiling."""
    from bench.all import Row, fmt_n

    r = doc["results"]
    head = f"Gymnasium vector env, {r['env']} ({r['agents']} agents)"
    return [
        Row(f"{head}: `make_vec` vmap ({r['num_envs']} copies) vs `SyncVectorEnv` "
            f"({r['sync_envs']} copies), env-steps/s", fmt_n(r["vector_env_steps_per_s"]),
            fmt_n(r["sync_env_steps_per_s"]), r["vector_over_sync"], "-", None),
        Row(f"{head}: `make_vec` vmap vs raw `jit(vmap(env.step))` of the core, "
            f"{r['num_envs']} copies (the ceiling), env-steps/s",
            fmt_n(r["vector_env_steps_per_s"]), fmt_n(r["core_env_steps_per_s"]),
            r["vector_over_core"], "-", None),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="Coverage", choices=sorted(envs.BUNDLED_ENVS))
    p.add_argument("--num-envs", type=int, default=1024, help="copies of the vector env")
    p.add_argument("--sync-envs", type=int, default=16, help="copies of the SyncVectorEnv")
    p.add_argument("--steps", type=int, default=20, help="vector steps per timed run")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per path (best kept)")
    add_json_arg(p)
    args = p.parse_args(argv)
    report = Report("gym_vector", args, argv)
    print(f"# Gymnasium vector env benchmark, {datetime.date.today()}, {cpu_name()} "
          f"({os.cpu_count()} cores), jax {jax.__version__} on {jax.default_backend()}, "
          f"gymnasium {gym.__version__}")
    print(f"# {args.steps} steps per timed run, best of {args.repeats}, interleaved; "
          "env-steps/s = copies x steps / s (compile excluded)")
    print(f"# command: {report.command}")
    r = measure(args.env, args.num_envs, args.sync_envs, args.steps, args.repeats)
    print()
    print(markdown_table(
        ["path", "copies", "env-steps/s", "s per step", "vs SyncVectorEnv", "vs core"],
        "lrrrrr",
        [("`make_vec` vmap (`SwarmVectorEnv`)", r["num_envs"],
          f"{r['vector_env_steps_per_s']:,.0f}", f"{r['vector_step_s']:.4f}",
          f"{r['vector_over_sync']:.1f}x", f"{r['vector_over_core']:.2f}x"),
         ("`SyncVectorEnv` (Python loop)", r["sync_envs"], f"{r['sync_env_steps_per_s']:,.0f}",
          f"{r['sync_step_s']:.4f}", "1x",
          f"{r['sync_env_steps_per_s'] / r['core_env_steps_per_s']:.3f}x"),
         ("raw `jit(vmap(env.step))` of the core (ceiling)", r["num_envs"],
          f"{r['core_env_steps_per_s']:,.0f}", f"{r['core_step_s']:.4f}",
          f"{r['core_env_steps_per_s'] / r['sync_env_steps_per_s']:.1f}x", "1x")]))
    print(f"\n{r['env']}, {r['agents']} agents, default size otherwise; warm-up (compile) "
          f"{r['warmup_s']:.1f} s")
    report.write(r, units={"vector_over_sync": "ratio", "vector_over_core": "ratio"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
