"""Pins: same seed, same machine, the same numbers before and after a refactor.

``tests/pins.json`` holds the digests (:mod:`pins`: every clock-free number of three fixed
runs, floats as ``float.hex``, tensors as SHA-256) recorded from the code *before* the
"write the MERL round once" refactor, with ``JAX_NUM_CPU_DEVICES=1`` (conftest's pin,
which the CLI subprocesses inherit) and ``n_outer`` 3; its ``machine`` entry says where.
Each scenario (``demo``, ``seeds``, ``merl_coexist``) is recorded again here, once per
session, and compared with it:

- **Same machine** (:func:`pins.machine` equal to the recorded one in CPU model, AVX-512
  flag, jax / jaxlib versions and device count, and no ``--xla_cpu_max_isa`` cap that the
  recording did not have; other ``XLA_FLAGS`` are ignored): every digest exactly, rows,
  checkpoint tensors and best selector alike. A failure names the scenario and the first
  differing path.
- **Another machine**: XLA:CPU emits other vector code on another CPU (or ISA cap), so
  float32 results round differently; the ES update ranks its candidates, so an ulp can
  flip a rank (or a sampled action) and later rounds then diverge discretely. Measured on
  the recording machine with ``XLA_FLAGS=--xla_cpu_max_isa=AVX2`` against AVX-512: the
  demo's rows differ by at most ~4e-6 relative in rounds 0-1 and discretely from round 2;
  the two-seed program's seed 0 flips already in round 0 (``selector_fitness`` 1.0 vs
  0.75, MAPPO's ``approx_kl`` by 1%), its seed 1 only from round 2. On a real CPU without
  AVX-512 (an AMD EPYC of this machine kind) the demo's round 0 flips too
  (``selector_fitness`` 1.0 vs 0.75): the cap does not emit all of another CPU's code.
  So off the recording machine only what is CPU-independent is pinned: ``merl_coexist``
  exactly (a tiny toy whose floats came out identical on AVX2 and AVX-512, and on that
  EPYC), and every row's keys and integer columns (round, env steps, invalid members)
  exactly, for the demo and each seed. No float of the CLI runs is compared there: a
  tolerance cannot absorb a flipped rank, so there the two CLI scenarios run under
  ``-m slow`` (``make test-slow``) and the default suite keeps ``merl_coexist``.

The recording runs the CLI twice (``feudal-es demo`` and ``--seeds 0 1``: two programs,
each compiled once, in two concurrent subprocesses) and the toy in a third: each
scenario is recorded in a fresh process at XLA's default optimization level
(:func:`pins.record_as_users_run`), since the test session itself compiles at ``O0``
(``tests/conftest.py``), which rounds the toy's floats otherwise. Off the recording
machine, where only the CLI runs' columns and integers are compared, those two run at the
session's level and share its compilation cache (faster; the toy still runs as users
run it).
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pins
import pytest
from helpers import TESTS

PINNED: dict[str, Any] = json.loads((TESTS / "pins.json").read_text())


def _isa(flags: str) -> str | None:
    """The ``--xla_cpu_max_isa`` cap in ``XLA_FLAGS``, if any (it changes the code XLA
    emits as another CPU would)."""
    m = re.search(r"--xla_cpu_max_isa=(\S+)", flags or "")
    return m.group(1).upper() if m else None


def same_machine(now: dict[str, Any], then: dict[str, Any]) -> bool:
    """Whether ``now`` is the machine of ``then`` for bit-exactness (see the module
    docstring): every entry but ``xla_flags`` equal, and the same ISA cap."""
    strip = lambda m: {k: v for k, v in m.items() if k != "xla_flags"}
    return (strip(now) == strip(then)
            and _isa(now.get("xla_flags", "")) == _isa(then.get("xla_flags", "")))


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The first path (``demo.rows[2].sigma``) where ``a`` and ``b`` differ, with both
    values; None when they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'recorded' if k in a else 'pinned'}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries recorded, {len(b)} pinned"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b and type(a) is type(b) else f"{path}: recorded {a!r}, pinned {b!r}"


def assert_exact(scenario: str, got: Any, want: Any) -> None:
    """``got == want`` exactly; the failure names the scenario and the first difference."""
    diff = first_difference(got, want, scenario)
    assert diff is None and got == want, f"{scenario} differs from tests/pins.json at {diff}"


def assert_structure(where: str, got: dict, want: dict) -> None:
    """A run's digest off the recording machine: every row's columns and integer columns
    exact (round, env steps, invalid members), and the number of checkpoint tensors."""
    rows, pinned = got["rows"], want["rows"]
    assert len(rows) == len(pinned), f"{where}.rows: {len(rows)} recorded, {len(pinned)} pinned"
    assert len(got["checkpoint"]) == len(want["checkpoint"]), f"{where}.checkpoint: tensors"
    for i, (g, w) in enumerate(zip(rows, pinned, strict=True)):
        assert g.keys() == w.keys(), f"{where}.rows[{i}]: columns {sorted(g.keys() ^ w.keys())}"
        ints = {k: v for k, v in w.items() if isinstance(v, int)}
        assert {k: g[k] for k in ints} == ints, f"{where}.rows[{i}]: integer columns"


def compare(scenario: str, got: Any, want: Any, exact: bool) -> None:
    """The oracle of one scenario (see the module docstring)."""
    if exact or scenario == "merl_coexist":
        assert_exact(scenario, got, want)
    elif scenario == "demo":
        assert_structure(scenario, got, want)
    else:  # seeds: one digest per seed directory
        assert got.keys() == want.keys(), f"{scenario}: seeds {sorted(got)} vs {sorted(want)}"
        for s in want:
            assert_structure(f"{scenario}.{s}", got[s], want[s])


@pytest.fixture(scope="module")
def recorded(request):
    """Each scenario recorded at most once per session, only when selected (``-k
    merl_coexist`` does not run the CLI). The two CLI scenarios are separate processes
    that each compile the demo config (one seed, two seeds batched: two programs), so the
    selected ones start together, in the background, when the first test asks."""
    selected = {item.callspec.params["scenario"] for item in request.session.items
                if getattr(item, "function", None) is test_same_seed_same_numbers}
    cache: dict[str, Any] = {}
    # off the recording machine the CLI runs' floats are not compared: they run at the
    # session's optimization level, which compiles faster (the toy is compared exactly
    # everywhere, so it is always recorded as users run it)
    exact = same_machine(pins.machine(), PINNED["machine"])
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {s: pool.submit(pins.record_as_users_run, PINNED["n_outer"], (s,), exact)
                   for s in ("demo", "seeds") if s in selected}

        def get(scenario: str) -> tuple[Any, dict[str, Any]]:
            if scenario not in cache:
                out = (futures[scenario].result() if scenario in futures
                       else pins.record_as_users_run(PINNED["n_outer"], (scenario,)))
                cache[scenario] = (out[scenario], out["machine"])
            return cache[scenario]

        yield get


def test_the_pins_file_is_the_recording():
    assert set(PINNED) == {"n_outer", "machine", *pins.SCENARIOS}
    assert PINNED["n_outer"] == 3 and PINNED["machine"]["devices"] == 1


def _scenarios() -> list[Any]:
    """Every scenario; off the recording machine the two CLI runs are ``slow``: there they
    pin only each row's keys and integer columns, for about 50 s of the default suite's
    two workers (two programs compiled in two subprocesses)."""
    on_it = same_machine(pins.machine(), PINNED["machine"])
    return [pytest.param(s, marks=() if on_it or s == "merl_coexist" else pytest.mark.slow)
            for s in pins.SCENARIOS]


@pytest.mark.parametrize("scenario", _scenarios())
def test_same_seed_same_numbers(recorded, scenario):
    got, machine = recorded(scenario)
    compare(scenario, got, PINNED[scenario], exact=same_machine(machine, PINNED["machine"]))


# --- the oracle can fail --------------------------------------------------------------
def _bump(h: str, rel: float) -> str:
    return (float.fromhex(h) * (1 + rel)).hex()


def test_comparisons_catch_a_changed_number():
    """One ulp anywhere fails the exact comparison, and names the path; off the recording
    machine, a changed integer column or a changed merl_coexist number fails, while the
    CLI runs' floats (which another CPU rounds otherwise) are not compared."""
    demo = json.loads(json.dumps(PINNED["demo"]))
    demo["rows"][1]["sigma"] = _bump(demo["rows"][1]["sigma"], 2 ** -23)
    with pytest.raises(AssertionError, match=r"demo\.rows\[1\]\.sigma"):
        compare("demo", demo, PINNED["demo"], exact=True)
    compare("demo", demo, PINNED["demo"], exact=False)
    steps = json.loads(json.dumps(PINNED["demo"]))
    steps["rows"][0]["env_steps"] += 1
    with pytest.raises(AssertionError, match=r"demo\.rows\[0\]: integer columns"):
        compare("demo", steps, PINNED["demo"], exact=False)
    seeds = json.loads(json.dumps(PINNED["seeds"]))
    seeds["1"]["rows"][2]["env_steps"] += 1
    with pytest.raises(AssertionError, match=r"seeds\.1\.rows\[2\]"):
        compare("seeds", seeds, PINNED["seeds"], exact=False)
    toy = json.loads(json.dumps(PINNED["merl_coexist"]))
    toy["theta"][0] = _bump(toy["theta"][0], 2 ** -23)
    with pytest.raises(AssertionError, match=r"merl_coexist\.theta\[0\]"):
        compare("merl_coexist", toy, PINNED["merl_coexist"], exact=False)


def test_machine_identity():
    then = PINNED["machine"]
    assert same_machine({**then, "xla_flags": "--xla_dump_to=/tmp/x"}, then)
    assert not same_machine({**then, "xla_flags": "--xla_cpu_max_isa=AVX2"}, then)
    assert not same_machine({**then, "avx512": not then["avx512"]}, then)
    assert not same_machine({**then, "devices": 2}, then)
    assert not same_machine({**then, "jaxlib": "0.0.0"}, then)
