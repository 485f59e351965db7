"""Digests of three fixed runs, to pin "same seed, same machine, same result" across
refactors of the round: the demo (``feudal-es demo``), a two-seed run (``--seeds 0 1``)
and :func:`feudal_es.es.merl_coexist` on the README's toy actor.

A digest keeps every number a run produces that does not depend on the clock: the rows
of ``metrics.jsonl`` (timings dropped, floats as ``float.hex``) and the SHA-256 of every
tensor of the final checkpoint and of the best selector, as a sorted list (so renaming a
field of the train state does not change it; changing a value does). The scenarios go
through the CLI and the reference API only, the surfaces a refactor must keep.

``python tests/pins.py record PATH [--n-outer N]`` writes the digests of this checkout
(with ``PYTHONPATH`` pointing at another checkout, of that one) to ``PATH``;
``tests/test_pins.py`` compares this checkout with the digests in ``tests/pins.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# clock-dependent columns of a metrics row
VOLATILE = ("sps", "round_time", "wall_time", "mappo/sps")
SCENARIOS = ("demo", "seeds", "merl_coexist")


def _hex(x: Any) -> Any:
    """Floats as exact hex strings, recursively (ints, strings and None as they are)."""
    if isinstance(x, float):
        return x.hex() if math.isfinite(x) else repr(x)
    if isinstance(x, dict):
        return {k: _hex(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_hex(v) for v in x]
    return x


def tensor_digest(path: Path) -> list[str]:
    """Sorted ``dtype[shape]:sha256`` of every tensor in a safetensors file."""
    from safetensors.numpy import load_file

    return sorted(f"{a.dtype}{list(a.shape)}:{hashlib.sha256(a.tobytes()).hexdigest()[:20]}"
                  for a in load_file(str(path)).values())


def digest_run(run_dir: Path) -> dict[str, Any]:
    """The metrics rows (minus :data:`VOLATILE`), the newest checkpoint's and the best
    selector's tensor digests of one run directory."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    rows = [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]
    ckpts = sorted(run_dir.glob("ckpt_*.safetensors"))
    return {"rows": _hex(rows), "checkpoint": tensor_digest(ckpts[-1]),
            "best_selector": tensor_digest(run_dir / "best_selector.safetensors")}


# the test session's XLA flags for fast compiles (tests/conftest.py): no LLVM optimization
# passes, and XLA:CPU's elemental IR emitters instead of its MLIR fusion emitters, which
# compile the tests' many small programs in about half the time; the pins are recorded
# as a user runs, with XLA's defaults
TEST_XLA_OPT = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def default_env() -> dict[str, str]:
    """This process's environment without the test session's :data:`TEST_XLA_OPT`."""
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "").replace(TEST_XLA_OPT, "").strip()
    if flags:
        env["XLA_FLAGS"] = flags
    else:
        env.pop("XLA_FLAGS", None)
    return env


def _cli(*args: str, cwd: Path) -> None:
    """``feudal-es ARGS`` in this process's environment (:func:`record_as_users_run`
    chose its optimization level)."""
    env = {**os.environ, "FEUDAL_ES_COMPILE_CACHE": os.environ.get(
        "FEUDAL_ES_COMPILE_CACHE", "1")}
    subprocess.run([sys.executable, "-m", "feudal_es.cli", *args, "--no-progress"],
                   cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)


def demo(work: Path, n_outer: int) -> dict[str, Any]:
    """``feudal-es demo --n-outer N``: the demo config, one seed."""
    _cli("demo", "--n-outer", str(n_outer), "--out", str(work / "demo"), cwd=work)
    return digest_run(work / "demo")


def seeds(work: Path, n_outer: int) -> dict[str, Any]:
    """``feudal-es demo --seeds 0 1 --n-outer N``: the demo config, two seeds in one
    program; one digest per seed directory."""
    _cli("demo", "--seeds", "0", "1", "--n-outer", str(n_outer), "--out",
         str(work / "seeds"), cwd=work)
    return {s: digest_run(work / "seeds" / f"seed_{s}") for s in ("0", "1")}


