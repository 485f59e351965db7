"""Registration of the bundled swarm envs with Gymnasium's own registry.

After ``envs.register()`` (``checkpoint=`` needs ``feudal_es.register()``, which also
installs the loader of trained runs: :func:`use_checkpoint_loader`)::

    import gymnasium
    env = gymnasium.make("feudal_es/CoverageSwarm-v0", num_agents=4)      # SwarmGymEnv
    venv = gymnasium.make_vec("feudal_es/CoverageSwarm-v0", num_envs=1024,
                              vectorization_mode="vector_entry_point")     # SwarmVectorEnv
    sel = gymnasium.make("feudal_es/CoverageSelector-v0",
                         checkpoint="runs/x/ckpt_00000010.safetensors")    # SelectorEnv

Ids, for ``<Name>`` in Coverage, Discovery, Dispersion, Rover, RoverMERL:

- ``feudal_es/<Name>Swarm-v0``: :class:`~envs.gym_wrappers.SwarmGymEnv` (the swarm as one
  env, action ``[N, 2]``); its ``vector_entry_point`` is
  :class:`~envs.gym_vector.SwarmVectorEnv` (every copy in one jitted ``vmap``).
- ``feudal_es/<Name>Selector-v0``: :class:`~envs.gym_wrappers.SelectorEnv` (one skill per
  agent; an executor carries it out for ``selector_period`` env steps).

Keyword arguments of ``make`` / ``make_vec``: the functional env's constructor arguments
(``num_agents``, ``max_steps``, ...; ``max_cycles`` is accepted for ``max_steps`` as with
the PettingZoo ids), ``render_mode``, and the wrapper's own: ``reward`` (Swarm);
``executor``, ``checkpoint``, ``deterministic``, ``selector_period``, ``jit_executor``
(Selector). Unknown names raise a ``TypeError`` listing the accepted ones.

Selector executor: ``executor=`` a callable (:data:`envs.gym_wrappers.Executor`), or
``checkpoint=`` a feudal-es run checkpoint (``ckpt_XXXX.safetensors``), whose trained
actor's executor head then acts with the chosen skills forced; the env is built with the
run's ``env_kwargs`` (so that the actor fits its observations), overridden by any given
here. A checkpoint of another env raises ``ValueError``. This layer knows no trained
actors: a checkpoint is read by the loader ``feudal_es`` installs
(:func:`use_checkpoint_loader`). With neither, the executor is
:func:`~envs.gym_wrappers.random_executor` (uniform random velocities, skill-agnostic: a
placeholder for API checks, not a meaningful SMDP).

Episode length: each spec's ``max_episode_steps`` is the env's default ``max_steps``
(Swarm) or ``ceil(max_steps / selector_period)`` decisions at the default period (Selector),
so ``gymnasium.make`` adds its ``TimeLimit``. The env also truncates itself at its own
``max_steps``; so a *shorter* ``max_steps`` needs nothing more, but a longer one (or a
shorter ``selector_period``) also needs ``max_episode_steps=`` given to ``make`` (the
``TimeLimit`` comes from the spec, which does not see the constructor arguments).

Registration is idempotent: calling :func:`register_bundled_gym_envs` again leaves the
registry as it is, without Gymnasium's "Overriding" warning. Entry
points are ``"module:function"`` strings and the spec's kwargs plain data (``core``: the
functional env's ``"module:Class"``), so ``spec.to_json()`` works.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym
import jax
import jax.numpy as jnp

from envs.base import SwarmEnv
from envs.gym_vector import SwarmVectorEnv
from envs.gym_wrappers import Executor, SelectorEnv, SwarmGymEnv
from envs.registration import (
    BUNDLED_ENVS,
    NAMESPACE,
    VERSION,
    _target_name,
    available_bundled_envs,
    build_core,
    load_env_class,
)

__all__ = ["DEFAULT_SELECTOR_PERIOD", "KINDS", "CheckpointLoader", "build_core", "gym_env_id",
           "make_selector_gym", "make_swarm_gym", "make_swarm_vector",
           "register_bundled_gym_envs", "register_gym_env", "use_checkpoint_loader"]

KINDS = ("Swarm", "Selector")
_MODULE = __name__
#: SelectorEnv's default env steps per decision (what the Selector specs' length assumes).
DEFAULT_SELECTOR_PERIOD: int = inspect.signature(SelectorEnv).parameters[
    "selector_period"].default

#: ``loader(path, core, deterministic) -> (executor, env_kwargs, num_skills)``: a run
#: checkpoint's trained executor with skills forced, the run's env kwargs and its skill
#: count; raises ``ValueError`` for a checkpoint of another env than ``core``.
CheckpointLoader = Callable[[str | os.PathLike, str, bool | None],
                            tuple[Executor, dict[str, Any], int]]
_checkpoint_loader: CheckpointLoader | None = None


def use_checkpoint_loader(loader: CheckpointLoader | None) -> None:
    """Install what ``checkpoint=`` of the Selector ids reads a run checkpoint with
    (``feudal_es.register()`` installs ``feudal_es.executors.checkpoint_executor``);
    ``None`` removes it."""
    global _checkpoint_loader
    _checkpoint_loader = loader


def gym_env_id(name: str, kind: Literal["Swarm", "Selector"]) -> str:
    """The Gymnasium id of a bundled env's view, e.g. ``feudal_es/CoverageSwarm-v0``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return f"{NAMESPACE}/{name}{kind}-v{VERSION}"


