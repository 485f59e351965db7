"""Why one seed gains what it gains from a second device: the MAPPO train step's time at
IPPO-FF's settings (``bench/vs_jaxmarl.py``) over the env copies and the devices.

    python -m bench.data_parallel              # ~3 min on 2 CPU cores
    python -m bench.data_parallel --envs 8 16 32 --repeats 20
    python -m bench.data_parallel --envs 16 --calls   # also one call per step

For each ``num_envs`` it times the guarded train step (collection + update) as a round
runs it (eight steps in one call, then settled), on one device and split over every
device (``data_parallel``), each the best of ``--repeats`` after a warm-up. Data
parallelism can reach ``D x`` only when a step's time is proportional to its env
copies; on a CPU the step's sequential parts (the 128-step collection scan, the epochs x
minibatches update steps) cost the same at any batch, so the row "1 device at
num_envs / D" bounds what ``D`` devices can do.
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

GRAD_STEPS = 8  # a round's steps in bench/vs_jaxmarl.py


def step_times(num_envs: int, data_parallel: int, repeats: int, calls: bool = False
               ) -> tuple[float, float | None]:
    """Best seconds per guarded MAPPO step at IPPO-FF's settings with ``num_envs``, the
    steps run as a round runs them: :data:`GRAD_STEPS` in one call
    (``JaxRuntime.round_steps``), then settled; and with ``calls`` the same steps called
    one by one (``JaxRuntime.guarded_step``, as rounds ran them before), interleaved."""
    import jax

    from bench.vs_jaxmarl import IPPO, trainer_config
    from feudal_es.trainer import ESTrainer

    settings = {**IPPO, "mappo": {**IPPO["mappo"], "num_envs": num_envs}}
    cfg = trainer_config(settings, 2, GRAD_STEPS, (0,), data_parallel)
    trainer = ESTrainer(cfg, Path(tempfile.mkdtemp(prefix="bench-dp-")) / "run")
    rt = trainer.runtime

    def program(ts: Any) -> Any:
        return rt.settle(rt.round_steps(ts)[0])

    def one_by_one(ts: Any) -> Any:
        for _ in range(GRAD_STEPS):
            ts = rt.guarded_step(ts)[0]
        return rt.settle(ts)

    ways = {"program": program, **({"calls": one_by_one} if calls else {})}
    ts = trainer.state.learner
    for way in ways.values():  # compile and warm up
        ts = way(way(ts))
    jax.block_until_ready(ts)
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(repeats):
        for name, way in ways.items():
            t0 = time.perf_counter()
            ts = jax.block_until_ready(way(ts))
            best[name] = min(best[name], time.perf_counter() - t0)
    return best["program"] / GRAD_STEPS, best["calls"] / GRAD_STEPS if calls else None


def main(argv: list[str] | None = None) -> int:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()
    import jax

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", type=int, nargs="+", default=[8, 16, 32])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--calls", action="store_true",
                   help="also time the steps called one by one (a second table)")
    add_json_arg(p)
    args = p.parse_args(argv)
    report = Report("data_parallel", args, argv)
    devices = len(jax.devices())
    rows: list[dict[str, Any]] = []
    for envs in args.envs:
        one, one_calls = step_times(envs, 1, args.repeats, args.calls)
        split, split_calls = (step_times(envs, 0, args.repeats, args.calls)
                              if devices > 1 else (None, None))
        rows.append({"num_envs": envs, "one_device_s": one, "split_s": split,
                     "one_device_calls_s": one_calls, "split_calls_s": split_calls,
                     "steps": 128 * envs})
    by = {r["num_envs"]: r for r in rows}
    ms = lambda x: "-" if x is None else f"{x * 1e3:.1f}"
    table = []
    for r in rows:
        half = by.get(r["num_envs"] // devices)
        bound = r["one_device_s"] / half["one_device_s"] if half and devices > 1 else None
        gain = r["one_device_s"] / r["split_s"] if r["split_s"] else None
        r.update(gain=gain, bound=bound)
        table.append((r["num_envs"], ms(r["one_device_s"]), ms(r["split_s"]),
                      "-" if gain is None else f"{gain:.2f}x",
                      "-" if bound is None else f"{bound:.2f}x"))
    print(markdown_table(
        ["num_envs", "1 device, ms/step", f"{devices} devices, ms/step", "gain",
         f"bound: 1 device at num_envs vs at num_envs / {devices}"], "rrrrr", table))
    if args.calls:
        print()
        print(markdown_table(
            ["num_envs", "1 device: one call per step / one program, ms/step",
             f"{devices} devices: one call per step / one program, ms/step"], "rrr",
            [(r["num_envs"], f"{ms(r['one_device_calls_s'])} / {ms(r['one_device_s'])}",
              f"{ms(r['split_calls_s'])} / {ms(r['split_s'])}") for r in rows]))
    report.write({"devices": devices, "rows": rows},
                 {"one_device_s": "s per train step", "split_s": "s per train step"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
