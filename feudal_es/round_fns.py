"""The pieces of one trainer's round (:class:`~feudal_es.loop.RoundFns`), chosen once
from its mode: MAPPO's guarded train step when the mode trains the executor, the ES
generation when it runs ES, the sync hooks on what ES evolves, and the evaluation of the
run's result; batched over seeds when there are several.

The sync hooks are where the modes differ: ``merl`` injects the learner's selector into
the ES mean and writes the evolved selector back; ``es`` the same on the whole actor;
``merl-actor`` leaves the injection to its generation (:mod:`feudal_es.migration`: the
elitist comparison needs the episodes) and writes back only the mean's selector, so the
learner keeps its own executor and the run's result is the ES mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from feudal_es import mappo
from feudal_es.config import TrainerConfig
from feudal_es.functions import SeedFunctions
from feudal_es.loop import RoundFns, RoundState
from feudal_es.migration import with_mean_selector
from feudal_es.theta import es_theta, set_es_theta

__all__ = ["round_fns"]


def round_fns(config: TrainerConfig, runtime: Any, batched: SeedFunctions | None,
              eval_keys: Sequence[jax.Array]) -> RoundFns:
    """The round of ``config`` on ``runtime`` (one seed) or ``batched`` (many seeds, one
    ``eval_keys`` entry each: the key of the round's evaluation episodes)."""
    cfg, params = config, config.es_params
    migrates = cfg.plan.migrates  # the ES mean is the result; the learner a source
    if batched is not None:
        b = batched
        keys = b.place(jnp.stack([jax.random.split(k, cfg.episodes) for k in eval_keys]))
        guarded, settle = b.guarded_step, b.settle
        sync_out = b.with_mean_selector if migrates else b.with_selector
        sync_in = (lambda ts, theta: theta) if migrates else (
            lambda ts, theta: b.selector(ts.actor))
        generation = lambda keys_, state, ts: b.generation(keys_[0], state, ts.actor)
        result = (lambda s: s.es.mean) if migrates else (
            lambda s: b.selector(s.learner.actor))
        evaluate = lambda s: b.returns(s.learner.actor, result(s)[:, None], keys)
    else:
        rt = runtime
        guarded, settle = rt.guarded_step, rt.settle
        sync_in = (lambda ts, theta: theta) if migrates else (
            lambda ts, theta: es_theta(ts.actor, params))
        sync_out = (lambda ts, theta: ts._replace(actor=with_mean_selector(ts.actor, theta))
                    ) if migrates else (lambda ts, theta: ts._replace(
                        actor=set_es_theta(ts.actor, theta, params)))
        generation = lambda keys_, state, ts: rt.generation(keys_[0], state, ts.actor,
                                                            keys_[1])

        def evaluate(s: RoundState) -> Any:
            theta = s.es.mean if migrates else es_theta(s.learner.actor, params)
            return rt.returns(s.learner.actor, theta[None], eval_keys[0], cfg.episodes)

    # one seed: the round's steps as one program where the runtime has it
    many = None if batched is not None else runtime.round_steps
    trains = cfg.trains_executor
    return RoundFns(num_candidates=cfg.es.num_candidates,
                    grad_steps=cfg.grad_steps_per_outer,
                    step=_paired(guarded) if trains else None, settle=settle,
                    steps=_paired(many) if trains and many is not None else None,
                    sync_in=sync_in,
                    generation=generation if cfg.runs_es else None, sync_out=sync_out,
                    evaluate=evaluate)


def _paired(step: Any) -> Any:
    """``ts -> (ts, metrics, skipped)`` as the round's ``ts -> (ts, (metrics, skipped))``."""
    def paired(ts: mappo.TrainState) -> tuple[mappo.TrainState, tuple[dict, jax.Array]]:
        ts, metrics, skipped = step(ts)
        return ts, (metrics, skipped)

    return paired