# ------------------------------------------------------------------------------ building
def _name(core: str | type[SwarmEnv], kind: str) -> str:
    """The name of a view in messages, e.g. ``CoverageSwarm``."""
    return f"{load_env_class(core).__name__}{kind}"


def make_swarm_gym(core: str, *, reward: Literal["mean", "team"] = "mean",
                   render_mode: str | None = None, max_cycles: int | None = None,
                   **env_kwargs: Any) -> SwarmGymEnv:
    """Entry point of ``feudal_es/<Name>Swarm-v0``: ``SwarmGymEnv(core(**env_kwargs))``."""
    env = build_core(core, env_kwargs, max_cycles=max_cycles, name=_name(core, "Swarm"),
                     extra_kwargs=("reward",))
    return SwarmGymEnv(env, reward=reward, render_mode=render_mode)


def make_swarm_vector(core: str, num_envs: int = 1, *,
                      reward: Literal["mean", "team"] = "mean",
                      max_episode_steps: int | None = None, render_mode: str | None = None,
                      max_cycles: int | None = None, **env_kwargs: Any) -> SwarmVectorEnv:
    """Vector entry point of ``feudal_es/<Name>Swarm-v0`` (``gymnasium.make_vec``):
    ``num_envs`` copies in one :class:`SwarmVectorEnv` (``make_vec`` passes the spec's
    ``max_episode_steps`` unless given)."""
    env = build_core(core, env_kwargs, max_cycles=max_cycles, name=_name(core, "Swarm"),
                     extra_kwargs=("reward", "max_episode_steps", "num_envs"))
    return SwarmVectorEnv(env, num_envs, reward=reward, max_episode_steps=max_episode_steps,
                          render_mode=render_mode)


def make_selector_gym(core: str, *, executor: Executor | None = None,
                      checkpoint: str | os.PathLike | None = None,
                      deterministic: bool | None = None,
                      selector_period: int = DEFAULT_SELECTOR_PERIOD,
                      jit_executor: bool = True, render_mode: str | None = None,
                      max_cycles: int | None = None, **env_kwargs: Any) -> SelectorEnv:
    """Entry point of ``feudal_es/<Name>Selector-v0``: a :class:`SelectorEnv` over
    ``executor``, or over the trained executor of ``checkpoint`` (``deterministic``: its
    action mode instead of a sample; default the run's ``deterministic_eval``), or
    :func:`random_executor` when neither is given."""
    wrapper = ("executor", "checkpoint", "deterministic", "selector_period", "jit_executor")
    if checkpoint is not None:
        if executor is not None:
            raise ValueError("pass either executor= or checkpoint=, not both")
        if _checkpoint_loader is None:
            raise ValueError("checkpoint= reads a feudal-es run: call feudal_es.register() "
                             "first (it installs the loader), or pass executor=")
        executor, run_kwargs, num_skills = _checkpoint_loader(checkpoint, core, deterministic)
        env_kwargs = {**run_kwargs, **env_kwargs}
    elif deterministic is not None:
        raise ValueError("deterministic= applies to a checkpoint's executor; pass checkpoint=")
    env = build_core(core, env_kwargs, max_cycles=max_cycles, name=_name(core, "Selector"),
                     extra_kwargs=wrapper)
    if checkpoint is not None:
        _check_executor_fits(executor, num_skills, env, checkpoint)
    return SelectorEnv(env, executor=executor, selector_period=selector_period,
                       render_mode=render_mode, jit_executor=jit_executor)


