"""Argument checks shared by every configuration and constructor of the project.

Errors a user can cause name the offending field: ``TypeError`` for a wrong type,
``ValueError`` for a value out of range. ``name`` is what the message calls the field
(``"MAPPOConfig.lr"``, ``"num_agents"``). This module sits in the lowest layer (``envs``)
so that ``envs``, ``agents`` and ``feudal_es`` share it without breaking the dependency
direction; ``feudal_es.es`` keeps its own (its imports are limited by the reference API).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["check_bool", "check_int", "check_ints", "check_number"]


def check_int(name: str, value: Any, minimum: int | None = None) -> int:
    """``value`` as an ``int`` (``bool`` refused), at least ``minimum`` if given."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_ints(name: str, value: Any, minimum: int | None = None,
               allow_empty: bool = True) -> tuple[int, ...]:
    """A tuple of ints, each checked by :func:`check_int` (``name[i]`` in its message)."""
    if not isinstance(value, tuple):
        raise TypeError(f"{name} must be a tuple of ints, got {type(value).__name__}")
    if not value and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    return tuple(check_int(f"{name}[{i}]", v, minimum) for i, v in enumerate(value))


def check_number(name: str, value: Any, low: float = -math.inf, high: float = math.inf,
                 low_open: bool = False) -> float:
    """A finite real number in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < low or value > high or (low_open and value == low):
        bounds = []
        if low > -math.inf:
            bounds.append(f"{'>' if low_open else '>='} {low:g}")
        if high < math.inf:
            bounds.append(f"<= {high:g}")
        raise ValueError(f"{name} must be finite{' and ' if bounds else ''}"
                         f"{' and '.join(bounds)}, got {value}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    """A real ``bool`` (``1`` / ``"yes"`` refused: JSON and ``--set`` give true bools)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value
