"""A run directory written by an older feudal-es still resumes, evaluates and renders.

``tests/data/run-5b7130d`` is a 1-round run of a tiny Discovery config written by
feudal-es at 5b7130d, before the round was written once: its config keeps the selector
period under ``mappo`` (now ``actor.selector_period``) and its checkpoint names the
rollout's options ``rollout.held`` (now ``rollout.option``). Resumed here to 2 rounds, it
must give the round the old version gave after it (``expected_round_1.json``). That file
was written by another program (the old version, at XLA's default optimization level, on
one AMD EPYC), so floats are compared within a stated tolerance, never bit for bit (the
bit-exact pins are ``tests/test_pins.py``'s, run in one program): on a machine with the
recording's CPU name, jax and device count (``tests/pins.py``), every float within
``RTOL`` relative / ``ATOL`` absolute (seen: 2e-5 relative at most, on another EPYC and
at O0; a wrong restored key, optimizer state or option would move them by far more);
elsewhere the integer columns exactly and the floats finite (another CPU family rounds
differently, and ES rank flips make whole rounds diverge).
"""

from __future__ import annotations

import json
import math
import shutil

import pins
from helpers import TESTS, VOLATILE, metrics_rows

from feudal_es.evaluate import compare_selectors, load_trainer
from feudal_es.trainer import ESTrainer

OLD = TESTS / "data" / "run-5b7130d"
RTOL, ATOL = 1e-3, 1e-6


def test_an_older_run_resumes_and_repeats_the_old_next_round(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(OLD, run, ignore=shutil.ignore_patterns("expected_*"))
    expected = json.loads((OLD / "expected_round_1.json").read_text())
    trainer = ESTrainer.resume(run, n_outer=2)
    assert trainer.round == 1 and trainer.config.actor.selector_period == 5
    trainer.run()
    row = {k: v for k, v in metrics_rows(run)[1].items() if k not in VOLATILE}
    want = expected["row"]
    assert row.keys() == want.keys()
    mine = {k: v for k, v in pins.machine().items() if k != "xla_flags"}
    same_kind = mine == {k: v for k, v in expected["machine"].items() if k != "xla_flags"}
    for k, v in want.items():
        if isinstance(v, int) or v is None or isinstance(v, str):
            assert row[k] == v, k
        elif same_kind:
            assert math.isclose(row[k], v, rel_tol=RTOL, abs_tol=ATOL), (k, row[k], v)
        else:
            assert math.isfinite(row[k]), k


def test_an_older_run_evaluates(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(OLD, run, ignore=shutil.ignore_patterns("expected_*"))
    trainer, ckpt = load_trainer(run)
    result = compare_selectors(trainer, ckpt, episodes=2)
    assert [r["selector"] for r in result["selectors"]] == [
        str(run / "best_selector.safetensors"), f"{ckpt} (current selector)"]
    assert all(math.isfinite(r["fitness_mean"]) for r in result["selectors"])
