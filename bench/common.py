"""What every bench script shares: the JSON document it writes beside its printed markdown.

Each script (``bench/es_core.py``, ``bench/env_throughput.py``, ``bench/mappo.py``,
``bench/perf.py``) prints its human-readable markdown to stdout and, given
``--json PATH``, writes its measurements to ``PATH`` as one :class:`Report` document (the
keys are listed there), so that ``python -m bench.all`` builds its summary from numbers
instead of parsing text. Also here: the machine description, the interleaved best-of
timer and the markdown-table printer the scripts had in several copies.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (else platform's guess)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """The machine and JAX backend a measurement ran on (initialises JAX's backend)."""
    import jax

    return {"cpu": cpu_name(), "cores": os.cpu_count(), "arch": platform.machine(),
            "python": platform.python_version(), "jax": jax.__version__,
            "backend": jax.default_backend()}


def describe(m: dict[str, Any]) -> str:
    """One line naming a :func:`machine` dict, as the summary's header prints it."""
    return f"{m['cpu']} ({m['cores']} cores), {m['arch']}, jax {m['jax']} on {m['backend']}"


def best_times(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
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


def markdown_table(head: Sequence[str], align: str, rows: Iterable[Sequence[object]]) -> str:
    """A markdown table; ``align`` has one letter per column, ``l`` (left) or ``r`` (right)."""
    rule = "|".join("---:" if a == "r" else "---" for a in align)
    lines = ["| " + " | ".join(head) + " |", f"|{rule}|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    """The ``--json PATH`` option every bench script takes."""
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the measurements to PATH as JSON (bench/common.py)")


class Report:
    """The JSON document of one script run; create it before measuring, :meth:`write` after.

    Keys: ``script`` (its name), ``command`` (without ``--json``), ``date`` (local time,
    to the minute), ``seconds`` (from creation to :meth:`write`), ``machine`` (see
    :func:`machine`), ``load_average`` (``{"before": [1, 5, 15 min], "after": [...]}``: the
    numbers are only as good as the share of the CPU the run got), ``settings`` (the
    parsed command-line options), ``units`` (for result keys whose name does not say it;
    ``_s`` means seconds, ``_per_s`` per second) and ``results`` (the script's
    measurements: plain numbers, strings, lists and dicts).
    """

    def __init__(self, script: str, args: argparse.Namespace,
                 argv: list[str] | None = None) -> None:
        argv = sys.argv[1:] if argv is None else argv
        drop = {i + 1 for i, a in enumerate(argv) if a == "--json"}
        shown = [a for i, a in enumerate(argv)
                 if i not in drop and a != "--json" and not a.startswith("--json=")]
        self.script, self.args = script, args
        self.command = " ".join([f"python -m bench.{script}", *shown])
        self.date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        self.load_before, self.t0 = os.getloadavg(), time.perf_counter()

    def write(self, results: dict[str, Any], units: dict[str, str] | None = None) -> None:
        """Write the document to ``--json`` (nothing when the option was not given)."""
        path = self.args.json
        if path is None:
            return
        settings = {k: v for k, v in vars(self.args).items() if k != "json"}
        doc = {"script": self.script, "command": self.command,
               "date": self.date, "seconds": time.perf_counter() - self.t0,
               "machine": machine(),
               "load_average": {"before": list(self.load_before),
                                "after": list(os.getloadavg())},
               "settings": settings, "units": units or {}, "results": results}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def train_timed(trainer: Any) -> dict[str, float]:
    """Run a trainer to its end, timing round 0 (compilation) apart: ``compile_s``,
    ``run_s`` (the rest, with the end of run's plot, checkpoint and GIF) and ``round_s``
    (the rest's rounds alone, from their metrics rows' ``round_time``: how an anchor times
    its training call)."""
    t0 = time.perf_counter()
    trainer.run(rounds=1)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    trainer.run()
    run_s = time.perf_counter() - t0
    round_s = sum(row["round_time"] for row in trainer.histories[0][1:])
    return {"compile_s": compile_s, "run_s": run_s, "round_s": round_s}
