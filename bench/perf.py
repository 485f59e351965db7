"""ES-on-env performance: batched generation vs the reference loop, achieved FLOP/s,
population and agent scaling, cold start of ``feudal-es train``.

Each function measures one row family of the table ``python -m bench.all`` writes; run
alone with ``python -m bench.perf`` (add ``--quick`` for smaller settings, ``--json PATH``
for the numbers as JSON, see bench/common.py; stdout is the markdown of
:func:`details_markdown`). All timings are wall-clock seconds, best of a few repeats after
a compile call, on whatever JAX backend is active.

- :func:`es_generation`: one ES generation on Coverage (8 agents, 100-step episode, one
  episode per member) with the trainer's own jitted ``generation`` (ask + vmapped
  population rollouts + tell, one call) against the reference path, ``es.es_step`` with
  a per-member ``eval_fn`` (a jitted one-member rollout called once per member, as the
  reference's host loop does). Also returns XLA's FLOP count of the population rollout
  (``lower().compile().cost_analysis()`` of the full-width vmap; the trainer's chunked
  rollout does the same work) and the rollout's time both as the trainer runs it
  (``TrainerConfig.population_chunk``: 8 members at a time on CPU) and full-width.
- :func:`matmul_flops`: dense float32 matmul FLOP/s in the same process (the anchor).
- :func:`population_scaling` / :func:`agent_scaling`: time per generation at several
  population sizes; time per agent-step of the population rollout at several swarm sizes.
- :func:`cold_start`: seconds from launching ``feudal-es train`` (defaults) to the first
  row of ``metrics.jsonl`` (the first finished generation), with an empty XLA cache and
  with the cache the first launch filled; then once more with an empty cache under
  XLA:CPU's elemental emitters (``ELEMENTAL``, the test suite's flag), each launch's
  third round timed too, to show whether the flag would shorten a user's start without
  slowing the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/perf.py``: import from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import equinox as eqx
import jax
import jax.numpy as jnp

from bench.common import Report, add_json_arg

ROOT = Path(__file__).resolve().parents[1]


def best_of(fn, repeats: int) -> float:
    """Best wall time of ``fn()`` (which must block until its result is ready)."""
    return timed(fn, repeats)[0]


def timed(fn, repeats: int) -> tuple[float, float]:
    """``(best wall time, cores busy)`` of ``repeats`` calls of ``fn()``: cores busy is this
    process's CPU time (user + system) over the wall time of all the calls, the profile
    figure that says whether a computation used one core or all of them."""
    best, cpu0, wall0 = float("inf"), os.times(), time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    cpu1 = os.times()
    busy = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (time.perf_counter() - wall0)
    return best, busy


def _setup(num_agents: int = 8, max_steps: int = 100, actor: dict | None = None,
           pop: int = 64, episodes: int = 1, chunk: int = 0):
    """A trainer config and the pieces of its JAX path (no MAPPO compile); ``rollouts`` is
    the trainer's (chunked as ``population_chunk`` says), ``chunk`` its config field."""
    from agents import FeudalActor
    from feudal_es import es
    from feudal_es.config import TrainerConfig
    from feudal_es.functions import jax_functions
    from feudal_es.resolve import resolve_env
    from feudal_es.rollout import make_population_rollouts, population_chunk
    from feudal_es.theta import selector_theta

    cfg = TrainerConfig(env="feudal_es/Coverage-v0",
                        env_kwargs={"num_agents": num_agents, "max_steps": max_steps},
                        episodes=episodes, es={"pop_size": pop}, actor=actor or {},
                        population_chunk=chunk)
    core = resolve_env(cfg.env, cfg.env_kwargs).core
    actor_ = FeudalActor.from_env(jax.random.key(0), core, cfg.actor)
    state = es.init(selector_theta(actor_), cfg.es)
    rollouts = make_population_rollouts(core, cfg.deterministic_eval, population_chunk(cfg))
    return cfg, core, actor_, state, rollouts, jax_functions(cfg, core)


