"""ES core speed: the reference loop vs the batched generation vs evosax's OpenAI-ES.

One run measures, on the same fitness (64-dim sphere, population 256, 100 generations):

  (a) the reference-style path: ``feudal_es.es.es_step`` in a Python loop, each member
      evaluated by a jitted per-member fitness on the host (what the reference does);
  (b) the batched path: ``feudal_es.es.evolve`` — ask, vmapped fitness, tell, all 100
      generations in one ``lax.scan`` under one ``jit``;
  (c) evosax ``Open_ES`` (antithetic, centered ranks, SGD), its ask/tell in the same kind
      of ``lax.scan`` under one ``jit`` (evosax: the ``evosax`` extra, in ``dev``);
  (d) the same evosax ``Open_ES`` through our loop (``ESConfig(kind="evosax:Open_ES")``,
      path (b)'s ``evolve``): what plugging a strategy in costs.

It prints generations per second for each and the ratios b/a (goal >= 30), b/c
(goal >= 1) and c/d, our loop's time over evosax's own for one strategy (goal <= 1.1).
Timings are the best of several repeats after a warm-up compile; the compile time is
reported separately. Path (a) is timed on fewer generations (its cost per
generation is constant). Run: ``python bench/es_core.py`` (add ``--markdown`` for a
table row block to paste into bench/RESULTS.md, ``--json PATH`` for the numbers as JSON,
see bench/common.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # ``python bench/es_core.py``: import from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import jax
import jax.numpy as jnp
import optax

from bench.common import Report, add_json_arg, best_times, markdown_table
from feudal_es import es
from feudal_es.objectives import batched, sphere_fitness


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


def evosax_through_our_loop(theta0, cfg, generations, key):
    return batched_generation(theta0, dataclasses.replace(cfg, kind="evosax:Open_ES"),
                              generations, key)


def main(argv: list[str] | None = None) -> int:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()  # one JAX CPU device per core, as the trainer's CLI runs
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--pop", type=int, default=256)
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--loop-generations", type=int, default=20,
                        help="generations timed for the slow path (a); its cost per "
                        "generation is constant, so gen/s is comparable")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    add_json_arg(parser)
    args = parser.parse_args(argv)
    report = Report("es_core", args, argv)

    cfg = es.ESConfig(pop_size=args.pop, sigma=0.1, lr=0.05)
    theta0 = jnp.ones(args.dim, jnp.float32)
    key = jax.random.key(0)
    g, g_loop = args.generations, args.loop_generations

    # id: (label, build, generations timed)
    paths = {
        "loop": ("(a) reference loop es_step, jitted member", reference_loop, g_loop),
        "batched": ("(b) batched generation, lax.scan + jit", batched_generation, g),
    }
    try:
        import evosax  # noqa: F401

        paths["evosax"] = ("(c) evosax Open_ES, lax.scan + jit", evosax_open_es, g)
        paths["ours_evosax"] = ("(d) evosax Open_ES through our loop", evosax_through_our_loop,
                                g)
    except ImportError:
        print("evosax not installed (pip install -e '.[dev]'): no (c) row")
    runs, compile_s = {}, {}
    for name, (_, build, gens) in paths.items():
        runs[name], compile_s[name] = build(theta0, cfg, gens, key)
    best = best_times({n: r for n, r in runs.items() if n != "loop"}, args.repeats)
    best.update(best_times({"loop": runs["loop"]}, 2))
    gps = {name: paths[name][2] / best[name] for name in runs}
    final = {name: float(sphere_fitness(runs[name]())) for name in runs}

    print(f"ES core: sphere dim={args.dim}, population={cfg.num_candidates}, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}, "
          f"{os.cpu_count()} CPU cores, {platform.machine()}")
    print(f"start fitness {float(sphere_fitness(theta0)):.3f}")
    header = f"{'path':45s} {'gens':>5s} {'gen/s':>10s} {'compile s':>10s} {'final fitness':>14s}"
    print(header)
    for name in runs:
        print(f"{paths[name][0]:45s} {paths[name][2]:5d} {gps[name]:10.1f} "
              f"{compile_s[name]:10.2f} {final[name]:14.5f}")
    ratio_ba = gps["batched"] / gps["loop"]
    ratio_bc = gps["batched"] / gps["evosax"] if "evosax" in gps else float("nan")
    ratio_cd = gps["evosax"] / gps["ours_evosax"] if "evosax" in gps else float("nan")
    print(f"b/a = {ratio_ba:.1f}x   (goal >= 30)")
    print(f"b/c = {ratio_bc:.2f}x   (goal >= 1.0)")
    print(f"c/d = {ratio_cd:.2f}x   (our loop's time / evosax's own, one strategy; "
          "goal <= 1.1)")
    if args.markdown:
        print()
        print(markdown_table(
            ["path", "generations timed", "generations/s", "compile (s)", "final fitness"],
            "lrrrr", [(paths[n][0], paths[n][2], f"{gps[n]:.1f}", f"{compile_s[n]:.2f}",
                       f"{final[n]:.5f}") for n in runs]))
        print(f"\nb/a = **{ratio_ba:.1f}x**, b/c = **{ratio_bc:.2f}x**, "
              f"c/d = **{ratio_cd:.2f}x**")
    assert final["batched"] > float(sphere_fitness(theta0)), "the batched path did not improve"
    report.write(
        {"start_fitness": float(sphere_fitness(theta0)),
         "paths": {n: {"label": paths[n][0], "generations": paths[n][2],
                       "generations_per_s": gps[n], "compile_s": compile_s[n],
                       "final_fitness": final[n]} for n in runs}},
        {"final_fitness": "sphere fitness -|theta|^2, higher is better (optimum 0)"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
