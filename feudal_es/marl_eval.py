"""Evaluation results as marl-eval's raw-data JSON (instadeepai/marl-eval, the format Mava
and BenchMARL export), so that the field's tools aggregate and plot them.

The layout, as marl-eval's README documents it::

    {env_name: {task_name: {algorithm_name: {run_name: {
        "step_<k>": {"step_count": int, metric: [one value per evaluation episode]},
        "absolute_metrics": {metric: [one value per episode]}}}}}}

:func:`marl_eval_data` builds it from rows of ``feudal-es eval`` (one algorithm per row,
one run each, one evaluation step at the env steps its checkpoint trained);
:func:`check_marl_eval` checks a dict against that layout (marl-eval itself pins an old
pandas, so it is not a dependency); :func:`write_marl_eval` writes it atomically.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from feudal_es.atomic import atomic_write_text

__all__ = ["RETURN", "check_marl_eval", "env_task", "marl_eval_data", "write_marl_eval"]

RETURN = "episode_return"  # the team fitness, under marl-eval's (Mava's) usual name


def env_task(env_id: str) -> tuple[str, str]:
    """``("feudal_es", "RoverMERL-v0")`` for ``"feudal_es/RoverMERL-v0"``: marl-eval's
    environment and task names (an id without a namespace is its own environment)."""
    env, _, task = env_id.rpartition("/")
    return (env or task), task


def marl_eval_data(env_id: str, rows: Sequence[Mapping[str, Any]],
                   task_suffix: str = "") -> dict[str, Any]:
    """The marl-eval dict of ``rows`` (each ``{"name", "step_count", "returns": [E],
    "metrics": {name: [E]}}``): algorithm ``name``, one run (``run_0``) with one evaluation
    step (``step_0``) and the same values as its ``absolute_metrics``."""
    env, task = env_task(env_id)
    algos: dict[str, Any] = {}
    for row in rows:
        name = str(row["name"])
        if name in algos:
            raise ValueError(f"two rows are named {name!r}: marl-eval keys algorithms by name")
        values = {RETURN: [float(v) for v in row["returns"]]}
        values.update({str(k): [float(x) for x in v] for k, v in row["metrics"].items()})
        algos[name] = {"run_0": {"step_0": {"step_count": int(row["step_count"]), **values},
                                 "absolute_metrics": values}}
    data = {env: {task + task_suffix: algos}}
    check_marl_eval(data)
    return data


def _fail(where: str, what: str) -> None:
    raise ValueError(f"not marl-eval's layout at {where}: {what}")


def _check_values(where: str, values: Mapping[str, Any], allow_step: bool) -> None:
    if not isinstance(values, Mapping) or not values:
        _fail(where, "expected a non-empty object of metrics")
    for metric, v in values.items():
        if metric == "step_count" and allow_step:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                _fail(f"{where}.step_count", f"expected an int >= 0, got {v!r}")
            continue
        if not isinstance(v, list) or not v or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                for x in v):
            _fail(f"{where}.{metric}", "expected a non-empty list of finite numbers")
    if allow_step and "step_count" not in values:
        _fail(where, "an evaluation step needs its step_count")


def check_marl_eval(data: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first place ``data`` departs from marl-eval's
    documented raw-data layout (every level non-empty; each run's keys ``step_<k>`` or
    ``absolute_metrics``; metrics lists of finite numbers)."""
    levels = ("environment", "task", "algorithm")

    def walk(node: Any, depth: int, where: str) -> None:
        if not isinstance(node, Mapping) or not node:
            _fail(where or "top", f"expected a non-empty object of {levels[depth]}s"
                  if depth < 3 else "expected a non-empty object of runs")
        for key, child in node.items():
            if depth < 3:
                walk(child, depth + 1, f"{where}.{key}" if where else str(key))
                continue
            run = f"{where}.{key}"
            if not isinstance(child, Mapping) or not child:
                _fail(run, "expected a non-empty object of steps")
            for step, values in child.items():
                if step == "absolute_metrics":
                    _check_values(f"{run}.{step}", values, allow_step=False)
                elif step.startswith("step_") and step[5:].isdigit():
                    _check_values(f"{run}.{step}", values, allow_step=True)
                else:
                    _fail(f"{run}.{step}", "a run's keys are step_<k> or absolute_metrics")

    walk(data, 0, "")


def write_marl_eval(path: str | os.PathLike, data: Mapping[str, Any]) -> Path:
    """Check ``data`` and write it to ``path`` atomically (JSON)."""
    check_marl_eval(data)
    return atomic_write_text(path, json.dumps(data, indent=1) + "\n")
