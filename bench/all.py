"""Every benchmark in one run, summarised as one table of ratios in ``bench/RESULTS.md``.

    python -m bench.all            # or: make bench   (about 10-20 min on 2 CPU cores)
    python -m bench.all --quick    # smaller settings, for a smoke run
    python -m bench.all --only perf   # rerun one part; the others' rows are carried over

Each part of :data:`PARTS` is a script run as ``python -m <module> <args> --json PATH``.
The scripts print human-readable markdown and write their measurements as JSON (the
document of ``bench.common.Report``: ``script``, ``command``, ``date``, ``seconds``,
``machine``, ``load_average`` before/after, ``settings``, ``units``, ``results``). This
script builds the summary from the JSON only, never from the printed text: it keeps each
run's document, with the script's stdout added under ``stdout``, in
``bench/results/<name>.json`` (committed beside RESULTS.md), and rewrites the block between
the ``<!-- bench/all.py -->`` markers at the top of ``bench/RESULTS.md``: the summary table
(each row a ratio whose two sides were measured in the same run), the shortfalls with their
measured causes, and the raw outputs. The hand-written per-script sections below the block
are left as they are. The machine's load average is recorded before and after (for this
run and for each script), since the numbers are only as good as the share of the CPU the
run got. With ``--only``, the parts not rerun take their document from
``bench/results/<name>.json`` (their rows are marked with the date of the run that
measured them). A script that fails keeps its previous document there and gets no rows.

Adding a script: append a :class:`Part` to :data:`PARTS` with its name (the JSON's file
name and the ``--only`` / ``--skip`` choice), its module, a function giving its
command-line arguments, and a function turning its JSON document into summary
:class:`Row` objects. The script itself takes ``--json PATH`` and writes a
``bench.common.Report``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/all.py``: import from the repository root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.common import describe

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "RESULTS.md"
SAVED = ROOT / "bench" / "results"
BEGIN, END = "<!-- bench/all.py: begin -->", "<!-- bench/all.py: end -->"


# ---------------------------------------------------------------------------------------
# rows of the summary table
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One summary row: what is compared, both sides, their ratio and the goal it meets."""

    what: str
    ours: str
    anchor: str
    ratio: float | None
    goal: str
    met: bool | None  # None: no goal (reported only) or not measured
    cause: str = ""  # why an unmet goal is not met, from the run's measurements

    def cells(self) -> tuple[str, ...]:
        """The markdown cells: what | ours | anchor | ratio | goal | status."""
        status = "-" if self.met is None else ("met" if self.met else "**not met**")
        r = self.ratio
        ratio = "n/a" if r is None else (f"{r:.3g}x" if r < 1000 else f"{r:,.0f}x")
        return (self.what, self.ours, self.anchor, ratio, self.goal, status)


def fmt_s(x: float | None, digits: int = 3) -> str:
    """Seconds as a table cell."""
    return "n/a" if x is None else f"{x:.{digits}g} s"


def fmt_n(x: float | None, decimals: int = 0) -> str:
    """A rate as a table cell, with thousands separators."""
    return "n/a" if x is None else f"{x:,.{decimals}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either side is missing or zero."""
    return a / b if a and b else None


