"""One run over two processes (``jax.distributed``, CPU collectives over Gloo, coordinator
on 127.0.0.1), launched as the README's "Several processes" recipe does: ``feudal-es
train`` with ``--coordinator``, ``--num-processes 2`` and each its ``--process-id``, one
CPU device per process.

Oracle: the 1-process run on 2 devices (the same meshes, so the same programs but for
where the collectives run). The two-process run is trained for 2 rounds and resumed to
3, across both processes, and its round-3 checkpoint equals the 1-process run's straight
to round 3 within float tolerance (collectives across processes may add in another
order; on the machine this was written on they agree exactly). Only process 0 writes the
run directory; the other's scratch directory is gone when it exits.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, TESTS, VEC
from safetensors.numpy import load_file

TOL = 1e-5
CLI = [sys.executable, "-m", "feudal_es.cli", "train", "--no-progress"]


def _env(devices: int, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    env.update(JAX_NUM_CPU_DEVICES=str(devices), TMPDIR=str(tmp),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(args: list[str], tmp: Path) -> list[str]:
    """Run ``feudal-es train ARGS`` as processes 0 and 1 of one run; their outputs."""
    flags = ["--coordinator", f"127.0.0.1:{_free_port()}", "--num-processes", "2"]
    procs = [subprocess.Popen([*CLI, *args, *flags, "--process-id", str(i)],
                              env=_env(1, tmp), cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in (0, 1)]
    try:
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-4000:]
    return outs


def _max_diff(a: Path, b: Path) -> float:
    x, y = load_file(str(a)), load_file(str(b))
    assert x.keys() == y.keys()
    return max(float(np.max(np.abs(x[k].astype(np.float64) - y[k].astype(np.float64))))
               for k in x if x[k].size)


@pytest.mark.slow  # three CLI launches, 35-40 s on 2 cores: the suite's 10 minutes are full
def test_two_processes_equal_one_process_on_two_devices(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(VEC.override({"seeds": [], "seed": 3, "n_outer": 3,
                                            "checkpoint_every": 1}).to_dict()))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    single = tmp_path / "single"
    proc = subprocess.run([*CLI, "--config", str(cfg), "--out", str(single)],
                          env=_env(2, scratch), cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]

    multi = tmp_path / "multi"
    _two_processes(["--config", str(cfg), "--out", str(multi), "--n-outer", "2"], tmp_path)
    outs = _two_processes(["--resume", str(multi), "--n-outer", "3"], scratch)
    assert f"run dir:        {multi}" in outs[0]
    assert str(multi) not in outs[1].split("run dir:")[-1]  # process 1 wrote elsewhere

    assert _max_diff(single / "ckpt_00000003.safetensors",
                     multi / "ckpt_00000003.safetensors") <= TOL
    # process 0 alone wrote the run: the same files as the 1-process run's, one writer's
    assert sorted(p.name for p in multi.iterdir()) == sorted(p.name for p in single.iterdir())
    rows = [json.loads(x) for x in (multi / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]
    # process 1's scratch directories were removed when it exited
    assert not list(scratch.glob("feudal-es-process-*")) and not list(
        tmp_path.glob("feudal-es-process-*"))


@pytest.mark.slow  # two processes train Rover-v0's defaults for 4 rounds (~40 s busy 2 cores)
def test_readme_two_process_recipe(tmp_path):
    """README "Several processes or hosts": its block, run as written with bash from a
    directory laid out like the repository's root (its port made free first)."""
    from test_readme_commands import TEXT, _scratch

    blocks = [b for b in re.findall(r"```bash\n(.*?)```", TEXT, re.S) if "--coordinator" in b]
    assert len(blocks) == 1, "the README's two-process block is gone or doubled"
    block = blocks[0].replace("127.0.0.1:12355", f"127.0.0.1:{_free_port()}")
    work = _scratch(tmp_path, ROOT)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "JAX_NUM_CPU_DEVICES")}
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.run(["bash", "-c", f"set -e\n{block}"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    run = work / "runs" / "rover-2proc"
    assert (run / "ckpt_00000004.safetensors").is_file(), proc.stdout[-3000:]
    assert proc.stdout.count(f"run dir:        {Path('runs/rover-2proc')}") == 1
    assert not list(tmp_path.glob("feudal-es-process-*"))
