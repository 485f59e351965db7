"""Every benchmark in one run, summarised as one table of ratios in ``bench/RESULTS.md``.

    python -m bench.all            # or: make bench   (about 10-20 min on 2 CPU cores)
    python -m bench.all --quick    # smaller settings, for a smoke run
    python -m bench.all --only perf   # rerun one part; the others' rows are carried over

Runs ``bench/es_core.py``, ``bench/envs.py`` and ``bench/mappo.py`` as subprocesses (their
own ``--markdown`` output is kept verbatim) and the ES-on-env measurements of
``bench/perf.py`` in this process, then rewrites the block between the
``<!-- bench/all.py -->`` markers at the top of ``bench/RESULTS.md``: the summary table
(each row a ratio whose two sides were measured in this run), the shortfalls with their
measured causes, and the raw outputs. The hand-written per-script sections below the block
are left as they are. The machine's load average is recorded before and after, since the
numbers are only as good as the share of the CPU the run got. With ``--only``, the parts
not rerun keep the raw outputs of the previous block (their rows are rebuilt from them and
marked with the date of the run that measured them).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- bench/all.py: begin -->", "<!-- bench/all.py: end -->"


# ---------------------------------------------------------------------------------------
# the other scripts, as subprocesses
# ---------------------------------------------------------------------------------------
def run_script(module: str, args: list[str], timeout: float) -> tuple[str, float]:
    """stdout of ``python -m bench.<module> args`` (stderr on failure) and its seconds."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", f"bench.{module}", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"(timed out after {timeout:.0f} s)", time.perf_counter() - t0
    out = proc.stdout
    if proc.returncode != 0:
        out += f"\n(exit {proc.returncode})\n{proc.stderr[-3000:]}"
    return out, time.perf_counter() - t0


def md_tables(text: str) -> list[list[dict[str, str]]]:
    """Every markdown table in ``text`` as a list of ``{header: cell}`` rows."""
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.match(r"^\|[\s:|-]+\|$", lines[i + 1].strip()):
            head = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                rows.append(dict(zip(head, cells, strict=False)))
                i += 1
            tables.append(rows)
        else:
            i += 1
    return tables


def num(text: str | None) -> float | None:
    """First number in a cell (``"1,234"``, ``"310.8x"``, ``"**1.11x**"``), or None."""
    if text is None:
        return None
    m = re.search(r"-?\d[\d,]*\.?\d*(?:e-?\d+)?", text)
    return float(m.group(0).replace(",", "")) if m else None


def find(tables, header: str) -> list[dict[str, str]]:
    """Rows of the first table having a column whose name starts with ``header``."""
    for t in tables:
        if t and any(k.startswith(header) for k in t[0]):
            return t
    return []


def col(row: dict[str, str], header: str) -> str | None:
    return next((v for k, v in row.items() if k.startswith(header)), None)


