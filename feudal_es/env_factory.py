"""Picklable factories of host (PettingZoo) envs: what ``ResolvedEnv.make`` is for a
registry id or a ``"module:attr"``, so another process can build the same env.

The host workers (:mod:`feudal_es.host_workers`) build their env copies in fresh
processes (``spawn``), which have neither the closures of the process that resolved the
id nor what it registered at run time (``--import``, a ``pettingzoo.register`` in a
script). So a factory carries data, not a closure: :class:`RegisteredEnv` holds the
registry's own :class:`pettingzoo.env_registry.spec.EnvSpec` (its entry point is pickled
by reference: the module that defines it must be importable there, as it is when it is
on ``sys.path``, which ``spawn`` passes on), :class:`CodeEnv` the ``"module:attr"`` to
import again. Calling one builds one ``ParallelEnv`` (AEC envs converted); keyword
arguments are added to the env's own (e.g. ``render_mode``). Nothing here imports JAX.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

__all__ = ["CodeEnv", "RegisteredEnv", "to_parallel"]


def to_parallel(env: Any) -> Any:
    """A ParallelEnv (AEC envs converted); unwrap nothing else."""
    from pettingzoo import AECEnv, ParallelEnv
    from pettingzoo.utils.conversions import aec_to_parallel

    if isinstance(env, ParallelEnv):
        return env
    if isinstance(env, AECEnv):
        return aec_to_parallel(env)
    raise TypeError(f"expected a PettingZoo ParallelEnv or AECEnv, got {type(env).__name__}")


@dataclasses.dataclass(frozen=True)
class RegisteredEnv:
    """``pettingzoo.make(kind, spec, **kwargs, **extra)``: a registered env (``kind``:
    ``"parallel"``, returned as made, or ``"aec"``, converted to a ParallelEnv; ``spec``:
    its registry entry)."""

    kind: str
    spec: Any
    kwargs: dict = dataclasses.field(default_factory=dict)

    def __call__(self, **extra: Any) -> Any:
        import pettingzoo

        env = pettingzoo.make(self.kind, self.spec, **self.kwargs, **extra)
        return env if self.kind == "parallel" else to_parallel(env)


@dataclasses.dataclass(frozen=True)
class CodeEnv:
    """``module.attr(**kwargs, **extra)`` as a ParallelEnv, ``module`` imported on call
    (``env_id``: ``"module:attr"``, an env class or factory)."""

    env_id: str
    kwargs: dict = dataclasses.field(default_factory=dict)

    def __call__(self, **extra: Any) -> Any:
        module_name, _, attr = self.env_id.partition(":")
        target = getattr(importlib.import_module(module_name), attr)
        return to_parallel(target(**self.kwargs, **extra))