def merl_coexist(n_outer: int) -> dict[str, Any]:
    """The README's toy: ES owns a linear selector, Adam trains a linear executor."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from feudal_es.es import ESConfig, merl_coexist, module_theta, set_module_theta

    class Actor(eqx.Module):
        selector: eqx.nn.Linear
        executor: eqx.nn.Linear

    cfg = ESConfig(pop_size=16, sigma=0.05, lr=0.05, kind="nes")
    actor = Actor(eqx.nn.Linear(4, 2, key=jax.random.key(2)),
                  eqx.nn.Linear(4, 2, key=jax.random.key(3)))
    x, opt = jnp.ones(4), optax.adam(1e-2)

    def train_step(gstate):
        actor, opt_state = gstate
        grads = eqx.filter_grad(lambda ex: jnp.sum((ex(x) - 1.0) ** 2))(actor.executor)
        updates, opt_state = opt.update(grads, opt_state)
        executor = eqx.apply_updates(actor.executor, updates)
        return eqx.tree_at(lambda a: a.executor, actor, executor), opt_state

    def sync_in(gstate, theta):
        return module_theta(gstate[0].selector)

    def sync_out(gstate, theta):
        actor, opt_state = gstate
        selector = set_module_theta(actor.selector, theta)
        return eqx.tree_at(lambda a: a.selector, actor, selector), opt_state

    def eval_fn(theta):
        return -float(jnp.sum((set_module_theta(actor.selector, theta)(x) - 2.0) ** 2))

    theta, gstate, history = merl_coexist(
        theta0=module_theta(actor.selector), eval_fn=eval_fn, gradient_step_fn=train_step,
        sync_in=sync_in, sync_out=sync_out, n_outer=n_outer, grad_steps_per_outer=2,
        es_cfg=cfg, key=jax.random.key(0),
        gstate0=(actor, opt.init(eqx.filter(actor.executor, eqx.is_array))))
    leaves = [np.asarray(x) for x in jax.tree.leaves(eqx.filter(gstate, eqx.is_array))]
    return {"theta": _hex([float(v) for v in np.asarray(theta)]),
            "gstate": sorted(hashlib.sha256(a.tobytes()).hexdigest()[:20] for a in leaves),
            "history": _hex([[o, info] for o, info in history])}


def machine() -> dict[str, Any]:
    """What a bit-exact comparison depends on: the CPU, JAX's version, the device count."""
    import jax

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        flags = "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = False
    return {"cpu": cpu, "avx512": flags, "jax": jax.__version__,
            "jaxlib": __import__("jaxlib").__version__, "devices": len(jax.devices()),
            "xla_flags": os.environ.get("XLA_FLAGS", "")}


def record(n_outer: int, which: tuple[str, ...] = SCENARIOS) -> dict[str, Any]:
    """Every scenario's digest, run in a fresh temporary directory."""
    out: dict[str, Any] = {"n_outer": n_outer}
    with tempfile.TemporaryDirectory(prefix="feudal-es-pins-") as tmp:
        work = Path(tmp)
        if "demo" in which:
            out["demo"] = demo(work, n_outer)
        if "seeds" in which:
            out["seeds"] = seeds(work, n_outer)
        if "merl_coexist" in which:
            out["merl_coexist"] = merl_coexist(n_outer)
    out["machine"] = machine()
    return out


def record_as_users_run(n_outer: int, which: tuple[str, ...], optimized: bool = True
                        ) -> dict[str, Any]:
    """:func:`record` in a fresh process at XLA's default optimization level (what the
    pins hold), from a test session that compiles at another one; ``optimized=False``:
    at the session's level, with its compilation cache (off the recording machine, where
    no float of the CLI runs is compared, only the rows' columns and integers)."""
    with tempfile.TemporaryDirectory(prefix="feudal-es-pins-") as tmp:
        path = Path(tmp) / "pins.json"
        subprocess.run([sys.executable, __file__, "record", str(path), "--n-outer",
                        str(n_outer), "--only", *which],
                       env=default_env() if optimized else dict(os.environ), check=True,
                       stdout=subprocess.DEVNULL)
        return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["record"])
    p.add_argument("path", type=Path)
    p.add_argument("--n-outer", type=int, default=3)
    p.add_argument("--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    a = p.parse_args(argv)
    a.path.write_text(json.dumps(record(a.n_outer, tuple(a.only)), indent=1) + "\n")


if __name__ == "__main__":
    main()
