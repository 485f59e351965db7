"""Many seeds in one program (``ESTrainer`` with two or more ``config.seeds``): the seeds
trained together equal the same seeds trained one by one, round by round (ES, fitness and
MAPPO columns of every row, the final train and ES states), each in its own run directory
that the single-seed tools read; the group resumes exactly; host envs are refused with a
clear message; one listed seed is a one-seed run of that seed.

The group runs as users run it on this machine kind: in a process with two CPU devices,
the seeds split over them (``XLA_FLAGS`` must be set before jax starts, hence a
subprocess; this process, pinned to one device by conftest, trains the seeds one by one).
Together and one by one are different XLA programs (vmapped, sharded), so floats are
compared to a stated tolerance; exact equality only where the same program reruns (the
resumed group against the uninterrupted one, both in the subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT, VEC, VOLATILE, assert_trees_close, assert_trees_equal

from feudal_es.rundir import seed_dirs
from feudal_es.trainer import ESTrainer

RTOL, ATOL = 1e-4, 1e-5  # float32 reassociation over 2 rounds of Adam steps


def assert_rows_close(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            if k in VOLATILE:
                continue
            if isinstance(x[k], float) and y[k] is not None:
                assert x[k] == pytest.approx(y[k], rel=RTOL, abs=ATOL), (x["round"], k)
            else:
                assert x[k] == y[k], (x["round"], k)


CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    import jax
    from helpers import VEC
    from feudal_es.trainer import ESTrainer
    assert len(jax.devices()) == 2, jax.devices()
    out = Path(sys.argv[1])
    group = ESTrainer(VEC, out / "group")
    assert group.many and group.seeds == (3, 5)
    assert group.batched.devices == 2  # the two seeds split over the two devices
    group.run()
    ESTrainer(VEC, out / "part").run(rounds=1)
    back = ESTrainer.resume(out / "part")
    assert back.many and back.round == 1
    back.run()
    try:
        ESTrainer(VEC, out / "part").run()
        raise SystemExit("a directory holding a run was not refused")
    except ValueError as e:
        assert "already holds a run" in str(e), e
""")


def rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def final_state(run: Path) -> ESTrainer:
    return ESTrainer.from_checkpoint(run / "ckpt_00000002.safetensors")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The subprocess's run directories: ``group`` (uninterrupted), ``part`` (1 round,
    then resumed to the end)."""
    out = tmp_path_factory.mktemp("seeds")
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        " --xla_force_host_platform_device_count=2").strip()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                         env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", CHILD, str(out)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.mark.heavy
def test_seeds_together_equal_seeds_one_by_one(runs, tmp_path):
    group = seed_dirs(runs / "group")
    assert list(group) == [3, 5]
    for seed, d in group.items():
        alone = ESTrainer(VEC.for_seed(seed), tmp_path / f"alone{seed}")
        alone.run()
        assert_rows_close(rows(d), alone.history)
        back = final_state(d)
        assert_trees_close(back.ts, alone.ts, RTOL, ATOL)
        assert_trees_close(back.es_state, alone.es_state, RTOL, ATOL)
    assert rows(group[3]) != rows(group[5])  # the seeds differ: the oracle is not vacuous


@pytest.mark.heavy
def test_each_seed_is_a_run_directory(runs):
    run = runs / "group"
    assert json.loads((run / "config.json").read_text())["seeds"] == [3, 5]
    for seed, d in seed_dirs(run).items():
        cfg = json.loads((d / "config.json").read_text())
        assert cfg["seed"] == seed and cfg["seeds"] == []
        assert [r["round"] for r in rows(d)] == [0, 1]
        assert sorted(p.name for p in d.glob("ckpt_*")) == [
            "ckpt_00000001.safetensors", "ckpt_00000002.safetensors"]
        assert (d / "best_selector.safetensors").is_file()


@pytest.mark.heavy
def test_group_resumes_exactly(runs):
    """Same program, same machine: the resumed group repeats the uninterrupted one."""
    for seed, d in seed_dirs(runs / "part").items():
        whole = runs / "group" / d.name
        strip = lambda rs: [{k: v for k, v in r.items() if k not in VOLATILE} for r in rs]
        assert strip(rows(d)) == strip(rows(whole)), seed
        a, b = final_state(d), final_state(whole)
        assert_trees_equal((a.ts, a.es_state), (b.ts, b.es_state))


def test_host_envs_are_refused_and_one_listed_seed_is_a_one_seed_run(tmp_path):
    with pytest.raises(ValueError, match=r"host path.*one at a time"):
        ESTrainer(VEC.override({"env": "line_envs:Line", "env_kwargs": {}}), tmp_path)
    one = ESTrainer(VEC.override({"seeds": [1]}), tmp_path)
    assert one.seeds == (1,) and one.many is False