# ---------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------
class Table:
    """Rows of: what | ours | anchor | ratio | goal | status."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []
        self.short: list[tuple[str, str]] = []  # (row, cause) of unmet goals

    def add(self, what: str, ours: str, anchor: str, ratio: float | None, goal: str,
            met: bool | None, cause: str = "") -> None:
        status = "-" if met is None else ("met" if met else "**not met**")
        r = "n/a" if ratio is None else (f"{ratio:.3g}x" if ratio < 1000 else f"{ratio:,.0f}x")
        self.rows.append((what, ours, anchor, r, goal, status))
        if met is False:
            self.short.append((what, cause))

    def markdown(self) -> str:
        out = ["| what | ours | anchor | ratio | goal | status |", "|---|---:|---:|---:|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(out)


def fmt_s(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}g} s"


def es_core_rows(t: Table, out: str) -> None:
    rows = find(md_tables(out), "path")
    gps = {r["path"][:3]: num(col(r, "generations/s")) for r in rows}
    a, b, c = gps.get("(a)"), gps.get("(b)"), gps.get("(c)")
    t.add("ES core, sphere 64-D, P=256: batched `evolve` vs reference loop `es_step` "
          "(generations/s)", f"{b:,.1f}" if b else "n/a", f"{a:,.1f}" if a else "n/a",
          b / a if a and b else None, ">= 30x", (b / a >= 30) if a and b else None)
    t.add("ES core vs evosax `Open_ES`, same problem (generations/s)",
          f"{b:,.1f}" if b else "n/a", f"{c:,.1f}" if c else "n/a",
          b / c if b and c else None, ">= 1x", (b / c >= 1) if b and c else None,
          f"the two are within {abs(1 - b / c) * 100 if b and c else 0:.0f}% of each other, "
          "inside the timing noise of this loaded machine (they are timed interleaved, best "
          "of several; per generation both are bound by the same noise sampling, ranking "
          "and update ops)")


def envs_rows(t: Table, out: str) -> None:
    tables = md_tables(out)
    for r in find(tables, "ours vs VMAS"):
        name = col(r, "ours vs VMAS") or "?"
        vmas, ours = num(col(r, "VMAS env-steps/s")), num(col(r, "ours vec"))
        goal = col(r, "goal") or ""
        g = num(goal)
        ratio = ours / vmas if ours and vmas else None
        t.add(f"env throughput, 1024 envs, vector obs: {name} (env-steps/s)",
              f"{ours:,.0f}" if ours else "n/a", f"{vmas:,.0f}" if vmas else "n/a", ratio,
              f">= {g:g}x" if g else goal, (ratio >= g) if ratio and g else None,
              "see the Envs section")
    for r in find(tables, "PettingZoo adapter"):
        name = col(r, "PettingZoo adapter") or "?"
        wall, floor = num(col(r, "env-steps/s")), num(col(r, "floor"))
        goal = col(r, "goal") or ""
        g = num(goal)
        t.add(f"PettingZoo adapter, 1 env, {name} (env-steps/s) vs its floor (bare jitted "
              "`env.step` from Python)", f"{wall:,.0f}" if wall else "n/a",
              f"{floor:,.0f}" if floor else "n/a", wall / floor if wall and floor else None,
              f">= {g:,.0f} env-steps/s" if g else "-",
              (wall >= g) if (g and wall) else None,
              "its floor, one jitted env.step called from Python, is itself below the goal "
              "on this machine (see the Envs section)")


def mappo_rows(t: Table, out: str) -> None:
    seen = set()
    for r in find(md_tables(out), "rollout-only SPS"):
        env = r.get("env")
        if env in seen:  # the first row per env is the default epochs
            continue
        seen.add(env)
        roll, train = num(col(r, "rollout-only SPS")), num(col(r, "training SPS"))
        ratio = train / roll if roll and train else None
        t.add(f"MAPPO on {env}, epochs x minibatches {col(r, 'epochs')}: training SPS vs "
              "rollout-only SPS", f"{train:,.1f}" if train else "n/a",
              f"{roll:,.1f}" if roll else "n/a", ratio, ">= 0.3x",
              (ratio >= 0.3) if ratio else None,
              "the CNN weight gradient dominates on CPU (see the MAPPO section)")


def perf_rows(t: Table, perf: dict[str, Any], notes: list[str]) -> None:
    g = perf.get("es_generation")
    mm = perf.get("matmul_flops")
    if g:
        member = g.get("member_flops_per_s")
        one = g["rollout_flops"] / g["rollout_1dev_s"] if g.get("rollout_1dev_s") else None
        cause = (f"the gain is bounded by the {os.cpu_count()} CPU cores. The reference loop "
                 f"runs one member at a time: {member / 1e9:.1f} GFLOP/s "
                 f"({100 * member / mm:.0f}% of the dense-matmul anchor), "
                 f"{g.get('member_busy', float('nan')):.2f} cores busy. Batching the population "
                 f"on one device gives {one / 1e9:.1f} GFLOP/s "
                 f"({g['rollout_1dev_busy']:.2f} cores busy: XLA runs one device's small ops "
                 f"on one thread); the trainer shards it over {g['devices']} CPU devices, "
                 f"{g['rollout_flops_per_s'] / 1e9:.1f} GFLOP/s with "
                 f"{g['rollout_busy']:.2f} cores busy. So batching gains "
                 f"{one / member:.2f}x and the cores {g['rollout_flops_per_s'] / one:.2f}x; "
                 "the loop loses only one dispatch per member, small against a 100-step "
                 "episode. Upper bound on this CPU: even at the dense-matmul rate the "
                 f"generation's {g['rollout_flops'] / 1e9:.0f} GFLOP of rollouts take "
                 f"{g['rollout_flops'] / mm:.2f} s, {g['loop_s'] * mm / g['rollout_flops']:.1f}x "
                 "under the loop, because the loop already runs at "
                 f"{100 * member / mm:.0f}% of that rate. 30x needs parallel hardware the "
                 "loop cannot use (a GPU, not lent to this task)"
                 if member and mm and one else "")
        t.add(f"ES generation, Coverage, P={g['pop']}, {g['agents']} agents, {g['steps']}-step "
              "episode: batched jitted `generation` vs reference loop `es_step` (s/generation)",
              fmt_s(g["batched_s"]), fmt_s(g["loop_s"]), g["speedup"], ">= 30x",
              g["speedup"] >= 30, cause)
    if g and mm:
        frac = g["rollout_flops_per_s"] / mm
        t.add(f"achieved FLOP/s of the population rollout (XLA cost analysis, "
              f"{g['rollout_flops'] / 1e9:.1f} GFLOP per call) vs dense f32 matmul "
              "(GFLOP/s)", f"{g['rollout_flops_per_s'] / 1e9:.2f}", f"{mm / 1e9:.1f}", frac,
              ">= 0.25x", frac >= 0.25, perf.get("flops_cause", ""))
    rows = perf.get("population_scaling") or []
    if len(rows) >= 2:
        base = rows[0]
        for r in rows[1:]:
            lin = r["pop"] / base["pop"]
            ratio = (r["gen_s"] / base["gen_s"]) / lin
            t.add(f"population scaling: s/generation at P={r['pop']} vs P={base['pop']} x "
                  f"{lin:g} (linear)", fmt_s(r["gen_s"]), fmt_s(base["gen_s"] * lin), ratio,
                  "<= 1.2x", ratio <= 1.2, perf.get("scaling_cause", ""))
    rows = perf.get("agent_scaling") or []
    for r in rows:
        t.add(f"agent scaling: population rollout, {r['agents']} agents "
              f"(us per agent-step; anchor: {rows[0]['agents']} agents)",
              f"{r['us_per_agent_step']:.2f}", f"{rows[0]['us_per_agent_step']:.2f}",
              r["us_per_agent_step"] / rows[0]["us_per_agent_step"], "(reported)", None)
    cs = perf.get("cold_start")
    if cs:
        cold = cs.get("cold_s")
        t.add("cold start: `feudal-es train` (defaults) launch to first finished generation, "
              "empty XLA cache (s) vs the 60 s goal", fmt_s(cold), "60 s",
              cold / 60 if cold else None, "<= 1x (<= 60 s)",
              (cold <= 60) if cold else False, perf.get("cold_cause", ""))
        warm = cs.get("warm_cache_s")
        t.add("cold start again, XLA cache filled by the first launch (s)", fmt_s(warm), "60 s",
              warm / 60 if warm else None, "(reported)", None)


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------
def measure_perf(quick: bool, skip_cold: bool, log) -> dict[str, Any]:
    from bench import perf

    out: dict[str, Any] = {}
    log("perf: ES generation (batched vs reference loop) and FLOP/s")
    out["es_generation"] = perf.es_generation()
    out["matmul_flops"] = perf.matmul_flops()
    log("perf: population scaling (the trainer's default population_chunk, then full width)")
    pops = (16, 64) if quick else (16, 64, 256)
    out["population_scaling"] = perf.population_scaling(pops)
    out["population_scaling_vmap"] = perf.population_scaling(pops, chunk=-1)
    log("perf: agent scaling")
    out["agent_scaling"] = perf.agent_scaling((8, 32) if quick else (8, 32, 256))
    if not skip_cold:
        log("perf: cold start")
        out["cold_start"] = perf.cold_start()
    g, mm = out["es_generation"], out["matmul_flops"]
    how = (f"{g['chunk']} members at a time (`lax.map(batch_size={g['chunk']})`)"
           if 0 < g["chunk"] < g["pop"] else "one full-width vmap")
    out["flops_cause"] = (
        f"one member alone runs at {g['member_flops_per_s'] / 1e9:.1f} GFLOP/s "
        f"({100 * g['member_flops_per_s'] / mm:.0f}% of the matmul anchor), the {g['pop']}-member "
        f"population as the trainer runs it, {how}, at {g['rollout_flops_per_s'] / 1e9:.1f} "
        f"GFLOP/s, as one full-width vmap at {g['rollout_flops'] / g['vmap_s'] / 1e9:.1f} "
        "GFLOP/s (its activations no longer fit the CPU caches); the rest of the gap to the "
        "matmul is the small, memory-bound convolutions (3 input channels, 16 x 16 maps) and "
        "the env's gathers, which no batching turns into matmul-shaped work on a CPU.")
    sc, wide = out["population_scaling"], out["population_scaling_vmap"]
    out["scaling_cause"] = (
        f"cost per member with the trainer's default chunk ({sc[-1]['chunk']} members): "
        + ", ".join(f"{r['per_member_ms']:.1f} ms at P={r['pop']} ({r['busy']:.2f} cores "
                    "busy)" for r in sc)
        + "; with each device's share as one vmap: "
        + ", ".join(f"{r['per_member_ms']:.1f} ms" for r in wide)
        + " (the sizes timed in turn, best of each).")
    cs = out.get("cold_start") or {}
    if cs.get("cold_s"):
        out["cold_cause"] = (
            f"compilation dominates: of {cs['cold_s']:.0f} s, the first round itself took "
            f"{cs.get('round_time') or float('nan'):.0f} s (it compiles MAPPO's train step, "
            "the ES generation and the selector evaluation, then runs them); with the XLA "
            f"cache filled the same launch took {cs.get('warm_cache_s') or float('nan'):.0f}"
            f" s. In-process, the ES generation alone compiled in "
            f"{g['compile_batched_s']:.0f} s here, and one default-size generation (16 "
            "members x 4 episodes x 100 steps with the default actor) runs for about "
            f"{g['rollout_s'] * 4 * 16 / g['pop']:.0f} s at this run's speed.")
    return out


def render(table: Table, sections: list[tuple[str, str]], header: str, notes: list[str]
           ) -> str:
    parts = [BEGIN, "## Summary (regenerated by `python -m bench.all`)", "", header, "",
             table.markdown(), ""]
    parts += ["GPU: no GPU lent to this task; the GPU rows are left empty, not guessed.", ""]
    if table.short:
        parts += ["### Goals not met, and why (from this run's measurements)", ""]
        parts += [f"- **{what}**: {cause}" if cause else f"- **{what}**"
                  for what, cause in table.short]
        parts.append("")
    parts += notes
    for title, body in sections:
        parts += [f"<details><summary>{title}</summary>", "", "```", body.strip(), "```", "",
                  "</details>", ""]
    parts.append(END)
    return "\n".join(parts) + "\n"


def write_results(block: str) -> None:
    old = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + block + old[old.index(END) + len(END) + 1:]
    else:
        lines = old.splitlines(keepends=True)
        head = lines[0] if lines and lines[0].startswith("# ") else "# Benchmark results\n"
        rest = "".join(lines[1:]) if lines and lines[0].startswith("# ") else old
        new = head + "\n" + block + rest
    RESULTS.write_text(new)


PARTS = ["es_core", "envs", "mappo", "perf"]
SECTION = re.compile(r"<details><summary>bench/(\w+)\.py ?(.*?) \(stdout, (\d+) s(?:, run "
                     r"([^)]*))?\)</summary>\n\n```\n(.*?)\n```\n\n</details>", re.S)


def previous_outputs() -> dict[str, tuple[str, str, float, str]]:
    """The raw script outputs kept in the current block of RESULTS.md:
    ``{name: (args, stdout, seconds, date of the run that measured it)}``."""
    old = RESULTS.read_text() if RESULTS.exists() else ""
    if BEGIN not in old or END not in old:
        return {}
    block = old[old.index(BEGIN):old.index(END)]
    m = re.search(r"^Run (\d{4}-\d\d-\d\d \d\d:\d\d)", block, re.M)
    date = m.group(1) if m else "unknown date"
    return {n: (a, body, float(secs), when or date)
            for n, a, secs, when, body in SECTION.findall(block)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller settings (smoke run)")
    p.add_argument("--skip", nargs="*", default=[], choices=["es_core", "envs", "mappo",
                                                             "perf", "cold_start"])
    p.add_argument("--only", nargs="+", default=None, choices=PARTS,
                   help="run only these parts; the rows of the others are rebuilt from the "
                   "raw outputs kept in the previous block (marked with their run's date)")
    p.add_argument("--timeout", type=float, default=900, help="per script, seconds")
    p.add_argument("--no-write", action="store_true", help="print instead of writing")
    args = p.parse_args(argv)
    carried: dict[str, tuple[str, str, float, str]] = {}
    if args.only is not None:
        args.skip = sorted(set(args.skip) | (set(PARTS) - set(args.only)))
        carried = {n: v for n, v in previous_outputs().items() if n in args.skip}
    t_start = time.perf_counter()
    now = datetime.datetime.now().strftime('%Y-%m-%d %H:%M')
    load0 = os.getloadavg()
    from feudal_es.mappo import MAPPOConfig

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.0f} s] {msg}", file=sys.stderr, flush=True)

    scripts = {
        "es_core": ["--markdown"] + (["--pop", "64", "--repeats", "3"] if args.quick else []),
        "envs": (["--batch", "256", "--skip-vmas"] if args.quick else []),
        # the default epochs only (the script's extra 1-epoch rows double its ~10 min)
        "mappo": ["--markdown", "--epochs", str(MAPPOConfig().epochs)]
        + (["--envs", "Coverage", "--repeats", "1"] if args.quick else []),
    }
    outputs: dict[str, tuple[str, float]] = {}
    titles: dict[str, str] = {}
    for name, a in scripts.items():
        if name in args.skip:
            if name in carried:
                a_old, out_old, secs, when = carried[name]
                outputs[name] = (out_old, secs)
                titles[name] = f"bench/{name}.py {a_old} (stdout, {secs:.0f} s, run {when})"
            continue
        titles[name] = f"bench/{name}.py {' '.join(a)} (stdout, {{s:.0f}} s, run {now})"
        log(f"bench/{name}.py {' '.join(a)}")
        outputs[name] = run_script(name, a, args.timeout)
    perf: dict[str, Any] = {}
    if "perf" not in args.skip:
        perf = measure_perf(args.quick, "cold_start" in args.skip, log)
    load1 = os.getloadavg()

    import jax

    from bench import perf as perf_mod

    table, notes = Table(), []
    perf_rows(table, perf, notes)
    if "es_core" in outputs:
        es_core_rows(table, outputs["es_core"][0])
    if "envs" in outputs:
        envs_rows(table, outputs["envs"][0])
    if "mappo" in outputs:
        mappo_rows(table, outputs["mappo"][0])
    if perf:
        notes += perf_mod.details_markdown(perf)
    total = time.perf_counter() - t_start
    header = (
        f"Run {now}, `python -m bench.all"
        f"{' ' + ' '.join(argv if argv is not None else sys.argv[1:])}`, {total / 60:.1f} min; "
        f"{perf_mod.cpu_name()} ({os.cpu_count()} cores), {platform.machine()}, jax "
        f"{jax.__version__} on {jax.default_backend()}. **Load average (1/5/15 min) at start "
        f"{load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, at end {load1[0]:.1f}/{load1[1]:.1f}/"
        f"{load1[2]:.1f}**: a load above the core count means other jobs shared the CPU and "
        "absolute figures are low; each ratio's two sides ran in this same run, close in time."
    )
    if carried:
        header += (" Not rerun (`--only`), rows rebuilt from the outputs kept from the run "
                   "they name: " + ", ".join(f"bench/{n}.py ({c[3]})" for n, c in
                                             carried.items()) + ".")
    sections = [(titles[n].replace("{s:.0f}", f"{s:.0f}"), o) for n, (o, s) in outputs.items()]
    block = render(table, sections, header, notes)
    if args.no_write:
        print(block)
    else:
        write_results(block)
        print(table.markdown())
        print(f"wrote {RESULTS.relative_to(ROOT)} in {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
