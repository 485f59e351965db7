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
# compile without LLVM's optimizations (unless XLA_FLAGS already choose a level): the tests'
# tiny programs spend far more time compiling than running, and XLA:CPU's O0 code computes
# the same IEEE float32 results, only slower (tests/test_pins.py records its CLI runs
# at the default level, where they are bit-exact on the recording machine)
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " "
                               + TEST_XLA_OPT).strip()
# cache every compilation, not only those over JAX's default 1 s: the CLI subprocesses
# recompile many small programs the session has compiled already
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
