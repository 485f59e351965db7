"""The command's on-disk XLA cache (:func:`feudal_es.startup.enable_compile_cache`) keeps
the small programs too: a program that compiles in milliseconds is written to it, unless
the user's ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` says otherwise or
``FEUDAL_ES_COMPILE_CACHE=0`` turns the cache off. Each case is a fresh process (JAX reads
its cache settings once), run side by side."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILD = ("from feudal_es.startup import enable_compile_cache\n"
         "enable_compile_cache()\n"
         "import jax\n"
         "jax.jit(lambda x: x * 3.0 + 1.0)(2.0).block_until_ready()\n")


def test_small_programs_are_cached_unless_the_user_says_otherwise(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items()
            if k not in ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
                         "FEUDAL_ES_COMPILE_CACHE")}
    cases = {"default": {}, "user_minimum": {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "5"},
             "off": {"FEUDAL_ES_COMPILE_CACHE": "0"}}
    procs = {}
    for name, extra in cases.items():
        cache = tmp_path / name
        env = {**base, **extra, "JAX_COMPILATION_CACHE_DIR": str(cache)}
        procs[name] = subprocess.Popen([sys.executable, "-c", CHILD], env=env,
                                       stderr=subprocess.PIPE, text=True)
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (name, err)
    entries = {name: sorted(p.name for p in (tmp_path / name).glob("*"))
               if (tmp_path / name).exists() else [] for name in cases}
    assert entries["default"], entries
    assert not entries["user_minimum"] and not entries["off"], entries
