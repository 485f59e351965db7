"""feudal-es: ES-evolved selectors over MAPPO-trained executors for multi-agent swarms.

A facade without side effects: importing the package imports nothing heavy and changes
nothing (no env registration, no JAX device setup). What an entry point calls:

- :func:`register` — the bundled envs in PettingZoo's and Gymnasium's registries;
- :func:`use_cpu_cores` — one JAX CPU device per core (before JAX runs anything), so the
  ES population and many seeds use every core of a CPU host;
- :func:`train` / :func:`resume` — a run of a :class:`TrainerConfig`, one seed or many.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ESConfig", "ESTrainer", "MAPPOConfig", "TrainerConfig", "register", "resume",
           "train", "use_cpu_cores"]

_WHERE = {"register": "feudal_es.api", "resume": "feudal_es.api", "train": "feudal_es.api",
          "use_cpu_cores": "feudal_es.devices", "ESTrainer": "feudal_es.trainer",
          "TrainerConfig": "feudal_es.config", "ESConfig": "feudal_es.evolution",
          "MAPPOConfig": "feudal_es.mappo"}


def __getattr__(name: str) -> Any:
    """The public names, imported on first use."""
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'feudal_es' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