# Gymnasium's make reads the creator's metadata (render modes) before calling it.
make_swarm_gym.metadata = SwarmGymEnv.metadata  # type: ignore[attr-defined]
make_selector_gym.metadata = SelectorEnv.metadata  # type: ignore[attr-defined]
make_swarm_vector.metadata = SwarmVectorEnv.metadata  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------ checkpoints
def _check_executor_fits(executor: Executor, num_skills: int, env: SwarmEnv,
                         path: str | os.PathLike) -> None:
    """Trace the executor once (no compute) so that an actor that does not fit the env's
    observations or skills fails here, with a message, not at the first step."""
    n = env.num_agents
    if num_skills != env.num_skills:
        raise ValueError(f"the actor of checkpoint {os.fspath(path)} has {num_skills} skills, "
                         f"{type(env).__name__} has {env.num_skills} {env.skill_names}")
    obs, _ = jax.eval_shape(env.reset, jax.random.key(0))
    adj = jax.ShapeDtypeStruct((n, n), jnp.float32)
    skills = jax.ShapeDtypeStruct((n,), jnp.int32)
    try:
        out = jax.eval_shape(executor, jax.random.key(0), obs, adj, skills)
    except Exception as e:  # shapes of another env configuration: say so
        raise ValueError(f"the actor of checkpoint {os.fspath(path)} does not fit "
                         f"{type(env).__name__} with these env kwargs ({e})") from e
    if out.shape != (n, 2):
        raise ValueError(f"the actor of checkpoint {os.fspath(path)} returns actions of shape "
                         f"{out.shape}, the env takes ({n}, 2)")


# ------------------------------------------------------------------------------ registry
def _default_max_steps(cls: type[SwarmEnv]) -> int | None:
    p = inspect.signature(cls).parameters.get("max_steps")
    return p.default if p is not None and isinstance(p.default, int) else None


def register_gym_env(name: str, target: str | type[SwarmEnv]) -> list[str]:
    """Register ``feudal_es/<name>Swarm-v0`` and ``feudal_es/<name>Selector-v0`` for a
    functional env (``"module:Class"`` or a class); returns the two ids.

    Re-registering the same spec is a no-op; a different one overrides (Gymnasium warns).
    """
    cls = load_env_class(target)
    steps = _default_max_steps(cls)
    core = _target_name(target)
    specs = {
        "Swarm": dict(entry_point=f"{_MODULE}:make_swarm_gym",
                      vector_entry_point=f"{_MODULE}:make_swarm_vector",
                      max_episode_steps=steps, kwargs={"core": core}),
        "Selector": dict(entry_point=f"{_MODULE}:make_selector_gym", vector_entry_point=None,
                         max_episode_steps=None if steps is None
                         else math.ceil(steps / DEFAULT_SELECTOR_PERIOD),
                         kwargs={"core": core}),
    }
    ids = []
    for kind, fields in specs.items():
        env_id = gym_env_id(name, kind)  # type: ignore[arg-type]
        existing = gym.registry.get(env_id)
        if existing is None or any(getattr(existing, k) != v for k, v in fields.items()):
            gym.register(env_id, **fields)
        ids.append(env_id)
    return ids


def register_bundled_gym_envs() -> list[str]:
    """Register every bundled env's Swarm and Selector ids; returns the ids."""
    return [i for name in available_bundled_envs()
            for i in register_gym_env(name, BUNDLED_ENVS[name])]
