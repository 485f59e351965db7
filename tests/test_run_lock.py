"""One writer per run directory (issue 30): the lock on ``RUN_DIR/.lock``
(:mod:`feudal_es.runlock`).

With the real CLI in subprocesses: two ``feudal-es train`` with one ``--out`` started
together — one trains, the other is refused with one line naming the holder (pid, host,
start time, command), and the run's rows are complete and in order; a run frozen while
training holds its lock against ``--resume``, and once it is SIGKILLed its lock is taken
over by ``--resume``, which completes the run. In process: ``ESTrainer.resume`` and
``ESTrainer.run`` refuse a directory another process holds; the lock is re-entrant and
leaves no trace in a directory it created when nothing else was written.
Every run is the shared TINY config, so the session's compile cache serves them all.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, TESTS, TINY, metrics_rows

from feudal_es.runlock import LOCK_NAME, RunDirInUse, RunLock, holder
from feudal_es.trainer import ESTrainer


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
    return env


def _start(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "feudal_es.cli", *args], cwd=cwd,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "feudal_es.cli", *args], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("lock")
    (d / "tiny.json").write_text(json.dumps(TINY.to_dict()))
    return d


def _holds(run: Path, pid: int) -> bool:
    note = holder(run, wait=0)
    return note is not None and note.get("pid") == pid


def test_two_writers_started_together_one_is_refused_naming_the_holder(work):
    run = work / "together"
    args = ("train", "--config", "tiny.json", "--out", str(run), "--no-progress")
    procs = [_start(*args, cwd=work) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert sorted(p.returncode != 0 for p in procs) == [False, True], outs
    ok = 0 if procs[0].returncode == 0 else 1
    out, err = outs[1 - ok]
    assert "Traceback" not in out + err and len(err.strip().splitlines()) == 1, err
    assert (f"run directory {run} is in use by another feudal-es process (pid "
            f"{procs[ok].pid} on host {socket.gethostname()}, started ") in err
    assert ": feudal-es train --config tiny.json --out " in err
    assert "wait for it to end or choose another --out" in err
    assert "training" not in out  # refused before the banner, before any compute
    assert [r["round"] for r in metrics_rows(run)] == [0, 1, 2]  # one run, complete
    assert sorted(p.name for p in run.glob("ckpt_*")) == [
        f"ckpt_0000000{r}.safetensors" for r in (1, 2, 3)]


@pytest.mark.slow  # ~20 s: a CLI run killed, then resumed (refusals: default)
def test_a_killed_runs_lock_is_taken_over_by_resume(work):
    """Frozen (SIGSTOP) after its first checkpoint, the run still holds its lock and
    ``--resume`` is refused naming it; SIGKILLed, its lock goes with it (its note stays)
    and ``--resume`` takes the directory over and completes the run."""
    run = work / "killed"
    proc = _start("train", "--config", "tiny.json", "--out", str(run), "--no-progress",
                  cwd=work)
    try:
        deadline = time.monotonic() + 240
        while not (run / "ckpt_00000001.safetensors").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no first checkpoint within 240 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGSTOP)
        assert _holds(run, proc.pid)
        refused = _cli("train", "--resume", str(run), "--no-progress", cwd=work)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert f"is in use by another feudal-es process (pid {proc.pid} on host" in \
            refused.stderr and "wait for it to end, then resume it" in refused.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert _holds(run, proc.pid)  # the dead holder's note, not a lock
    done = _cli("train", "--resume", str(run), "--no-progress", cwd=work)
    assert done.returncode == 0, done.stderr
    assert [r["round"] for r in metrics_rows(run)] == [0, 1, 2]


@pytest.fixture
def held(tmp_path):
    """A directory whose lock another process holds (until the test ends)."""
    run = tmp_path / "held"
    code = ("import sys, time; from feudal_es.runlock import RunLock; "
            "RunLock(sys.argv[1]).acquire(); print('locked', flush=True); time.sleep(300)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run)], env=_env(),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield run, proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_python_api_refuses_a_directory_another_process_writes(held, tmp_path):
    run, pid = held
    with pytest.raises(RunDirInUse, match=rf"pid {pid} on host .*then resume it"):
        ESTrainer.resume(run)
    trainer = ESTrainer(TINY, run)
    with pytest.raises(RunDirInUse, match=rf"in use by another feudal-es process \(pid {pid}"):
        trainer.run()
    assert trainer.round == 0 and sorted(p.name for p in run.iterdir()) == [LOCK_NAME]


def test_lock_is_reentrant_and_a_directory_it_created_goes_again(tmp_path):
    run = tmp_path / "new" / "run"
    with RunLock(run) as outer:
        assert outer.held and _holds(run, os.getpid())
        with RunLock(run):  # the CLI's lock, then the trainer's, in one process
            pass
        assert _holds(run, os.getpid())  # still held by the outer one
    assert not run.exists()  # nothing else was written: no trace
    with RunLock(run):
        (run / "config.json").write_text("{}")
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME, "config.json"]
