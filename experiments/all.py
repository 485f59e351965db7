"""Regenerate every result of the README's Results section: Coverage, Discovery
(coupling 2 and 3) and Dispersion, at a CPU-sized budget (``--scale`` for longer runs).

    python -m experiments.all [--scale 1.0]      # or: make results

Writes ``experiments/results/{coverage,discovery,dispersion}.{json,csv,png,md}`` and
``experiments/results/timing.json`` (wall time per study and the CPU load average).
"""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path

from experiments import coverage, discovery, dispersion
from experiments.common import RESULTS, Timer, machine_note, write_json


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every env-step budget")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--only", nargs="+", choices=["coverage", "discovery", "dispersion"],
                   default=["coverage", "discovery", "dispersion"])
    a = p.parse_args(argv)
    clock = Timer()
    timing = {"scale": a.scale, "started": datetime.datetime.now(datetime.timezone.utc)
              .isoformat(timespec="seconds"), "loadavg_at_start": os.getloadavg(),
              "studies": {}}
    for name, mod in (("coverage", coverage), ("discovery", discovery),
                      ("dispersion", dispersion)):
        if name in a.only:
            t = Timer()
            mod.run(a.scale, out_dir=a.out)
            timing["studies"][name] = {"wall_time_s": round(t(), 1),
                                       "loadavg_after": os.getloadavg()}
            print(f"[all] {name} done in {t():.0f}s (total {clock():.0f}s)", flush=True)
    timing["total_wall_time_s"] = round(clock(), 1)
    timing["machine"] = machine_note()
    write_json(a.out / "timing.json", timing)
    print(f"[all] every study done in {clock():.0f}s; results in {a.out}")


if __name__ == "__main__":
    main()
