"""``feudal-es`` command line.

Subcommands:
  demo   the bundled default job: ES on a classic benchmark function, with progress
         (replaced by swarm training once the trainer lands).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from tqdm import tqdm

from feudal_es import es
from feudal_es.objectives import OBJECTIVES, batched

OPTIMA = {"sphere": 0.0, "rosenbrock": 1.0, "rastrigin": 0.0}


def _demo(args: argparse.Namespace) -> int:
    cfg = es.ESConfig(pop_size=args.pop, sigma=args.sigma, lr=args.lr, kind=args.kind,
                      elite_frac=args.elite_frac, optimizer=args.optimizer)
    fitness = OBJECTIVES[args.fn]
    theta0 = jnp.zeros(args.dim).at[0].set(-1.0)
    chunk = max(1, min(args.chunk, args.generations))
    step = jax.jit(lambda k, s: es.evolve(k, s, batched(fitness), cfg, chunk))
    state = es.init(theta0, cfg)
    key = jax.random.key(args.seed)
    print(f"feudal-es demo: {cfg.kind.upper()} ({cfg.optimizer}) on {args.fn}, dim={args.dim}, "
          f"population={cfg.num_candidates}, {args.generations} generations")
    print(f"start: fitness {float(fitness(theta0)):.4f}")
    t0 = time.perf_counter()
    done = 0
    with tqdm(total=args.generations, unit="gen", dynamic_ncols=True) as bar:
        while done < args.generations:
            key, sub = jax.random.split(key)
            state, info = step(sub, state)
            done += chunk
            bar.update(chunk)
            bar.set_postfix(best=f"{float(info['best_fitness'][-1]):.4g}",
                            mean=f"{float(info['mean_fitness'][-1]):.4g}",
                            sigma=f"{float(state.sigma):.3g}")
    elapsed = time.perf_counter() - t0
    final = float(fitness(state.mean))
    distance = float(jnp.linalg.norm(state.mean - OPTIMA[args.fn]))
    print(f"result: fitness {final:.5f} (optimum 0), distance to optimum {distance:.4f}, "
          f"{done} generations in {elapsed:.1f}s ({done / elapsed:.0f} gen/s incl. compile)")
    print("theta:", [round(float(x), 4) for x in state.mean[:8]])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="feudal-es", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="ES on a benchmark function (the bundled default job)")
    demo.add_argument("--fn", choices=sorted(OBJECTIVES), default="rosenbrock")
    demo.add_argument("--dim", type=int, default=4)
    demo.add_argument("--generations", type=int, default=5000)
    demo.add_argument("--chunk", type=int, default=250, help="generations per jitted call")
    demo.add_argument("--pop", type=int, default=64)
    demo.add_argument("--sigma", type=float, default=0.02)
    demo.add_argument("--lr", type=float, default=0.02)
    demo.add_argument("--kind", choices=["nes", "cem"], default="nes")
    demo.add_argument("--elite-frac", type=float, default=0.25)
    demo.add_argument("--optimizer", choices=["sgd", "adam"], default="adam")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError) as err:  # configuration errors: say which, no traceback
        print(f"feudal-es {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
