"""What a study's wall time means: how long it took, the CPU load it ran under and the
machine it ran on, recorded beside its numbers because timings on a shared machine are
not comparable without them.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from typing import Any

__all__ = ["LoadSampler", "Timer", "machine_note"]


def machine_note() -> dict[str, Any]:
    """What the numbers ran on (load average shows CPU sharing)."""
    import jax

    from bench.common import cpu_name

    return {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg(),
            "jax": jax.__version__, "python": platform.python_version(),
            "cpu": cpu_name()}


@dataclasses.dataclass
class Timer:
    """Wall-clock seconds since construction."""

    t0: float = dataclasses.field(default_factory=time.perf_counter)

    def __call__(self) -> float:
        return time.perf_counter() - self.t0


class LoadSampler:
    """The 1-minute load average, sampled every ``period`` seconds on a daemon thread.

    A study's wall time means little without the CPU sharing it ran under; one reading at
    the start and end misses a concurrent job in between.
    """

    def __init__(self, period: float = 60.0):
        import threading

        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)
        self._thread.start()

    def _run(self, period: float) -> None:
        while not self._stop.wait(period):
            self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, Any]:
        """Mean, min and max of the samples so far (and how many there are)."""
        s = self.samples
        return {"samples": len(s), "mean": round(sum(s) / len(s), 2),
                "min": round(min(s), 2), "max": round(max(s), 2)}

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return self.summary()
