"""Bundled swarm environments and their PettingZoo / Gymnasium adapters.

:func:`register` registers the bundled envs with PettingZoo's registry
(``feudal_es/Coverage-v0``, ``feudal_es/Discovery-v0``, ``feudal_es/Dispersion-v0``,
``feudal_es/Rover-v0``, ``feudal_es/RoverMERL-v0``) and with Gymnasium's
(``feudal_es/CoverageSwarm-v0``, ``feudal_es/CoverageSelector-v0``, ...; see
:mod:`envs.gym_registration`). Importing ``envs`` registers nothing: registration is that
explicit call (``feudal_es.register()`` makes it too). The env classes themselves
(``envs.Coverage`` ...) are imported on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

from envs.base import EnvOut, SwarmEnv, auto_reset_step
from envs.gym_registration import register_bundled_gym_envs
from envs.gym_wrappers import SelectorEnv, SwarmGymEnv, random_executor
from envs.pettingzoo_env import SwarmParallelEnv
from envs.registration import (
    BUNDLED_ENVS,
    env_id,
    make_swarm_env,
    register_bundled_envs,
    register_swarm_env,
)

__all__ = [
    "BUNDLED_ENVS",
    "Coverage",
    "Discovery",
    "Dispersion",
    "EnvOut",
    "Rover",
    "RoverMERL",
    "SelectorEnv",
    "SwarmEnv",
    "SwarmGymEnv",
    "SwarmParallelEnv",
    "auto_reset_step",
    "env_id",
    "make_swarm_env",
    "random_executor",
    "register",
    "register_bundled_envs",
    "register_swarm_env",
]


def register() -> list[str]:
    """Register every bundled env with PettingZoo's registry and its Swarm and Selector
    views with Gymnasium's; idempotent and silent. Returns the ids."""
    return [*register_bundled_envs(), *register_bundled_gym_envs()]


def __getattr__(name: str) -> Any:
    """Lazy access to the bundled env classes (``envs.Coverage`` etc.)."""
    if name in BUNDLED_ENVS:
        module_name, _, attr = BUNDLED_ENVS[name].partition(":")
        return getattr(importlib.import_module(module_name), attr)
    raise AttributeError(f"module 'envs' has no attribute {name!r}")