def es_generation(actor: dict | None = None, loop_generations: int = 1,
                  repeats: int = 3) -> dict[str, Any]:
    """Batched generation vs reference loop on Coverage, pop 64, 8 agents, 100 steps."""
    from feudal_es import es
    from feudal_es.rollout import make_population_rollouts, population_chunk

    cfg, core, actor_, state, rollouts, fns = _setup(actor=actor)
    chunk = population_chunk(cfg)
    key = jax.random.key(1)
    t0 = time.perf_counter()
    jax.block_until_ready(fns.generation(key, state, actor_))
    compile_batched = time.perf_counter() - t0
    batched = best_of(lambda: jax.block_until_ready(fns.generation(key, state, actor_)),
                      repeats)

    member = eqx.filter_jit(rollouts)
    keys = jax.random.split(jax.random.key(2), cfg.episodes)

    def eval_fn(theta):  # the reference's per-member host fitness
        return float(member(actor_, theta[None], keys)[0].mean())

    t0 = time.perf_counter()
    eval_fn(state.mean)
    compile_loop = time.perf_counter() - t0
    theta = state.mean
    member_s, member_busy = timed(lambda: eval_fn(theta), repeats)
    one = jax.jit(lambda a, t, k: rollouts(a, t, k)[0]).lower(actor_, theta[None], keys)
    member_flops = _flops(one.compile()) * core.max_steps

    def loop():
        th = theta
        for k in jax.random.split(key, loop_generations):
            th, _ = es.es_step(th, eval_fn, cfg.es, k)
        return th

    loop_t = best_of(loop, 1) / loop_generations

    thetas = jnp.broadcast_to(state.mean, (cfg.es.num_candidates, state.mean.size))
    # FLOPs from the full-width vmap: the chunked rollout nests the episode scan in the
    # chunk loop, and cost analysis counts each loop body once (same work either way)
    wide = make_population_rollouts(core, cfg.deterministic_eval)
    compiled = jax.jit(lambda a, t, k: wide(a, t, k)[0]).lower(actor_, thetas, keys).compile()
    flops = _flops(compiled) * core.max_steps
    vmap_s = best_of(lambda: jax.block_until_ready(compiled(actor_, thetas, keys)), repeats)
    one_device = jax.jit(lambda a, t, k: rollouts(a, t, k)[0])  # chunked, jax.devices()[0]
    jax.block_until_ready(one_device(actor_, thetas, keys))
    roll1, busy1 = timed(lambda: jax.block_until_ready(one_device(actor_, thetas, keys)),
                         repeats)
    # the trainer's: chunked, and sharded over the devices (one per core on a CPU)
    jax.block_until_ready(fns.fitness(thetas, actor_, keys))
    roll, busy = timed(lambda: jax.block_until_ready(fns.fitness(thetas, actor_, keys)),
                       repeats)
    return {"chunk": chunk, "vmap_s": vmap_s, "pop": int(cfg.es.num_candidates),
            "agents": core.num_agents, "steps": core.max_steps, "batched_s": batched,
            "loop_s": loop_t, "devices": len(jax.devices()),
            "speedup": loop_t / batched, "compile_batched_s": compile_batched,
            "compile_member_s": compile_loop, "rollout_flops": flops, "rollout_s": roll,
            "rollout_busy": busy, "rollout_1dev_s": roll1, "rollout_1dev_busy": busy1,
            "rollout_flops_per_s": flops / roll, "member_s": member_s,
            "member_busy": member_busy,
            "member_flops": member_flops, "member_flops_per_s": member_flops / member_s}


