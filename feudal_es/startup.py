"""What an entry point does before its command runs: the process setup of ``feudal-es``.

In order (:func:`prepare`): the working directory becomes importable (appended, as under
``python -m``), library warnings go to stderr, the bundled envs are registered, XLA
compilations are cached on disk, and the modules named by ``--import`` are imported
(so the envs they register can be named). Nothing here runs at import time: importing
this module has no side effects (tests/test_layout.py).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["enable_compile_cache", "import_modules", "log_to_stderr", "prepare"]


def cwd_importable() -> None:
    """``--import my_envs`` and ``--env my_envs:MyEnv`` find modules in the working
    directory, as under ``python -m``. Appended, so a file there never shadows an installed
    package; only modules the user names on the command line are imported."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def log_to_stderr() -> None:
    """Library warnings (skipped updates, failed env episodes, signals) on stderr, once."""
    logger = logging.getLogger("feudal_es")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("feudal-es: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def enable_compile_cache() -> None:
    """Persist XLA compilations across runs (compile time dominates on CPU). Uses
    ``$JAX_COMPILATION_CACHE_DIR`` if set, else ``~/.cache/feudal-es/jax``; set
    ``FEUDAL_ES_COMPILE_CACHE=0`` to disable.

    Every compilation is kept, not only those over JAX's default second
    (``$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` still decides when set): a command
    also compiles hundreds of small programs (each array operation outside ``jit``,
    JaxMARL's env constructors), tens of milliseconds each, that loading from disk skips
    on the next run (``bench/RESULTS.md``)."""
    if os.environ.get("FEUDAL_ES_COMPILE_CACHE", "1") == "0":
        return
    import jax

    path = os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "feudal-es" / "jax")
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
    except OSError:
        return  # read-only home etc.: just compile
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def import_modules(names: Sequence[str] | None) -> None:
    """Import each module named by ``--import`` (one that cannot be found is a
    ``ValueError`` naming it; an error inside it is the user's code, reported as such by
    :mod:`feudal_es.errors`)."""
    for name in names or ():
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"--import {name}: {e}") from None


def prepare(imports: Sequence[str] | None) -> None:
    """Everything a command needs before it runs (see the module docstring)."""
    from feudal_es.api import register

    cwd_importable()
    log_to_stderr()
    register()
    enable_compile_cache()
    import_modules(imports)
