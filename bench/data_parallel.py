"""Why one seed gains what it gains from a second device: the MAPPO train step's time at
IPPO-FF's settings (``bench/vs_jaxmarl.py``) over the env copies and the devices.

    python -m bench.data_parallel              # ~3 min on 2 CPU cores
    python -m bench.data_parallel --envs 8 16 32 --repeats 20

For each ``num_envs`` it times the guarded train step (collection + update, the round's
step) on one device and split over every device (``data_parallel``), interleaved, each
the best of ``--repeats`` after a warm-up. Data parallelism can reach ``D x`` only when a
step's time is proportional to its env copies; on a CPU the step's sequential parts
(the 128-step collection scan, the epochs x minibatches update steps) cost the same at
any batch, so the row "1 device at num_envs / D" bounds what ``D`` devices can do.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/data_parallel.py``
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.common import Report, add_json_arg, markdown_table


def step_time(num_envs: int, data_parallel: int, repeats: int) -> float:
    """Best seconds of one guarded MAPPO step at IPPO-FF's settings with ``num_envs``."""
    import jax

    from bench.vs_jaxmarl import IPPO, trainer_config
    from feudal_es.trainer import ESTrainer

    settings = {**IPPO, "mappo": {**IPPO["mappo"], "num_envs": num_envs}}
    cfg = trainer_config(settings, 2, 8, (0,), data_parallel)
    trainer = ESTrainer(cfg, Path(tempfile.mkdtemp(prefix="bench-dp-")) / "run")
    ts, step = trainer.state.learner, trainer.runtime.guarded_step
    for _ in range(3):  # compile and warm up
        ts = step(ts)[0]
    jax.block_until_ready(ts)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        ts = step(ts)[0]
        jax.block_until_ready(ts)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()
    import jax

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", type=int, nargs="+", default=[8, 16, 32])
    p.add_argument("--repeats", type=int, default=10)
    add_json_arg(p)
    args = p.parse_args(argv)
    report = Report("data_parallel", args, argv)
    devices = len(jax.devices())
    rows: list[dict[str, Any]] = []
    for envs in args.envs:
        one = step_time(envs, 1, args.repeats)
        split = step_time(envs, 0, args.repeats) if devices > 1 else None
        rows.append({"num_envs": envs, "one_device_s": one, "split_s": split,
                     "steps": 128 * envs})
    by = {r["num_envs"]: r for r in rows}
    table = []
    for r in rows:
        half = by.get(r["num_envs"] // devices)
        bound = r["one_device_s"] / half["one_device_s"] if half and devices > 1 else None
        gain = r["one_device_s"] / r["split_s"] if r["split_s"] else None
        r.update(gain=gain, bound=bound)
        table.append((r["num_envs"], f"{r['one_device_s'] * 1e3:.1f}",
                      "-" if r["split_s"] is None else f"{r['split_s'] * 1e3:.1f}",
                      "-" if gain is None else f"{gain:.2f}x",
                      "-" if bound is None else f"{bound:.2f}x"))
    print(markdown_table(
        ["num_envs", "1 device, ms/step", f"{devices} devices, ms/step", "gain",
         f"bound: 1 device at num_envs vs at num_envs / {devices}"], "rrrrr", table))
    report.write({"devices": devices, "rows": rows},
                 {"one_device_s": "s per train step", "split_s": "s per train step"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
