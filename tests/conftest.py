"""Session-wide test setup.

One persistent XLA compilation cache per test session (a fresh temporary directory, so
nothing carries over between sessions): the CLI tests run ``feudal-es`` as subprocesses,
and with the cache they reuse what the in-process tests already compiled for the same
tiny configuration instead of compiling it again in every process. Must run before jax
is imported, hence here. An explicit ``JAX_COMPILATION_CACHE_DIR`` is respected.

One JAX CPU device (``JAX_NUM_CPU_DEVICES=1``, inherited by the CLI subprocesses) unless
the environment says otherwise: ``import feudal_es`` would otherwise give one per core
(``feudal_es.devices``), and whether a process gets them depends on whether something ran
JAX before that import. Tests that compare a subprocess with this process need both on
the same device count (it can change float rounding in the last bits); the sharded
path has its own tests (test_sharding, test_devices).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from pins import TEST_XLA_OPT  # pins.py imports no jax at module level

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="feudal-es-test-xla-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "1")
# compile without LLVM's optimizations and with XLA:CPU's elemental emitters instead of its
# MLIR fusion emitters (:data:`pins.TEST_XLA_OPT`, unless XLA_FLAGS already choose a
# level): the tests' tiny programs spend far more time compiling than running, and the
# tests compare programs of one session with each other, never with XLA's defaults
# (tests/test_pins.py records its CLI runs with XLA's defaults, where they are bit-exact on
# the recording machine)
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " "
                               + TEST_XLA_OPT).strip()
# cache every compilation, not only those over JAX's default 1 s: the CLI subprocesses
# recompile many small programs the session has compiled already
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# The files whose tests take longest, longest first. ``make test`` hands whole files to
# its two workers (``--dist loadfile``) in collection order (``--no-loadscope-reorder``):
# started first, these end while the many short files fill the other worker, instead of
# one of them starting last and leaving a worker idle (xdist's default order, by number
# of tests, put the few-test long files last). Per-file times: ``--durations``.
LONGEST_FIRST = ("test_cli.py", "test_pins.py", "test_readme_commands.py",
                 "test_pretrain.py", "test_host_workers.py", "test_experiments.py",
                 "test_mappo.py", "test_seeds.py", "test_reliability.py",
                 "test_cli_errors.py", "test_transfer.py", "test_write_failures.py",
                 "test_recurrent.py", "test_sharding.py", "test_readme.py")


def pytest_collection_modifyitems(config, items) -> None:
    """Collect :data:`LONGEST_FIRST`'s files first, in its order; the rest as found."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
