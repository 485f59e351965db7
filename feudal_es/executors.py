"""A trained run's executor as a plain callable: what the Gymnasium Selector ids
(``feudal_es/<Name>Selector-v0``) carry each chosen skill out with.

:func:`checkpoint_executor` is the loader ``feudal_es.register()`` installs in
:func:`envs.gym_registration.use_checkpoint_loader`, so the env layer reads a run
checkpoint without importing the trainer.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp

from agents import FeudalActor, GoalOption
from envs.base import SwarmEnv
from envs.gym_registration import gym_env_id
from envs.gym_wrappers import Executor
from envs.registration import BUNDLED_ENVS, _target_name
from feudal_es.theta import set_es_theta

__all__ = ["actor_executor", "checkpoint_executor"]


def actor_executor(actor: FeudalActor, deterministic: bool = True) -> Executor:
    """The executor of a trained :class:`agents.FeudalActor` with the skills forced.

    ``executor(key, obs, adj, skills) -> actor.act(key, obs, adj, skills).env_action``:
    the executor head conditioned on the given skill per agent, instead of the actor's own
    selector's choice. An actor with a ``GoalSelector`` also needs a sub-goal; it gets the
    one its goal head proposes for the current observation (re-proposed every env step,
    where the actor's own rollout holds it for ``selector_period`` steps). Pure, jittable.
    A recurrent executor has no such stateless form: it is refused.
    """
    if actor.recurrent:
        raise ValueError("a recurrent executor (actor.recurrent) carries a GRU state from "
                         "step to step; the selector-level env's frozen executor is "
                         "stateless, so it takes feed-forward actors only")

    def executor(key: jax.Array, obs: Any, adj: jax.Array, skills: jax.Array) -> jax.Array:
        option: Any = jnp.asarray(skills, jnp.int32)
        if actor.goal_dim > 0:
            option = GoalOption(option, actor.selector.goal(actor.selector_in(obs, adj)))
        return actor.act(key, obs, adj, option, deterministic).env_action

    return executor


def _stored_target(env_id: str | None) -> str | None:
    """The ``"module:Class"`` of a checkpoint's env id, without importing anything it
    names: a code reference as it is; a PettingZoo id through its registered entry point
    (the bundled ``feudal_es/<Name>-v0`` ones); else ``None``."""
    import pettingzoo

    from feudal_es.resolve import is_code_reference

    if not isinstance(env_id, str):
        return None
    if is_code_reference(env_id):
        return env_id
    spec = pettingzoo.parallel_registry.get(env_id)
    target = getattr(getattr(spec, "entry_point", None), "target", None)
    return None if target is None else _target_name(target)


def checkpoint_executor(path: str | os.PathLike, core: str | type[SwarmEnv],
                        deterministic: bool | None = None
                        ) -> tuple[Executor, dict[str, Any], int]:
    """``(executor, env_kwargs, num_skills)`` of a run checkpoint: its trained actor's
    executor with skills forced (:func:`actor_executor`), the run's env kwargs and the
    actor's skill count. Raises ``ValueError`` when the run trained another env than
    ``core`` (checked on the metadata, before anything is loaded)."""
    from feudal_es import checkpoint
    from feudal_es.resolve import is_code_reference
    from feudal_es.trainer import ESTrainer

    meta = checkpoint.read_metadata(path)
    stored = (meta.get("config") or {}).get("env", meta.get("env"))
    want = _target_name(core)
    if _stored_target(stored) != want:
        ids = [gym_env_id(n, "Selector") for n, t in BUNDLED_ENVS.items()
               if t == _stored_target(stored)]
        hint = f"; its Selector id is {ids[0]}" if ids else ""
        raise ValueError(f"checkpoint {os.fspath(path)} is a run of env {stored!r}, not of "
                         f"{want} (the env of this Selector id){hint}")
    trainer = ESTrainer.from_checkpoint(path, env=stored if is_code_reference(stored) else None)
    det = trainer.config.deterministic_eval if deterministic is None else bool(deterministic)
    actor = set_es_theta(trainer.ts.actor, trainer.result_theta(), trainer.config.es_params)
    return actor_executor(actor, det), dict(trainer.config.env_kwargs), int(actor.num_skills)