def _flops(compiled: Any) -> float:
    """XLA's FLOP count of a compiled computation (``cost_analysis()['flops']``).

    XLA's cost analysis counts a while-loop body once (it does not know the trip count),
    so for a ``lax.scan`` episode this is the FLOPs of one step (plus the small reset);
    callers multiply by the number of steps."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost.get("flops", float("nan")))


def matmul_flops(n: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of a dense ``[n, n] @ [n, n]`` float32 matmul under jit."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    jax.block_until_ready(mm(a, b))
    return 2.0 * n ** 3 / best_of(lambda: jax.block_until_ready(mm(a, b)), repeats)


def population_scaling(pops=(16, 64, 256), steps: int = 25, actor: dict | None = None,
                       repeats: int = 3, chunk: int = 0) -> list[dict[str, Any]]:
    """Seconds per ES generation (Coverage, 8 agents, ``steps``-step episodes) per
    population size, with the trainer's jitted generation at ``population_chunk=chunk``
    (0: the trainer's default, 8 members at a time on CPU; ``-1``: full-width vmap)."""
    from feudal_es.rollout import population_chunk

    calls, rows = [], []
    for pop in pops:  # compile every size first ...
        cfg, _, actor_, state, _, fns = _setup(actor=actor, pop=pop, max_steps=steps,
                                               chunk=pop if chunk < 0 else chunk)
        key = jax.random.key(1)
        jax.block_until_ready(fns.generation(key, state, actor_))
        calls.append(lambda fns=fns, s=state, a=actor_, k=key:
                     jax.block_until_ready(fns.generation(k, s, a)))
        rows.append({"pop": pop, "steps": steps, "chunk": population_chunk(cfg),
                     "devices": len(jax.devices()), "gen_s": float("inf")})
    for _ in range(repeats):  # ... then time them in turn, so a load change hits them all
        for row, call in zip(rows, calls, strict=True):
            t, busy = timed(call, 1)
            if t < row["gen_s"]:
                row.update(gen_s=t, busy=busy)
    for row in rows:
        row["per_member_ms"] = 1e3 * row["gen_s"] / row["pop"]
    return rows


def agent_scaling(agents=(8, 32, 256), pop: int = 4, steps: int = 25,
                  actor: dict | None = None, repeats: int = 2) -> list[dict[str, Any]]:
    """Microseconds per agent-step of the population rollout (Coverage) per swarm size."""
    rows = []
    for n in agents:
        _, _, actor_, state, rollouts, _ = _setup(num_agents=n, max_steps=steps, actor=actor,
                                                  pop=pop)
        thetas = jnp.broadcast_to(state.mean, (pop, state.mean.size))
        keys = jax.random.split(jax.random.key(2), 1)
        f = jax.jit(lambda a, t, k, r=rollouts: r(a, t, k)[0])
        jax.block_until_ready(f(actor_, thetas, keys))
        t = best_of(lambda f=f, a=actor_, th=thetas, k=keys: jax.block_until_ready(f(a, th, k)),
                    repeats)
        rows.append({"agents": n, "pop": pop, "steps": steps,
                     "us_per_agent_step": 1e6 * t / (pop * steps * n)})
    return rows


ELEMENTAL = "--xla_cpu_use_fusion_emitters=false"  # XLA:CPU's flag the test suite sets
first_rows: list[dict[str, Any]] = []  # the metrics.jsonl rows _first_round saw last


def _first_round(cache_dir: str, out_dir: Path, timeout: float, rows: int = 1,
                 xla_flags: str = "") -> float | None:
    """Seconds from launching ``feudal-es train`` to its first metrics.jsonl row; the
    launch runs on until ``rows`` rows (kept in ``first_rows``) or the timeout."""
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache_dir)
    if xla_flags:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla_flags}".strip()
    cmd = [sys.executable, "-m", "feudal_es.cli", "train", "--out", str(out_dir),
           "--no-progress"]
    metrics = out_dir / "metrics.jsonl"
    t0, first = time.perf_counter(), None
    first_rows.clear()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        while time.perf_counter() - t0 < timeout:
            lines = metrics.read_text().splitlines() if metrics.exists() else []
            lines = [line for line in lines if line.strip()]
            if lines and first is None:
                first = time.perf_counter() - t0
            if len(lines) >= rows or (proc.poll() == 0 and lines):  # or the run ended
                first_rows.extend(json.loads(line) for line in lines[:rows])
                return first
            if proc.poll() is not None:
                raise RuntimeError(f"feudal-es train exited ({proc.returncode}) before "
                                   f"round {rows}: {proc.stderr.read()[-2000:]}")
            time.sleep(0.1)
        return first
    finally:
        proc.kill()
        proc.wait()


