"""ES core speed: the reference loop vs the batched generation vs evosax's OpenAI-ES.

One run measures, on the same fitness (64-dim sphere, population 256, 100 generations):

  (a) the reference-style path: ``feudal_es.es.es_step`` in a Python loop, each member
      evaluated by a jitted per-member fitness on the host (what the reference does);
  (b) the batched path: ``feudal_es.es.evolve`` — ask, vmapped fitness, tell, all 100
      generations in one ``lax.scan`` under one ``jit``;
  (c) evosax ``Open_ES`` (antithetic, centered ranks, SGD), its ask/tell in the same kind
      of ``lax.scan`` under one ``jit`` (evosax is a dev/benchmark dependency only).

It prints generations per second for each and the ratios b/a (goal >= 30) and b/c
(goal >= 1). Timings are the best of several repeats after a warm-up compile; the compile
time is reported separately. Path (a) is timed on fewer generations (its cost per
generation is constant). Run: ``python bench/es_core.py`` (add ``--markdown`` for a
table row block to paste into bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import jax.numpy as jnp
import optax

from feudal_es import es
from feudal_es.objectives import batched, sphere_fitness


def best_times(runs: dict, repeats: int) -> dict:
    """Best wall time of each ``run()`` over ``repeats`` rounds.

    The runs are interleaved round by round, so that a load change on a shared machine
    hits every path alike instead of whichever happened to be timed then.
    """
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def compiled(run):
    """Call ``run`` once (compiling it) and return ``(run, compile seconds)``."""
    t0 = time.perf_counter()
    run()
    return run, time.perf_counter() - t0


def reference_loop(theta0, cfg, generations, key):
    member = jax.jit(sphere_fitness)
    keys = jax.random.split(key, generations)

    def run():
        theta = theta0
        for k in keys:
            theta, _ = es.es_step(theta, member, cfg, k)
        return theta

    return compiled(run)


def batched_generation(theta0, cfg, generations, key):
    fitness = batched(sphere_fitness)
    evolve = jax.jit(lambda k, s: es.evolve(k, s, fitness, cfg, generations)[0].mean)
    state = es.init(theta0, cfg)
    return compiled(lambda: evolve(key, state).block_until_ready())


def evosax_open_es(theta0, cfg, generations, key):
    try:
        from evosax.algorithms import Open_ES
    except ImportError:
        return None
    strategy = Open_ES(
        population_size=cfg.num_candidates,
        solution=theta0,
        optimizer=optax.sgd(cfg.lr),
        std_schedule=optax.constant_schedule(cfg.sigma),
    )
    params = strategy.default_params
    loss = jax.vmap(lambda th: -sphere_fitness(th))  # evosax minimizes

    @jax.jit
    def evolve(key):
        state = strategy.init(key, theta0, params)

        def body(state, k):
            k_ask, k_tell = jax.random.split(k)
            pop, state = strategy.ask(k_ask, state, params)
            state, _ = strategy.tell(k_tell, pop, loss(pop), state, params)
            return state, None

        state, _ = jax.lax.scan(body, state, jax.random.split(key, generations))
        return state.mean

    return compiled(lambda: evolve(key).block_until_ready())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--pop", type=int, default=256)
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--loop-generations", type=int, default=20,
                        help="generations timed for the slow path (a); its cost per "
                        "generation is constant, so gen/s is comparable")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    args = parser.parse_args()

    cfg = es.ESConfig(pop_size=args.pop, sigma=0.1, lr=0.05)
    theta0 = jnp.ones(args.dim, jnp.float32)
    key = jax.random.key(0)
    g, g_loop = args.generations, args.loop_generations

    paths = {
        "(a) reference loop es_step, jitted member": (reference_loop, g_loop),
        "(b) batched generation, lax.scan + jit": (batched_generation, g),
    }
    try:
        import evosax  # noqa: F401

        paths["(c) evosax Open_ES, lax.scan + jit"] = (evosax_open_es, g)
    except ImportError:
        print("evosax not installed (pip install -e '.[dev]'): no (c) row")
    runs, compile_s = {}, {}
    for name, (build, gens) in paths.items():
        runs[name], compile_s[name] = build(theta0, cfg, gens, key)
    best = best_times({n: r for n, r in runs.items() if not n.startswith("(a)")}, args.repeats)
    best.update(best_times({n: r for n, r in runs.items() if n.startswith("(a)")}, 2))
    gps = {name: paths[name][1] / best[name] for name in runs}
    final = {name: float(sphere_fitness(runs[name]())) for name in runs}

    print(f"ES core: sphere dim={args.dim}, population={cfg.num_candidates}, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPU cores, {platform.machine()}")
    print(f"start fitness {float(sphere_fitness(theta0)):.3f}")
    header = f"{'path':45s} {'gens':>5s} {'gen/s':>10s} {'compile s':>10s} {'final fitness':>14s}"
    print(header)
    for name in runs:
        print(f"{name:45s} {paths[name][1]:5d} {gps[name]:10.1f} {compile_s[name]:10.2f} "
              f"{final[name]:14.5f}")
    names = list(runs)
    ratio_ba = gps[names[1]] / gps[names[0]]
    ratio_bc = gps[names[1]] / gps[names[2]] if len(names) > 2 else float("nan")
    print(f"b/a = {ratio_ba:.1f}x   (goal >= 30)")
    print(f"b/c = {ratio_bc:.2f}x   (goal >= 1.0)")
    if args.markdown:
        print("\n| path | generations timed | generations/s | compile (s) | final fitness |")
        print("|---|---:|---:|---:|---:|")
        for name in runs:
            print(f"| {name} | {paths[name][1]} | {gps[name]:.1f} | {compile_s[name]:.2f} "
                  f"| {final[name]:.5f} |")
        print(f"\nb/a = **{ratio_ba:.1f}x**, b/c = **{ratio_bc:.2f}x**")
    assert final[names[1]] > float(sphere_fitness(theta0)), "the batched path did not improve"


if __name__ == "__main__":
    main()
