"""Env ids to the path they train on: the pure-JAX path or the host (PettingZoo) path.

An id is a PettingZoo registry id (the bundled ``feudal_es/...`` envs, anything a user
registered with ``pettingzoo.register``), ``jaxmarl/<name>`` (a JaxMARL env, pure JAX,
with the ``jaxmarl`` extra) or ``"module:attr"`` naming a ``SwarmEnv`` class, an env
instance or a factory. Resolving ``"module:attr"`` imports and calls code, so an
id read from a file (a run directory, a checkpoint) never resolves that way: it raises
:class:`UntrustedEnvError` naming the ``--env`` the user can pass if they trust it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from envs.base import SwarmEnv
from envs.registration import register_bundled_envs
from feudal_es.env_factory import CodeEnv, RegisteredEnv
from feudal_es.env_factory import to_parallel as _to_parallel

if TYPE_CHECKING:
    from feudal_es.config import TrainerConfig
    from feudal_es.env_defaults import EnvDefaults

__all__ = [
    "JAXMARL_PREFIX",
    "ResolvedEnv",
    "UntrustedEnvError",
    "apply_env_defaults",
    "is_code_reference",
    "observation_kind",
    "registered_ids",
    "resolve_env",
    "resolve_stored_env",
    "trainable_ids",
]

JAXMARL_PREFIX = "jaxmarl/"  # jaxmarl/<name>: a JaxMARL env on the JAX path (optional extra)


@dataclasses.dataclass
class ResolvedEnv:
    """An env id resolved to the path it trains on.

    ``kind == "jax"``: ``core`` is the functional :class:`envs.base.SwarmEnv`.
    ``kind == "host"``: ``make(**extra)`` builds one PettingZoo ``ParallelEnv`` instance
    (for an id resolved here a picklable :mod:`feudal_es.env_factory` factory, so worker
    processes can build the env too).
    """

    env_id: str
    kind: str
    core: SwarmEnv | None = None
    make: Callable[..., Any] | None = None


class UntrustedEnvError(ValueError):
    """An env id read from a file (a run directory, a checkpoint) names code to import and
    call (``"module:attr"``). Files are data: the user must name such an env themselves."""

    def __init__(self, env_id: str, source: str):
        super().__init__(
            f"{source} names the env {env_id!r}, a 'module:attr' that would be imported and "
            "called to build it; a run directory or checkpoint is data, so feudal-es does "
            "not import or call what it names. If you trust it, name the env yourself: add "
            f"`--env {env_id}` to the command (Python: pass env={env_id!r})")
        self.env_id, self.source = env_id, source


def is_code_reference(env_id: str) -> bool:
    """True for ``"module:attr"`` ids (resolving them imports and calls code); registry
    ids such as ``feudal_es/Coverage-v0`` are not."""
    return ":" in env_id and "/" not in env_id.partition(":")[0]


def registered_ids() -> list[str]:
    """Every id in PettingZoo's parallel and AEC registries (bundled ones included) and,
    when ``jaxmarl`` is installed, its envs as ``jaxmarl/<name>``."""
    import pettingzoo

    from envs.jaxmarl_env import jaxmarl_ids

    register_bundled_envs()

    ids = set(pettingzoo.parallel_registry) | set(pettingzoo.aec_registry)
    return sorted(ids | {JAXMARL_PREFIX + name for name in jaxmarl_ids()})


def importable_ids() -> tuple[list[str], dict[str, list[str]]]:
    """``(trainable, missing)``: the PettingZoo-registered ids whose entry point imports
    (the bundled ones included), and by namespace the ids whose import fails (an extra
    not installed, e.g. ``pip install 'pettingzoo[atari]'``). Only installed code named
    by the registry is imported."""
    import pettingzoo

    register_bundled_envs()
    ok, missing = set(), {}
    for registry in (pettingzoo.parallel_registry, pettingzoo.aec_registry):
        for env_id, spec in registry.items():
            entry = spec.entry_point
            try:
                if isinstance(entry, str):
                    importlib.import_module(entry.partition(":")[0])
                ok.add(env_id)
            except Exception:  # a missing extra: ImportError, or whatever its import raises
                missing.setdefault(env_id.partition("/")[0], set()).add(env_id)
    missing = {ns: sorted(ids - ok) for ns, ids in missing.items() if ids - ok}
    return sorted(ok), missing


def _classify(env_id: str, obj: Any) -> ResolvedEnv | None:
    from envs.pettingzoo_env import SwarmParallelEnv

    if isinstance(obj, SwarmEnv):
        return ResolvedEnv(env_id, "jax", core=obj)
    if isinstance(obj, SwarmParallelEnv):
        return ResolvedEnv(env_id, "jax", core=obj.env)
    return None


def _resolve_code(env_id: str, kwargs: dict[str, Any]) -> ResolvedEnv:
    module_name, _, attr = env_id.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"env {env_id!r}: cannot import module {module_name!r} ({e})"
                         ) from None
    if not hasattr(module, attr):
        raise ValueError(f"env {env_id!r}: module {module_name!r} has no attribute {attr!r}")
    target = getattr(module, attr)
    if isinstance(target, type) and issubclass(target, SwarmEnv):
        return ResolvedEnv(env_id, "jax", core=target(**kwargs))
    found = _classify(env_id, target)
    if found is not None:
        if kwargs:
            raise ValueError(f"env {env_id!r} is an instance; env_kwargs {kwargs} "
                             "cannot be applied")
        return found
    if not callable(target):
        raise ValueError(f"env {env_id!r}: {attr} is neither an env nor an env factory")
    probe = target(**kwargs)
    found = _classify(env_id, probe)
    if found is not None:
        return found
    _to_parallel(probe)
    return ResolvedEnv(env_id, "host", make=CodeEnv(env_id, kwargs))


def _resolve_registered(env_id: str, kwargs: dict[str, Any]) -> ResolvedEnv | None:
    import pettingzoo

    for env_type, registry in (("parallel", pettingzoo.parallel_registry),
                               ("aec", pettingzoo.aec_registry)):
        if env_id not in registry:
            continue
        core = getattr(registry[env_id].entry_point, "core", None)
        if env_type == "parallel" and callable(core):  # a feudal-es functional env
            return ResolvedEnv(env_id, "jax", core=core(**kwargs))
        try:
            probe = pettingzoo.make(env_type, env_id, **kwargs)
        except pettingzoo.env_registry.exceptions.FailedToImport as e:
            namespace = env_id.partition("/")[0]
            raise ValueError(f"env {env_id!r} cannot be imported: it needs PettingZoo's "
                             f"{namespace!r} extra: pip install 'pettingzoo[{namespace}]' "
                             f"({e.__cause__ or e})") from None
        found = _classify(env_id, probe)
        if found is not None:
            return found
        return ResolvedEnv(env_id, "host", make=RegisteredEnv(env_type, registry[env_id],
                                                              kwargs))
    return None


def resolve_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
                source: str | None = None) -> ResolvedEnv:
    """Resolve a PettingZoo registry id (bundled or user-registered) or ``"module:attr"``.

    A feudal-es functional env (a registered bundled id, a ``SwarmEnv`` class/instance,
    or a factory returning a ``SwarmParallelEnv``) goes to the pure-JAX path; any other
    PettingZoo env to the host path. Unknown ids raise ``ValueError`` with close matches.

    ``source`` names the file the id was read from (``None``: the user's own code or
    command line). An id from a file resolves only through what this process already
    registered; a ``"module:attr"`` id from a file raises :class:`UntrustedEnvError`
    before anything is imported.
    """
    register_bundled_envs()
    kwargs = dict(env_kwargs or {})
    if env_id.startswith(JAXMARL_PREFIX):
        from envs.jaxmarl_env import make_jaxmarl

        return ResolvedEnv(env_id, "jax", core=make_jaxmarl(env_id[len(JAXMARL_PREFIX):],
                                                            **kwargs))
    if is_code_reference(env_id):
        if source is not None:
            raise UntrustedEnvError(env_id, source)
        return _resolve_code(env_id, kwargs)
    found = _resolve_registered(env_id, kwargs)
    if found is not None:
        return found
    close = difflib.get_close_matches(env_id, registered_ids(), n=3, cutoff=0.5)
    hint = f"; did you mean {close}?" if close else ""
    raise ValueError(
        f"unknown env {env_id!r}{hint} (see `feudal-es envs`; a module that registers "
        "envs can be loaded with --import MODULE, or name a factory as 'module:attr')"
    )


def resolve_stored_env(env: str, env_kwargs: Mapping[str, Any], imports: Sequence[str],
                       user_env: str | None, path: str | os.PathLike) -> ResolvedEnv:
    """The env of a config read from checkpoint ``path``: the id the user named again
    (``user_env``, trusted), or the stored id as data (never a 'module:attr'; an id only
    a module registers raises naming the ``--import`` the run was started with)."""
    if user_env is not None:
        return resolve_env(env, env_kwargs)
    try:
        return resolve_env(env, env_kwargs, source=f"checkpoint {path}")
    except UntrustedEnvError:
        raise
    except ValueError as e:
        if not imports or not str(e).startswith("unknown env"):
            raise
        flags = " ".join(f"--import {m}" for m in imports)
        raise ValueError(f"the run's env {env!r} is not registered in this process; the "
                         f"run was started with {flags}: pass {flags} (a run directory "
                         "never imports modules itself)") from None


def observation_kind(space: Any) -> str:
    """``"image"`` for an observation space with an image entry (a Box of rank 2 or 3,
    alone or in a Dict: the CNN reads it), else ``"vector"``."""
    leaves = space.spaces.values() if hasattr(space, "spaces") and isinstance(
        space.spaces, Mapping) else [space]
    return "image" if any(len(getattr(s, "shape", None) or ()) >= 2 for s in leaves) \
        else "vector"


def apply_env_defaults(config: TrainerConfig, env: ResolvedEnv
                       ) -> tuple[TrainerConfig, EnvDefaults]:
    """``config`` with the settings it leaves open filled by the defaults of ``env``'s
    observation kind and skills (:func:`feudal_es.env_defaults.with_env_defaults`), and what
    was chosen. A host env is built once to read its spaces and ``skill_names`` (not
    reset or stepped: that is the run's checked probe, after its memory check); without
    ``skill_names`` it has one option unless ``num_skills`` is given."""
    from feudal_es.env_defaults import with_env_defaults

    if env.kind == "jax":
        core = env.core
        return with_env_defaults(config, observation_kind(core.observation_space),
                                 len(core.skill_names), named_skills=True)
    from feudal_es.pettingzoo_host import HostEnvSpec

    probe = env.make()
    try:
        spec = HostEnvSpec(probe, num_skills=config.num_skills)
        named = bool(getattr(probe, "skill_names", None))
    finally:
        close = getattr(probe, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()
    return with_env_defaults(config, observation_kind(spec.observation_space),
                             len(spec.skill_names) if named else None, named_skills=named)


def _reason(env_id: str, err: Exception) -> str:
    """Why ``env_id`` does not train, in one line (the error's own words)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    text = text.removeprefix(f"{env_id}: ")
    if isinstance(err, ValueError):
        return text
    if isinstance(err, ImportError):
        return f"needs a package that is not installed ({text})"
    return f"cannot be made with its default arguments ({type(err).__name__}: {text})"


def trainable_ids(env_ids: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``(trainable, refused)``: which of ``env_ids`` (registry ids or ``jaxmarl/<name>``,
    not bundled ones) a run accepts, and for each refused id why, in one line: each env
    is made once with its default arguments and checked as a run checks it (spaces the
    actor can read, agents that differ in groups it can form: :class:`HostEnvSpec`, or
    the JaxMARL adapter's checks). Made, not trained: an env that fails later is not seen."""
    import warnings

    from feudal_es.pettingzoo_host import HostEnvSpec

    ok: list[str] = []
    refused: dict[str, str] = {}
    for env_id in env_ids:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                env = resolve_env(env_id)
                if env.kind == "host":
                    probe = env.make()
                    HostEnvSpec(probe)
                    with contextlib.suppress(Exception):
                        probe.close()
        except Exception as e:  # any failure is the reason it is refused
            refused[env_id] = _reason(env_id, e)
        else:
            ok.append(env_id)
    return ok, refused