def perf_rows(doc: dict[str, Any]) -> list[Row]:
    """bench/perf.py: ES generation vs the reference loop, FLOP/s, scaling, cold start."""
    res, cores = doc["results"], doc["machine"]["cores"]
    g, mm = res.get("es_generation"), res.get("matmul_flops_per_s")
    rows = []
    if g:
        member = g["member_flops_per_s"]
        one = ratio(g["rollout_flops"], g["rollout_1dev_s"])
        cause = (f"the gain is bounded by the {cores} CPU cores. The reference loop "
                 f"runs one member at a time: {member / 1e9:.1f} GFLOP/s "
                 f"({100 * member / mm:.0f}% of the dense-matmul anchor), "
                 f"{g['member_busy']:.2f} cores busy. Batching the population "
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
        rows.append(Row(
            f"ES generation, Coverage, P={g['pop']}, {g['agents']} agents, {g['steps']}-step "
            "episode: batched jitted `generation` vs reference loop `es_step` (s/generation)",
            fmt_s(g["batched_s"]), fmt_s(g["loop_s"]), g["speedup"], ">= 30x",
            g["speedup"] >= 30, cause))
    if g and mm:
        how = (f"{g['chunk']} members at a time (`lax.map(batch_size={g['chunk']})`)"
               if 0 < g["chunk"] < g["pop"] else "one full-width vmap")
        cause = (
            f"one member alone runs at {g['member_flops_per_s'] / 1e9:.1f} GFLOP/s "
            f"({100 * g['member_flops_per_s'] / mm:.0f}% of the matmul anchor), the "
            f"{g['pop']}-member population as the trainer runs it, {how}, at "
            f"{g['rollout_flops_per_s'] / 1e9:.1f} GFLOP/s, as one full-width vmap at "
            f"{g['rollout_flops'] / g['vmap_s'] / 1e9:.1f} GFLOP/s (its activations no longer "
            "fit the CPU caches); the rest of the gap to the matmul is the small, "
            "memory-bound convolutions (3 input channels, 16 x 16 maps) and the env's "
            "gathers, which no batching turns into matmul-shaped work on a CPU.")
        frac = g["rollout_flops_per_s"] / mm
        rows.append(Row(
            f"achieved FLOP/s of the population rollout (XLA cost analysis, "
            f"{g['rollout_flops'] / 1e9:.1f} GFLOP per call) vs dense f32 matmul (GFLOP/s)",
            f"{g['rollout_flops_per_s'] / 1e9:.2f}", f"{mm / 1e9:.1f}", frac, ">= 0.25x",
            frac >= 0.25, cause))
    sc, wide = res.get("population_scaling") or [], res.get("population_scaling_vmap") or []
    if len(sc) >= 2:
        cause = (
            f"cost per member with the trainer's default chunk ({sc[-1]['chunk']} members): "
            + ", ".join(f"{r['per_member_ms']:.1f} ms at P={r['pop']} ({r['busy']:.2f} cores "
                        "busy)" for r in sc)
            + "; with each device's share as one vmap: "
            + ", ".join(f"{r['per_member_ms']:.1f} ms" for r in wide)
            + " (the sizes timed in turn, best of each).")
        for r in sc[1:]:
            lin = r["pop"] / sc[0]["pop"]
            rel = (r["gen_s"] / sc[0]["gen_s"]) / lin
            rows.append(Row(
                f"population scaling: s/generation at P={r['pop']} vs P={sc[0]['pop']} x "
                f"{lin:g} (linear)", fmt_s(r["gen_s"]), fmt_s(sc[0]["gen_s"] * lin), rel,
                "<= 1.2x", rel <= 1.2, cause))
    ag = res.get("agent_scaling") or []
    for r in ag:
        rows.append(Row(
            f"agent scaling: population rollout, {r['agents']} agents "
            f"(us per agent-step; anchor: {ag[0]['agents']} agents)",
            f"{r['us_per_agent_step']:.2f}", f"{ag[0]['us_per_agent_step']:.2f}",
            r["us_per_agent_step"] / ag[0]["us_per_agent_step"], "(reported)", None))
    cs = res.get("cold_start")
    if cs:
        cold, warm = cs.get("cold_s"), cs.get("warm_cache_s")
        cause = (
            f"compilation dominates: of {cold:.0f} s, the first round itself took "
            f"{cs.get('round_time') or float('nan'):.0f} s (it compiles MAPPO's train step, "
            "the ES generation and the selector evaluation, then runs them); with the XLA "
            f"cache filled the same launch took {warm or float('nan'):.0f} s."
            + (f" In-process, the ES generation alone compiled in "
               f"{g['compile_batched_s']:.0f} s here, and one default-size generation (16 "
               "members x 4 episodes x 100 steps with the default actor) runs for about "
               f"{g['rollout_s'] * 4 * 16 / g['pop']:.0f} s at this run's speed." if g else "")
            if cold else "it did not finish its first round within the timeout")
        rows.append(Row(
            "cold start: `feudal-es train` (defaults) launch to first finished generation, "
            "empty XLA cache (s) vs the 60 s goal", fmt_s(cold), "60 s", ratio(cold, 60),
            "<= 1x (<= 60 s)", (cold <= 60) if cold else False, cause))
        rows.append(Row("cold start again, XLA cache filled by the first launch (s)",
                        fmt_s(warm), "60 s", ratio(warm, 60), "(reported)", None))
        elem, steady = cs.get("elemental_cold_s"), cs.get("third_round_s")
        if elem:
            rows.append(Row(
                "cold start with XLA:CPU's elemental emitters (`XLA_FLAGS="
                "--xla_cpu_use_fusion_emitters=false`, the tests' flag), empty cache, vs "
                "XLA's defaults (s)", fmt_s(elem), fmt_s(cold), ratio(elem, cold),
                "(reported)", None))
            rows.append(Row(
                "... the same launches' third round (compiled): elemental emitters vs XLA's "
                "defaults (s)", fmt_s(cs.get("elemental_third_round_s")), fmt_s(steady),
                ratio(cs.get("elemental_third_round_s"), steady), "(reported)", None))
    return rows


def es_core_rows(doc: dict[str, Any]) -> list[Row]:
    """bench/es_core.py: the batched ES core vs the reference loop and vs evosax."""
    gps = {k: p["generations_per_s"] for k, p in doc["results"]["paths"].items()}
    a, b, c = gps.get("loop"), gps.get("batched"), gps.get("evosax")
    ba, bc = ratio(b, a), ratio(b, c)
    return [
        Row(f"ES core, sphere {doc['settings']['dim']}-D, P={doc['settings']['pop']}: batched "
            "`evolve` vs reference loop `es_step` (generations/s)", fmt_n(b, 1), fmt_n(a, 1),
            ba, ">= 30x", None if ba is None else ba >= 30),
        Row("ES core vs evosax `Open_ES`, same problem (generations/s)", fmt_n(b, 1),
            fmt_n(c, 1), bc, ">= 1x", None if bc is None else bc >= 1,
            f"the two are within {abs(1 - (bc or 1)) * 100:.0f}% of each other, inside the "
            "timing noise of this loaded machine (they are timed interleaved, best of "
            "several; per generation both are bound by the same noise sampling, ranking and "
            "update ops)"),
    ]


def envs_rows(doc: dict[str, Any]) -> list[Row]:
    """bench/env_throughput.py: env throughput vs VMAS, and the PettingZoo adapter vs its floor."""
    res, batch = doc["results"], doc["settings"]["batch"]
    rows = []
    for r in res["vmas"]:
        rel = ratio(r["ours_vec_env_steps_per_s"], r["vmas_env_steps_per_s"])
        kw = ", ".join(f"{k}={v}" for k, v in r["kwargs"].items())
        rows.append(Row(
            f"env throughput, {batch} envs, vector obs: {r['env']} vs {r['scenario']}({kw}) "
            "(env-steps/s)", fmt_n(r["ours_vec_env_steps_per_s"]),
            fmt_n(r["vmas_env_steps_per_s"]), rel, f">= {r['goal_ratio_vec']:g}x",
            None if rel is None else rel >= r["goal_ratio_vec"], "see the Envs section"))
    for r in res["adapter"]:
        goal, wall = r["goal_env_steps_per_s"], r["env_steps_per_s"]
        rows.append(Row(
            f"PettingZoo adapter, 1 env, {r['env']} (env-steps/s) vs its floor (bare jitted "
            "`env.step` from Python)", fmt_n(wall), fmt_n(r["floor_env_steps_per_s"]),
            ratio(wall, r["floor_env_steps_per_s"]),
            "-" if goal is None else f">= {goal:,.0f} env-steps/s",
            None if goal is None else wall >= goal,
            "its floor, one jitted env.step called from Python, is itself below the goal "
            "on this machine (see the Envs section)"))
    return rows


def mappo_rows(doc: dict[str, Any]) -> list[Row]:
    """bench/mappo.py: MERL training env-steps/s, fused vs split update, MAPPO training SPS
    vs rollout-only SPS (first epochs setting per env)."""
    res = doc["results"]
    rows, seen = [], set()
    for r in res.get("merl", []):
        rows.append(Row(
            f"MERL training on Discovery (8 agents, vec obs, MLP executor), {r['seeds']} "
            "seed(s) in one program: MAPPO + ES env-steps/s", fmt_n(r["env_steps_per_s"]),
            "20,000", ratio(r["env_steps_per_s"], 20000), ">= 20k env-steps/s",
            r["env_steps_per_s"] >= 20000,
            "the MAPPO update's matmuls (see bench/RESULTS.md, training throughput)"))
    for r in res.get("update_modes", []):
        rows.append(Row(
            f"MAPPO update, {r['actor']}: fused (one lax.scan) vs split, s per train step",
            fmt_s(r["fused_s"]), fmt_s(r["split_s"]), r["fused_over_split"],
            f"auto picks the faster ({r['auto']})",
            (r["fused_over_split"] >= 1) == (r["auto"] == "fused")))
    for r in res["runs"]:
        if r["env"] in seen:
            continue
        seen.add(r["env"])
        rel = ratio(r["train_sps"], r["rollout_sps"])
        rows.append(Row(
            f"MAPPO on {r['env']}, epochs x minibatches {r['epochs']} x {r['minibatches']}: "
            "training SPS vs rollout-only SPS", fmt_n(r["train_sps"], 1),
            fmt_n(r["rollout_sps"], 1), rel, ">= 0.3x", None if rel is None else rel >= 0.3,
            "the CNN weight gradient dominates on CPU (see the MAPPO section)"))
    return rows


def gym_vector_rows(doc: dict[str, Any]) -> list[Row]:
    """bench/gym_vector.py: Gymnasium's make_vec at 1024 copies vs SyncVectorEnv."""
    from bench.gym_vector import summary_rows

    return summary_rows(doc)


def host_workers_rows(doc: dict[str, Any]) -> list[Row]:
    """bench/host_workers.py: host-path MAPPO collection over worker processes."""
    from bench.host_workers import summary_rows

    return summary_rows(doc)


def _repeat_spread(ours: list[float], peer: list[float] | None) -> str:
    """The repeats' ranges, as the cause of a speed ratio near 1 (empty without repeats)."""
    if len(ours) < 2 or not peer or len(peer) < 2:
        return ""
    rng = lambda xs: f"{fmt_n(min(xs))}-{fmt_n(max(xs))}"
    overlap = min(ours) <= max(peer) and min(peer) <= max(ours)
    return (f"the repeats' env-steps/s: ours {rng(ours)}, IPPO-FF {rng(peer)}"
            + ("; the ranges overlap: within this CPU's drift" if overlap else ""))


# why one seed's step gains little from a second CPU device at IPPO-FF's 16 env copies
DATA_PARALLEL_CAUSE = (
    "each device steps 8 of the 16 env copies, and on this CPU a train step over 8 copies "
    "costs 50-70% of one over 16 (the 128-step scan and the 16 minibatch steps are "
    "sequential: their per-op latency does not shrink with the batch), which bounds what "
    "2 devices gain (`python -m bench.data_parallel`, section \"MAPPO past one device\")")


def jaxmarl_rows(doc: dict[str, Any]) -> list[Row]:
    """bench/vs_jaxmarl.py: our MAPPO vs JaxMARL's IPPO-FF and MAPPO-RNN on their env."""
    runs = doc["results"]["runs"]
    ippo, rnn = runs.get("jaxmarl_ippo_ff") or {}, runs.get("jaxmarl_mappo_rnn") or {}
    rows = []
    # one seed: its step data-parallel over the devices (issue 35: >= 1.6x, moonshot 2x)
    for name, seeds, goal in (("ours_ippo_settings", 1, 1.6),
                              ("ours_ippo_settings_2_seeds", 2, 1.0)):
        r = runs[name]
        rel = ratio(r["sps"], ippo.get("sps"))
        ours_reps = r.get("sps_repeats", [r["sps"]])
        n = len(ours_reps)
        split = (f", its step split over {r['data_devices']} devices"
                 if r.get("data_devices", 1) > 1 else "")
        rows.append(Row(
            f"MAPPO on MPE simple_spread, IPPO-FF's settings, {seeds} seed(s){split}: "
            "env-steps/s vs JaxMARL IPPO-FF" + (
                f" (each side's fastest of {n} interleaved repeats)" if n > 1 else ""),
            fmt_n(r["sps"]), fmt_n(ippo.get("sps")), rel, f">= {goal}x (goal 2x)",
            None if rel is None else rel >= goal,
            "; ".join(x for x in (_repeat_spread(ours_reps, ippo.get("sps_repeats")),
                                  DATA_PARALLEL_CAUSE if seeds == 1 else "") if x)))
    one, single = runs["ours_ippo_settings"], runs.get("ours_ippo_settings_1_device")
    if single and "error" not in single and one.get("data_devices", 1) > 1:
        rel = ratio(one["sps"], single["sps"])
        rows.append(Row(
            f"... one seed on {one['data_devices']} devices (data-parallel) vs on 1 device: "
            "env-steps/s", fmt_n(one["sps"]), fmt_n(single["sps"]), rel, ">= 1.6x",
            None if rel is None else rel >= 1.6,
            f"final return {one['final_return']:.1f} vs {single['final_return']:.1f} on 1 "
            f"device; {DATA_PARALLEL_CAUSE}"))
    r = runs["ours_ippo_settings"]
    rows.append(Row(
        f"... final return after {r['steps']:,} env steps (higher is better)",
        f"{r['final_return']:.1f}", f"{ippo['final_return']:.1f}" if ippo.get("final_return")
        else "n/a", None, ">= IPPO-FF's",
        None if "final_return" not in ippo else r["final_return"] >= ippo["final_return"]))
    b = runs["ours_best_settings_2_seeds"]
    rel = ratio(b["sps"], rnn.get("sps"))
    rows.append(Row(
        f"Our best settings, 2 seeds, {b['steps']:,} env steps: env-steps/s vs JaxMARL "
        "MAPPO-RNN", fmt_n(b["sps"]), fmt_n(rnn.get("sps")), rel, ">= 5x",
        None if rel is None else rel >= 5))
    rows.append(Row(
        "... final return at 0.4M env steps (higher is better)", f"{b['final_return']:.1f}",
        f"{rnn['final_return']:.1f}" if rnn.get("final_return") else "n/a", None,
        ">= MAPPO-RNN's",
        None if "final_return" not in rnn else b["final_return"] >= rnn["final_return"]))
    return rows


# ---------------------------------------------------------------------------------------
# the parts: one entry per script
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Part:
    """One benchmark script of the summary (see the module docstring)."""

    name: str  # bench/results/<name>.json, and the --only / --skip choice
    module: str  # run as ``python -m <module> <args> --json PATH``
    args: Callable[[argparse.Namespace], list[str]]  # from bench.all's options (--quick ...)
    rows: Callable[[dict[str, Any]], list[Row]]  # its JSON document -> summary rows
    markdown: bool = False  # its stdout is markdown to show as is, not in a code block

    @property
    def script(self) -> str:
        """The script's file, e.g. ``bench/perf.py``."""
        return self.module.replace(".", "/") + ".py"


def mappo_args(opts: argparse.Namespace) -> list[str]:
    """The default epochs only (the script's extra 1-epoch rows double its ~10 min)."""
    from feudal_es.mappo import MAPPOConfig

    quick = ["--envs", "Coverage", "--repeats", "1"] if opts.quick else []
    return ["--markdown", "--epochs", str(MAPPOConfig().epochs), *quick]


PARTS: list[Part] = [
    Part("perf", "bench.perf",
         lambda o: ["--quick"] * o.quick + ["--skip-cold-start"] * ("cold_start" in o.skip),
         perf_rows, markdown=True),
    Part("es_core", "bench.es_core",
         lambda o: ["--markdown"] + ["--pop", "64", "--repeats", "3"] * o.quick, es_core_rows),
    Part("envs", "bench.env_throughput", lambda o: ["--batch", "256", "--skip-vmas"] * o.quick,
         envs_rows),
    Part("mappo", "bench.mappo", mappo_args, mappo_rows),
    Part("jaxmarl", "bench.vs_jaxmarl", lambda o: ["--quick"] * o.quick, jaxmarl_rows,
         markdown=True),
    Part("gym_vector", "bench.gym_vector",
         lambda o: ["--num-envs", "256", "--steps", "5", "--repeats", "1"] * o.quick,
         gym_vector_rows,
         markdown=True),
    Part("host_workers", "bench.host_workers", lambda o: ["--rounds", "1"] * o.quick,
         host_workers_rows, markdown=True),
]


def run_part(part: Part, args: list[str], out: Path, timeout: float
             ) -> tuple[dict[str, Any] | None, str]:
    """Run one script with ``--json out``: its document (stdout added), or None and why."""
    cmd = [sys.executable, "-m", part.module, *args, "--json", str(out)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"(timed out after {timeout:.0f} s)"
    if proc.returncode != 0 or not out.exists():
        return None, f"{proc.stdout}\n(exit {proc.returncode})\n{proc.stderr[-3000:]}"
    doc = json.loads(out.read_text())
    doc["stdout"] = proc.stdout
    return doc, ""


def saved(name: str) -> dict[str, Any] | None:
    """The document kept by the last run of a part, if any."""
    path = SAVED / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


# ---------------------------------------------------------------------------------------
# RESULTS.md
# ---------------------------------------------------------------------------------------
def run_line(doc: dict[str, Any]) -> str:
    """``N s, run DATE, load average a at start, b at end`` of a document's run."""
    load = doc["load_average"]
    return (f"{doc['seconds']:.0f} s, run {doc['date']}, load average "
            f"{load['before'][0]:.1f} at start, {load['after'][0]:.1f} at end")


def render(docs: dict[str, dict[str, Any]], failed: dict[str, str], header: str) -> str:
    """The block between the markers: table, shortfalls, then each part's output."""
    rows = [row for part in PARTS if part.name in docs for row in part.rows(docs[part.name])]
    table = ["| what | ours | anchor | ratio | goal | status |",
             "|---|---:|---:|---:|---|---|"]
    table += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    parts = [BEGIN, "## Summary (regenerated by `python -m bench.all`)", "", header, "",
             *table, ""]
    gpu = ROOT / "bench" / "results" / "gpu_vs_jaxmarl.json"
    if gpu.is_file():
        parts += [f"GPU: `bench/vs_jaxmarl.py` ran on one ({json.loads(gpu.read_text())['date']}"
                  ", `bench/results/gpu_vs_jaxmarl.json`): section \"MAPPO past one device\""
                  " below; every row above is the CPU's.", ""]
    elif all(d["machine"]["backend"] == "cpu" for d in docs.values()):
        parts += ["GPU: no GPU lent to this task; the GPU rows are left empty, not guessed.", ""]
    short = [r for r in rows if r.met is False]
    if short:
        parts += ["### Goals not met, and why (from this run's measurements)", ""]
        parts += [f"- **{r.what}**: {r.cause}" if r.cause else f"- **{r.what}**" for r in short]
        parts.append("")
    for part in PARTS:
        doc = docs.get(part.name)
        if doc and part.markdown:
            parts += [doc["stdout"].strip(), "",
                      f"(stdout of `{doc['command']}`: {run_line(doc)})", ""]
    for part in PARTS:
        doc = docs.get(part.name)
        if part.name in failed:
            title, body = f"python -m {part.module} FAILED", failed[part.name]
        elif doc and not part.markdown:
            title, body = f"{doc['command']} (stdout, {run_line(doc)})", doc["stdout"]
        else:
            continue
        parts += [f"<details><summary>{title}</summary>", "", "```", body.strip(), "```", "",
                  "</details>", ""]
    parts.append(END)
    return "\n".join(parts) + "\n"


def write_results(block: str) -> None:
    """Replace the block between the markers in RESULTS.md (or put it under the title)."""
    old = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + block + old[old.index(END) + len(END) + 1:]
    else:
        lines = old.splitlines(keepends=True)
        head = lines[0] if lines and lines[0].startswith("# ") else "# Benchmark results\n"
        rest = "".join(lines[1:]) if lines and lines[0].startswith("# ") else old
        new = head + "\n" + block + rest
    RESULTS.write_text(new)


def main(argv: list[str] | None = None) -> int:
    names = [part.name for part in PARTS]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller settings (smoke run)")
    p.add_argument("--skip", nargs="*", default=[], choices=[*names, "cold_start"])
    p.add_argument("--only", nargs="+", default=None, choices=names,
                   help="run only these parts; the others' rows come from their documents "
                   "kept in bench/results/ (marked with their run's date)")
    p.add_argument("--timeout", type=float, default=1800, help="per script, seconds")
    p.add_argument("--no-write", action="store_true",
                   help="print the block instead of writing RESULTS.md and bench/results/")
    args = p.parse_args(argv)
    carry = set() if args.only is None else set(names) - set(args.only)
    t_start = time.perf_counter()
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    load0 = os.getloadavg()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.0f} s] {msg}", file=sys.stderr, flush=True)

    docs: dict[str, dict[str, Any]] = {}
    fresh, failed, missing = [], {}, []
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        for part in PARTS:
            if part.name in carry:
                doc = saved(part.name)
                if doc is None:
                    missing.append(part.name)
                else:
                    docs[part.name] = doc
                continue
            if part.name in args.skip:
                continue
            part_args = part.args(args)
            log(f"python -m {part.module} {' '.join(part_args)}")
            doc, why = run_part(part, part_args, Path(tmp) / f"{part.name}.json",
                                args.timeout)
            if doc is None:
                failed[part.name] = why
                log(f"{part.name} failed: {why.strip().splitlines()[-1] if why else ''}")
            else:
                docs[part.name] = doc
                fresh.append(part.name)
    load1 = os.getloadavg()
    total = time.perf_counter() - t_start

    machines = [docs[n]["machine"] for n in fresh] or [d["machine"] for d in docs.values()]
    script = {part.name: part.script for part in PARTS}
    header = (
        f"Run {now}, `python -m bench.all"
        f"{' ' + ' '.join(argv if argv is not None else sys.argv[1:])}`, {total / 60:.1f} min; "
        f"{describe(machines[0]) if machines else 'no measurements'}. **Load average "
        f"(1/5/15 min) at start {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, at end "
        f"{load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f}**: a load above the core count means "
        "other jobs shared the CPU and absolute figures are low; each ratio's two sides ran "
        "in this same run, close in time.")
    carried = [n for n in docs if n not in fresh]
    if carried:
        header += (" Not rerun (`--only`), rows from `bench/results/<name>.json` of the run "
                   "they name: " + ", ".join(f"{script[n]} ({docs[n]['date']}"
                                             + ("" if docs[n]["machine"] == machines[0]
                                                else f", on {describe(docs[n]['machine'])}")
                                             + ")" for n in carried) + ".")
    if missing:
        header += (" No kept results (no `bench/results/<name>.json`) for: "
                   + ", ".join(script[n] for n in missing) + ".")
    if failed:
        header += (" **Failed, no rows**: " + ", ".join(script[n] for n in failed)
                   + " (output below).")
    block = render(docs, failed, header)
    if args.no_write:
        print(block)
        return 0
    SAVED.mkdir(exist_ok=True)
    for name in fresh:
        (SAVED / f"{name}.json").write_text(json.dumps(docs[name], indent=1) + "\n")
    write_results(block)
    print(block[block.index("| what"):block.index("\n\n", block.index("| what"))])
    print(f"wrote {RESULTS.relative_to(ROOT)} and bench/results/ in {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
