"""Regenerate every result of the README's Results section: Rover (couplings 4 and 6),
Discovery, Dispersion and MPE simple_spread, 10 seeds each (``--scale`` multiplies every
env-step budget); MERL's rover (``rover_merl``: 7 arms at 2M env steps, about as long as
all the others together), Coverage (``coverage``: 4 arms fine-tuning the LPAC imitator's
wide actor, about half an hour each) and Coverage's LPAC imitation (``coverage_lpac``: 20
imitators of about 22 min each with the recipe's 32 rounds) are separate jobs.

    python -m experiments.all [--scale 1.0] [--only rover mpe]          # or: make results
    python -m experiments.all --only rover_merl                # or: make results-merl
    python -m experiments.all --only coverage --resume         # or: make results-coverage
    python -m experiments.all --only coverage_lpac --resume    # or: make results-lpac
    python -m experiments.all --scale 0.05 --out /tmp/smoke              # smoke run
    python -m experiments.all --only rover_merl --resume   # finish an interrupted run

Every study runs in its own process (its log in ``out/log-<study>.txt``): the first full
run, one process compiling every study's programs, died 77 minutes in with LLVM's
"Cannot allocate memory" at 4 GB of 24, most likely the kernel's memory-map limit
(``vm.max_map_count``, 65,530 here). A smoke run (``--scale`` below :data:`SMOKE_SCALE`)
checks the pipeline, not the statistics: unless ``--seeds`` / ``--jobs`` say otherwise it
trains 2 seeds (one per CPU device) and runs 2 studies at a time, since at that scale
XLA's compilation (one core per program) dominates the wall time.

Writes ``experiments/results/<study>.{json,csv,png,md}`` (and Rover's GIFs) and
``experiments/results/timing.json`` (``timing-<studies>.json`` with ``--only``: wall time per
study, the 1-minute load average sampled every minute, CPU model).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import inspect
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from experiments import coverage, coverage_lpac, mpe, rover, rover_merl, swarm
from experiments.machine import LoadSampler, Timer, machine_note
from experiments.report import RESULTS, write_json
from experiments.training import SEEDS

STUDIES = {"rover": rover.run, "coverage": coverage.run, "coverage_lpac": coverage_lpac.run,
           "discovery": swarm.discovery,
           "dispersion": swarm.dispersion, "mpe": mpe.run, "rover_merl": rover_merl.run}
# the studies whose ``run`` takes ``resume`` (experiments.training.train_arm)
RESUMABLE = tuple(n for n, f in STUDIES.items() if "resume" in inspect.signature(f).parameters)
# their own jobs: ``make results`` would pass 2 h with any of them (README: Results)
SEPARATE = ("rover_merl", "coverage", "coverage_lpac")
DEFAULT = [name for name in STUDIES if name not in SEPARATE]
SMOKE_SCALE = 0.25  # below it, --scale is a smoke run
SMOKE_SEEDS = (0, 1)
SMOKE_JOBS = 2


def defaults(scale: float, seeds: list[int] | None, jobs: int | None
             ) -> tuple[tuple[int, ...], int]:
    """The seeds and concurrent studies of a run: the given ones, else 10 seeds and one
    study at a time, or for a smoke run (``scale < SMOKE_SCALE``) 2 seeds and 2 studies."""
    smoke = scale < SMOKE_SCALE
    chosen = tuple(seeds) if seeds else (SMOKE_SEEDS if smoke else SEEDS)
    return chosen, int(jobs) if jobs else (SMOKE_JOBS if smoke else 1)


def _timing_path(out: Path, only: list[str]) -> Path:
    return out / ("timing.json" if only == DEFAULT else
                  f"timing-{'-'.join(only)}.json")


def _subprocess(name: str, scale: float, seeds: tuple[int, ...], out: Path,
                echo: bool = False, resume: bool = False) -> None:
    """One study in its own process, its output in ``out/log-<study>.txt`` (and, with
    ``echo``, on stdout as it comes)."""
    cmd = [sys.executable, "-m", "experiments.all", "--only", name, "--scale", str(scale),
           "--seeds", *map(str, seeds), "--out", str(out), "--in-process",
           *(["--resume"] if resume else [])]
    with open(out / f"log-{name}.txt", "w") as log, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            log.write(line)
            log.flush()
            if echo:
                print(line, end="", flush=True)
    if proc.returncode != 0:
        raise RuntimeError(f"study {name} failed (exit {proc.returncode}); see "
                           f"{out / f'log-{name}.txt'}")


def main(argv: list[str] | None = None) -> None:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()  # one JAX CPU device per core, before JAX runs anything
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every env-step budget")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help=f"default: 0-9, or {list(SMOKE_SEEDS)} below --scale {SMOKE_SCALE}")
    p.add_argument("--jobs", type=int, default=None,
                   help=f"studies run at once, each in its own process (default: 1, or "
                        f"{SMOKE_JOBS} below --scale {SMOKE_SCALE})")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--only", nargs="+", choices=list(STUDIES), default=DEFAULT,
                   help=f"default: every study but {', '.join(SEPARATE)} (a separate job)")
    p.add_argument("--resume", action="store_true",
                   help="each study keeps the arms an interrupted run finished and continues "
                        f"the one it stopped in ({', '.join(RESUMABLE)}; the others rerun)")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # a child
    a = p.parse_args(argv)
    if a.jobs is not None and a.jobs < 1:
        p.error(f"--jobs must be >= 1, got {a.jobs}")
    seeds, jobs = defaults(a.scale, a.seeds, a.jobs)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.in_process:  # one study's process, started by ``_subprocess``
        for name in a.only:
            resume = {"resume": True} if a.resume and name in RESUMABLE else {}
            if a.resume and not resume:
                print(f"[all] {name} cannot resume; it runs from scratch", flush=True)
            STUDIES[name](a.scale, seeds, a.out, **resume)
        return
    clock = Timer()
    load = LoadSampler()
    timing: dict[str, Any] = {
        "scale": a.scale, "seeds": list(seeds), "jobs": jobs,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_at_start": os.getloadavg(), "studies": {}}
    path = _timing_path(a.out, a.only)
    lock = threading.Lock()  # the studies' threads share ``timing`` and its file

    def one(name: str) -> None:
        t, first = Timer(), len(load.samples)
        _subprocess(name, a.scale, seeds, a.out, echo=jobs == 1, resume=a.resume)
        with lock:
            during = load.samples[first:] or load.samples[-1:]
            timing["studies"][name] = {"wall_time_s": round(t(), 1),
                                       "loadavg_after": os.getloadavg(),
                                       "loadavg_1min_mean": round(sum(during) / len(during),
                                                                  2)}
            print(f"[all] {name} done in {t():.0f}s (total {clock():.0f}s)", flush=True)
            write_json(path, {**timing, "total_wall_time_s": round(clock(), 1),
                              "loadavg_1min_every_60s": load.summary(),
                              "machine": machine_note()})

    if jobs == 1:
        for name in a.only:
            one(name)
    else:  # the studies in the order given (longest first by default), ``jobs`` at a time
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for f in [pool.submit(one, name) for name in a.only]:
                f.result()
    load.stop()
    print(f"[all] every study done in {clock():.0f}s ({len(seeds)} seeds, {jobs} at a "
          f"time); results in {a.out}")


if __name__ == "__main__":
    main()
