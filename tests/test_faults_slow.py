"""Slow reliability checks (issue 8), run with ``make test-slow`` or
``.venv/bin/pytest tests/test_faults_slow.py -m slow -s``:

* ``feudal-es train`` SIGKILLed at random moments (one of them while a checkpoint is
  being written), ``--resume``d each time: the final metrics and parameters equal the
  uninterrupted run's exactly;
* ``feudal-es train`` sent SIGINT mid-round: it finishes that round, checkpoints, exits
  with status 130 and no traceback, and ``--resume`` completes the same run;
* 500 ES generations (JAX path and host path) with no jit tracing after warm-up and
  resident memory growth under 5% (the figures are printed);
* the host path with MAPPO (collection + update) is bit-for-bit deterministic.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import (
    HOST,
    TINY,
    VOLATILE,
    assert_trees_equal,
    cli_command,
    cli_env,
    host_trainer,
    metrics_rows,
    stable,
)

from feudal_es import checkpoint
from feudal_es.trainer import ESTrainer

pytestmark = pytest.mark.slow
RUN = TINY.override({"n_outer": 8, "checkpoint_every": 1, "keep_checkpoints": 2,
                     "plot_every": 100})


# `--import test_faults_slow` in a CLI subprocess: this module (and the ``helpers`` it
# imports, no other test module) loaded with every atomic write slowed down
if os.environ.get("FEUDAL_ES_TEST_SLOW_WRITES") == "1":
    _fsync = os.fsync

    def _slow_fsync(fd):
        """Hold every atomic write (checkpoints included) open for 0.5 s once its bytes are
        written, before the fsync and rename, so a SIGKILL can be aimed at it."""
        time.sleep(0.5)
        _fsync(fd)

    os.fsync = _slow_fsync


def _train(*args: str, cwd: Path, slow_writes: bool = False) -> subprocess.Popen:
    env = cli_env(FEUDAL_ES_TEST_SLOW_WRITES="1" if slow_writes else "0")
    extra = ["--import", "test_faults_slow"] if slow_writes else []
    return subprocess.Popen(cli_command("train", "--no-progress", *extra, *args), cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _final_tree(run: Path):
    t = ESTrainer.from_checkpoint(checkpoint.CheckpointManager(run).latest())
    return t.round, (t.ts, t.es_state)


def _assert_same_run(run: Path, full: Path) -> None:
    """Exactly the same metrics (every column but host timings) and final state."""
    got, want = stable(metrics_rows(run)), stable(metrics_rows(full))
    assert got == want
    r1, tree1 = _final_tree(run)
    r2, tree2 = _final_tree(full)
    assert r1 == r2 == RUN.n_outer
    assert_trees_equal(tree1, tree2)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("slow")
    (d / "run.json").write_text(json.dumps(RUN.to_dict()))
    return d


@pytest.fixture(scope="module")
def full(work) -> Path:
    """The uninterrupted CLI run (also fills the session's XLA cache for the others)."""
    proc = _train("--config", "run.json", "--out", "full", cwd=work)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    return work / "full"


def _latest_round(run: Path) -> int:
    latest = checkpoint.CheckpointManager(run).latest()
    return -1 if latest is None else int(latest.stem.split("_")[1])


def test_sigkill_at_random_points_then_resume_reproduces_the_run(work, full):
    rng = np.random.default_rng(int(os.environ.get("FEUDAL_ES_KILL_SEED", "8")))
    round_time = float(np.median([r["round_time"] for r in metrics_rows(full)[1:]]))
    run, kills = work / "killed", []
    while True:
        fresh = _latest_round(run) < 0
        aim_at_write = len(kills) == 2  # this one is aimed at a checkpoint being written
        proc = _train(*(["--config", "run.json", "--out", str(run)] if fresh
                        else ["--resume", str(run)]), cwd=work, slow_writes=aim_at_write)
        if len(kills) == 5:
            _, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, err
            break
        start = _latest_round(run)
        while _latest_round(run) <= start and proc.poll() is None:  # progress first
            time.sleep(0.01)
        if aim_at_write:
            how = f"during the write of checkpoint {_latest_round(run) + 1}"
            while not any(p.name.startswith(".ckpt_") for p in run.iterdir()):
                if proc.poll() is not None:
                    how = "(no checkpoint write caught)"
                    break
                time.sleep(0.005)
        else:
            delay = float(rng.uniform(0, 1.5 * round_time))
            time.sleep(delay)
            how = f"{delay:.2f} s after checkpoint {_latest_round(run)} appeared"
        if proc.poll() is not None:
            pytest.fail(f"the run finished before kill {len(kills) + 1}; "
                        f"stderr: {proc.stderr.read()}")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        kills.append((how, _latest_round(run)))
    print(f"\nkills (when, newest checkpoint after it): {kills}")
    assert len(kills) == 5 and kills[2][0].startswith("during the write of checkpoint")
    assert kills[2][1] == int(kills[2][0].split()[-1]) - 1  # the killed write left nothing
    _assert_same_run(run, full)


def test_sigint_finishes_the_round_then_resume_completes_the_same_run(work, full):
    run = work / "interrupted"
    proc = _train("--config", "run.json", "--out", str(run), cwd=work)
    while not (run / "metrics.jsonl").is_file() or not metrics_rows(run):
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.01)
    # at once: in round 0's bookkeeping or in round 1, either is fine (a fixed 0.5 s wait
    # here let the faster train step finish all 8 tiny rounds before the signal)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    done = len(metrics_rows(run))
    assert 1 <= done < RUN.n_outer and _latest_round(run) == done  # that round finished
    assert f"finishing the round in progress ({done - 1} done so far)" in err or \
        f"finishing the round in progress ({done} done so far)" in err
    assert f"finished the round in progress and checkpointed: {done} rounds done" in err
    assert "Traceback" not in err and f"--resume {run}" in err
    proc = _train("--resume", str(run), cwd=work)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    _assert_same_run(run, full)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


