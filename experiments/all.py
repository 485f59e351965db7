"""Regenerate every result of the README's Results section: Rover (couplings 4 and 6),
Coverage, Discovery, Dispersion and MPE simple_spread, 10 seeds each
(``--scale`` multiplies every env-step budget; 0.05 is a smoke run).

    python -m experiments.all [--scale 1.0] [--only rover coverage]     # or: make results

Writes ``experiments/results/<study>.{json,csv,png,md}`` (and Rover's GIFs) and
``experiments/results/timing.json`` (``timing-<studies>.json`` with ``--only``: wall time per
study, the 1-minute load average sampled every minute, CPU model).
"""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path

from experiments import common, coverage, mpe, rover, swarm

STUDIES = {"rover": rover.run, "coverage": coverage.run, "discovery": swarm.discovery,
           "dispersion": swarm.dispersion, "mpe": mpe.run}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every env-step budget")
    p.add_argument("--seeds", type=int, nargs="+", default=list(common.SEEDS))
    p.add_argument("--out", type=Path, default=common.RESULTS)
    p.add_argument("--only", nargs="+", choices=list(STUDIES), default=list(STUDIES))
    a = p.parse_args(argv)
    clock = common.Timer()
    load = common.LoadSampler()
    timing = {"scale": a.scale, "seeds": a.seeds,
              "started": datetime.datetime.now(datetime.timezone.utc)
              .isoformat(timespec="seconds"), "loadavg_at_start": os.getloadavg(),
              "studies": {}}
    path = a.out / ("timing.json" if a.only == list(STUDIES) else
                    f"timing-{'-'.join(a.only)}.json")
    for name in a.only:
        t, first = common.Timer(), len(load.samples)
        STUDIES[name](a.scale, tuple(a.seeds), a.out)
        during = load.samples[first:] or load.samples[-1:]
        timing["studies"][name] = {"wall_time_s": round(t(), 1),
                                   "loadavg_after": os.getloadavg(),
                                   "loadavg_1min_mean": round(sum(during) / len(during), 2)}
        print(f"[all] {name} done in {t():.0f}s (total {clock():.0f}s)", flush=True)
        common.write_json(path, {**timing, "total_wall_time_s": round(clock(), 1),
                                 "loadavg_1min_every_60s": load.summary(),
                                 "machine": common.machine_note()})
    load.stop()
    print(f"[all] every study done in {clock():.0f}s; results in {a.out}")


if __name__ == "__main__":
    main()
