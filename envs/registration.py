"""Registration of the bundled swarm envs with PettingZoo's own registry.

After ``envs.register()`` (or ``feudal_es.register()``)::

    import pettingzoo
    env = pettingzoo.make("parallel", "feudal_es/Coverage-v0", num_agents=4)

Keyword arguments go to the functional env's constructor (e.g. ``num_agents``,
``max_steps``), except ``render_mode`` (the adapter's) and ``max_cycles`` (PettingZoo's
name for the episode length; mapped to ``max_steps``). Unknown names raise a
``TypeError`` that lists the accepted ones. The same ids are registered for
``pettingzoo.make("aec", ...)`` (the parallel env converted with ``parallel_to_aec``).

Registration is idempotent: calling :func:`register_bundled_envs` again leaves the
registry as it is, without PettingZoo's "overriding" warning.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Any

import pettingzoo
from pettingzoo.utils.conversions import parallel_to_aec

from envs.base import SwarmEnv
from envs.pettingzoo_env import SwarmParallelEnv

NAMESPACE = "feudal_es"
VERSION = 0

#: Bundled envs: name -> "module:Class" of the functional core.
BUNDLED_ENVS: dict[str, str] = {
    "Coverage": "envs.coverage:Coverage",
    "Discovery": "envs.discovery:Discovery",
    "Dispersion": "envs.dispersion:Dispersion",
    "Rover": "envs.rover:Rover",
    "RoverMERL": "envs.rover_merl:RoverMERL",
}

_ADAPTER_KWARGS = ("render_mode", "max_cycles")


def env_id(name: str) -> str:
    """The registry id of a bundled env, e.g. ``feudal_es/Coverage-v0``."""
    return f"{NAMESPACE}/{name}-v{VERSION}"


def load_env_class(target: str | type[SwarmEnv]) -> type[SwarmEnv]:
    """Resolve ``"module:Class"`` (or a class) to a :class:`SwarmEnv` subclass."""
    if isinstance(target, str):
        module_name, _, attr = target.partition(":")
        if not attr:
            raise ValueError(f"expected 'module:Class', got {target!r}")
        target = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(target, type) and issubclass(target, SwarmEnv)):
        raise TypeError(f"{target!r} is not a SwarmEnv subclass")
    return target


def build_core(target: str | type[SwarmEnv], env_kwargs: dict[str, Any], *,
               max_cycles: int | None = None, name: str | None = None,
               extra_kwargs: tuple[str, ...] = ()) -> SwarmEnv:
    """The functional env ``target(**env_kwargs)`` (``max_cycles``: PettingZoo's name for
    ``max_steps``). Unknown names raise a ``TypeError`` that lists the accepted ones: the
    constructor's, ``max_cycles``, ``render_mode`` and the caller's ``extra_kwargs`` (a
    wrapper's own); ``name`` names the env in the messages (default: the class)."""
    cls = load_env_class(target)
    name = name or cls.__name__
    params = inspect.signature(cls).parameters
    kwargs = dict(env_kwargs)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(kwargs) - set(params))
        if unknown:
            accepted = sorted({*params, *_ADAPTER_KWARGS, *extra_kwargs})
            raise TypeError(f"{name}: unknown keyword argument(s) {unknown}; "
                            f"accepted: {accepted}")
    if max_cycles is not None:
        if "max_steps" in kwargs and kwargs["max_steps"] != max_cycles:
            raise ValueError(f"{name}: max_cycles={max_cycles} and max_steps="
                             f"{kwargs['max_steps']} disagree (max_cycles is PettingZoo's "
                             "name for max_steps; pass one)")
        kwargs["max_steps"] = max_cycles
    return cls(**kwargs)


def make_swarm_env(
    target: str | type[SwarmEnv],
    *,
    render_mode: str | None = None,
    max_cycles: int | None = None,
    _id: str | None = None,
    **kwargs: Any,
) -> SwarmParallelEnv:
    """Build the functional env from ``kwargs`` and wrap it in :class:`SwarmParallelEnv`."""
    core = build_core(target, kwargs, max_cycles=max_cycles, name=_id)
    return SwarmParallelEnv(core, render_mode=render_mode)


class _EntryPoint:
    """Comparable creator for one registered env (parallel or AEC).

    Equality goes by ``key`` (not by class identity), so a reloaded ``envs`` module
    recognises its earlier registrations and registering stays idempotent.
    """

    def __init__(self, target: str | type[SwarmEnv], env_id: str, aec: bool = False):
        self.target, self.env_id, self.aec = target, env_id, aec
        self.key = ("feudal_es", _target_name(target), env_id, aec)

    def __call__(self, **kwargs: Any) -> Any:
        env = make_swarm_env(self.target, _id=self.env_id, **kwargs)
        return parallel_to_aec(env) if self.aec else env

    def core(self, *, max_cycles: int | None = None, **kwargs: Any) -> SwarmEnv:
        """The functional env alone, without the PettingZoo adapter (what the JAX path
        trains; the adapter builds per-agent views that a large swarm need not pay for)."""
        return build_core(self.target, kwargs, max_cycles=max_cycles, name=self.env_id)

    def __eq__(self, other: object) -> bool:
        return getattr(other, "key", None) == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        kind = "aec" if self.aec else "parallel"
        return f"<feudal_es {kind} entry point {self.target}>"


def _target_name(target: str | type) -> str:
    return target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"


def register_swarm_env(id: str, target: str | type[SwarmEnv]) -> None:
    """Register a functional env (``"module:Class"`` or a class) under ``id``.

    Registers both the ``"parallel"`` and the ``"aec"`` flavour. Re-registering the same
    target under the same id is a no-op; a different target overrides (PettingZoo warns).
    """
    for env_type, aec in (("parallel", False), ("aec", True)):
        entry = _EntryPoint(target, id, aec)
        registry = pettingzoo.parallel_registry if env_type == "parallel" else (
            pettingzoo.aec_registry
        )
        existing = registry.get(id)
        if existing is not None and existing.entry_point == entry:
            continue
        pettingzoo.register(env_type, id, entry_point=entry)


def available_bundled_envs() -> list[str]:
    """Names of the bundled envs whose module is present (no import)."""
    names = []
    for name, target in BUNDLED_ENVS.items():
        module_name = target.partition(":")[0]
        try:
            found = importlib.util.find_spec(module_name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            names.append(name)
    return names


def register_bundled_envs() -> list[str]:
    """Register every bundled env with PettingZoo's registry; returns the ids."""
    ids = []
    for name in available_bundled_envs():
        register_swarm_env(env_id(name), BUNDLED_ENVS[name])
        ids.append(env_id(name))
    return ids