@pytest.mark.parametrize("path", ["jax", "host"])
def test_500_generations_no_retracing_and_flat_memory(tmp_path, path):
    """500 ES rounds (``mode='es'``, checkpoint every 25 rounds, learning curve every 5):
    after round 50 no function is traced again (JAX's own trace events are counted), and
    from round 100 to 500 resident memory grows by less than 5%. The memory warm-up is
    longer because matplotlib's caches fill over the first few dozen plots (then flat);
    the training loop alone is flat from the first rounds (docs/RELIABILITY.md)."""
    traces = []
    counting = [True]

    def listener(event: str, duration: float, **kwargs) -> None:
        if counting[0] and event == "/jax/core/compile/jaxpr_trace_duration":
            traces.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    overrides = {"mode": "es-selector", "n_outer": 500, "checkpoint_every": 25, "plot_every": 5,
                 "keep_checkpoints": 2}
    if path == "jax":
        t = ESTrainer(TINY.override(overrides), tmp_path / "run")
    else:
        t = host_trainer(tmp_path / "run", config=HOST.override(overrides))
    marks: dict[int, tuple[int, int]] = {}

    def on_round(row: dict) -> None:
        if (row["round"] + 1) % 50 == 0:
            marks[row["round"] + 1] = (len(traces), _rss_bytes())

    t0 = time.perf_counter()
    try:
        t.run(on_round=on_round)
    finally:
        counting[0] = False
    wall = time.perf_counter() - t0
    growth = marks[500][1] / marks[100][1] - 1
    print(f"\n{path} path: 500 generations in {wall:.0f} s; traces at rounds 50, 100, ..., "
          f"500: {[marks[k][0] for k in sorted(marks)]}; RSS (MiB) at the same rounds: "
          f"{[round(marks[k][1] / 2**20, 1) for k in sorted(marks)]}; growth from round 100 "
          f"to 500: {100 * growth:+.2f}%")
    assert t.round == 500 and len(t.history) == 500
    assert len({marks[k][0] for k in marks}) == 1, "functions were traced again after warm-up"
    assert growth < 0.05


def test_host_path_with_mappo_is_bit_for_bit_deterministic(tmp_path):
    cfg = HOST.override({"mode": "merl"})
    a, b = host_trainer(tmp_path / "a", config=cfg), host_trainer(tmp_path / "b", config=cfg)
    a.run()
    b.run()
    assert stable(a.history) == stable(b.history)
    assert_trees_equal((a.ts, a.es_state), (b.ts, b.es_state))
    assert int(a.ts.update_step) == 2 and a.history[-1]["mappo/policy_loss"] is not None
    assert set(VOLATILE) & set(a.history[0])  # timings exist and were the only exclusion