def cold_start(timeout: float = 600.0) -> dict[str, float | None]:
    """First-generation latency of ``feudal-es train`` at defaults: empty XLA cache,
    then again with the cache the first launch wrote, then with an empty cache under
    :data:`ELEMENTAL`; the empty-cache launches also report their third round's time."""
    def third_round() -> float | None:
        return first_rows[2].get("round_time") if len(first_rows) > 2 else None

    with tempfile.TemporaryDirectory(prefix="feudal-es-cold-") as tmp:
        cache = str(Path(tmp) / "xla")
        cold = _first_round(cache, Path(tmp) / "run1", timeout, rows=3)
        round_time, steady = (first_rows[0].get("round_time") if first_rows else None,
                              third_round())
        warm = _first_round(cache, Path(tmp) / "run2", timeout) if cold else None
        elem = _first_round(str(Path(tmp) / "xla-elemental"), Path(tmp) / "run3", timeout,
                            rows=3, xla_flags=ELEMENTAL) if cold else None
        elem_steady = third_round() if cold else None
    return {"cold_s": cold, "round_time": round_time, "warm_cache_s": warm,
            "third_round_s": steady, "elemental_cold_s": elem,
            "elemental_third_round_s": elem_steady}


def details_markdown(perf: dict[str, Any]) -> list[str]:
    """The per-measurement details of :func:`main`'s results, as markdown lines."""
    out = ["### ES on Coverage: details (bench/perf.py)", ""]
    g, mm = perf.get("es_generation"), perf.get("matmul_flops_per_s")
    if g:
        out += [
            f"- One ES generation, P={g['pop']}, {g['agents']} agents, {g['steps']} steps, "
            f"default actor: batched {g['batched_s']:.3f} s (compile "
            f"{g['compile_batched_s']:.1f} s), reference loop {g['loop_s']:.3f} s "
            f"({g['member_s'] * 1e3:.0f} ms per member call; compile "
            f"{g['compile_member_s']:.1f} s).",
            f"- XLA cost analysis (scan body x {g['steps']} steps): "
            f"{g['rollout_flops'] / 1e9:.2f} GFLOP per population "
            f"rollout ({g['rollout_s']:.3f} s: {g['rollout_flops_per_s'] / 1e9:.2f} GFLOP/s), "
            f"{g['member_flops'] / 1e9:.3f} GFLOP per one-member rollout "
            f"({g['member_flops_per_s'] / 1e9:.2f} GFLOP/s).",
            f"- The population rollout as the trainer runs it ({_chunk_words(g['chunk'], g['pop'])}"
            f", sharded over {g.get('devices', 1)} CPU device(s)): {g['rollout_s']:.3f} s, "
            f"{g.get('rollout_busy', float('nan')):.2f} cores busy; the same on one device: "
            f"{g.get('rollout_1dev_s', float('nan')):.3f} s, "
            f"{g.get('rollout_1dev_busy', float('nan')):.2f} cores busy; as one full-width vmap "
            f"on one device: {g['vmap_s']:.3f} s; one member alone (the reference loop's "
            f"call): {g.get('member_busy', float('nan')):.2f} cores busy. Cores busy = "
            "process CPU time / wall time (`os.times`), the profile figure behind one JAX CPU "
            "device per core (`feudal_es.devices`)."]
    if mm:
        out.append(f"- Dense float32 matmul 2048 x 2048 under jit: {mm / 1e9:.1f} GFLOP/s.")
    if perf.get("population_scaling"):
        steps = perf["population_scaling"][0]["steps"]
        wide = {r["pop"]: r for r in perf.get("population_scaling_vmap") or []}
        devs = perf["population_scaling"][0].get("devices", 1)
        out += ["", f"Population scaling (8 agents, {steps}-step episodes, one episode per "
                f"member, sharded over {devs} CPU device(s); the trainer's jitted generation "
                "at its default `population_chunk`, and the same generation with each "
                "device's share as one vmap; the sizes timed in turn, best of each):", "",
                "| population | members per chunk | s / generation | ms / member | "
                "cores busy | one vmap per device: s / generation | ms / member |",
                "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in perf["population_scaling"]:
            w = wide.get(r["pop"])
            tail = (f"{w['gen_s']:.3f} | {w['per_member_ms']:.1f}" if w else "n/a | n/a")
            out.append(f"| {r['pop']} | {r['chunk'] or r['pop']} | {r['gen_s']:.3f} | "
                       f"{r['per_member_ms']:.1f} | {r.get('busy', float('nan')):.2f} | "
                       f"{tail} |")
    if perf.get("agent_scaling"):
        r0 = perf["agent_scaling"][0]
        out += ["", f"Agent scaling (population {r0['pop']}, {r0['steps']}-step episodes, "
                "Coverage defaults otherwise):", "",
                "| agents | us / agent-step |", "|---:|---:|"]
        out += [f"| {r['agents']} | {r['us_per_agent_step']:.2f} |"
                for r in perf["agent_scaling"]]
    cs = perf.get("cold_start")
    if cs:
        f = lambda x: "n/a" if x is None else f"{x:.1f} s"
        out += ["", f"Cold start (`feudal-es train --out DIR`, defaults, until the first row "
                f"of metrics.jsonl): empty XLA cache {f(cs['cold_s'])} (of which round 0 "
                f"{f(cs.get('round_time'))}), cache filled by that launch "
                f"{f(cs['warm_cache_s'])}; its third round {f(cs.get('third_round_s'))}. "
                f"With XLA:CPU's elemental emitters (`XLA_FLAGS={ELEMENTAL}`), empty "
                f"cache: {f(cs.get('elemental_cold_s'))}, third round "
                f"{f(cs.get('elemental_third_round_s'))}."]
    return [*out, ""]


def _chunk_words(chunk: int, pop: int) -> str:
    if 0 < chunk < pop:
        return (f"`population_chunk` default: {chunk} members at a time, "
                f"`lax.map(batch_size={chunk})`")
    return "`population_chunk` default: full width, one vmap"


def main(argv: list[str] | None = None) -> int:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()  # one JAX CPU device per core, as the trainer's CLI runs
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller populations / swarms")
    p.add_argument("--skip-cold-start", action="store_true")
    add_json_arg(p)
    args = p.parse_args(argv)
    report = Report("perf", args, argv)
    log = lambda msg: print(f"perf: {msg}", file=sys.stderr, flush=True)
    log("ES generation (batched vs reference loop) and FLOP/s")
    out: dict[str, Any] = {"es_generation": es_generation(),
                           "matmul_flops_per_s": matmul_flops()}
    log("population scaling (the trainer's default population_chunk, then full width)")
    pops = (16, 64) if args.quick else (16, 64, 256)
    out["population_scaling"] = population_scaling(pops)
    out["population_scaling_vmap"] = population_scaling(pops, chunk=-1)
    log("agent scaling")
    out["agent_scaling"] = agent_scaling((8, 32) if args.quick else (8, 32, 256))
    if not args.skip_cold_start:
        log("cold start")
        out["cold_start"] = cold_start()
    print("\n".join(details_markdown(out)))
    report.write(out, {
        "busy": "cores busy: process CPU time / wall time",
        "speedup": "loop_s / batched_s",
        "chunk": "population members per lax.map batch (population_chunk)",
        "rollout_flops": "FLOP of one population rollout (XLA cost analysis)",
        "member_flops": "FLOP of one one-member rollout (XLA cost analysis)",
        "round_time": "seconds of round 0 as metrics.jsonl reports it",
        "third_round_s": "seconds of round 2 (compiled) as metrics.jsonl reports it",
        "elemental_cold_s": f"cold_s with XLA_FLAGS={ELEMENTAL}, its own empty cache"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
