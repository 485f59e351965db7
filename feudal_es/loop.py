"""The MERL round, written once: gradient steps, inject the learner, one ES generation on
team fitness, write the evolved leaves back.

:func:`merl_round` is the only place that says what a round does and in which order. The
trainer calls it for one seed, for many seeds at once (the same round over functions
batched along a seed axis: :mod:`feudal_es.functions`), and the reference loop
:func:`feudal_es.es.merl_coexist` calls it with the user's callables. What a round does is
decided once, by which functions a :class:`RoundFns` holds (a frozen executor has no
``step``; MAPPO alone has no ``generation``), never by branching on a mode inside.

Like the rest of the ES half, this module imports only jax, numpy and the ES core.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from feudal_es.evolution.state import ESState

__all__ = ["EveryCandidateFailed", "RoundFns", "RoundOut", "RoundState", "merl_round"]


class RoundState(NamedTuple):
    """What a round reads and writes: the gradient learner's state (a MAPPO
    ``TrainState``, or any ``gstate`` of the reference loop) and the ES state."""

    learner: Any
    es: ESState


class RoundOut(NamedTuple):
    """What a round reports, on the host.

    ``steps``: what each gradient step returned besides the learner (the trainer's
    ``(metrics, skipped)``), fetched in one transfer; ``info``: the ES generation's info
    (``None`` without a generation); ``evaluation``: ``RoundFns.evaluate``'s result
    (``None`` without one); ``seconds``: wall time of each phase (``gradient``, ``es``,
    ``evaluation``), measured after each phase's results reached the host.
    """

    steps: list[Any]
    info: dict[str, Any] | None
    evaluation: Any
    seconds: dict[str, float]


class EveryCandidateFailed(FloatingPointError):
    """Every candidate of an ES generation had non-finite fitness; nothing was written.
    ``batch``: which rows of a batched round (seeds) failed (``[0]`` for one)."""

    def __init__(self, batch: list[int]):
        super().__init__("every candidate returned non-finite fitness")
        self.batch = batch


@dataclasses.dataclass(frozen=True)
class RoundFns:
    """The pieces of one round. Each may be single or batched over seeds (then every
    array argument and result has a leading seed axis); the round does not care.

    Attributes:
      num_candidates: the ES population size ``P`` (to detect an all-failed generation).
      grad_steps: gradient steps per round.
      step: ``learner -> (learner, aux)``, one gradient step; ``None``: the gradient side
        is frozen (no steps).
      steps: ``learner -> (learner, aux)``: the round's ``grad_steps`` steps in one call,
        each leaf of ``aux`` stacked over them (a leading axis; one seed's round only);
        given, the round calls it instead of ``step``; ``None``: one call per step.
      settle: ``learner -> learner`` after the round's gradient steps, before anything
        else reads the learner (a data-parallel step keeps it on its devices between
        steps); ``None``: nothing to do.
      sync_in: ``(learner, theta) -> theta``: the learner's ES leaves, injected into the ES
        mean (MERL's "inject the learner").
      generation: ``(key, es_state, learner) -> (es_state, info)``: one ES generation on
        team fitness with the learner's current executor; ``None``: no ES.
      sync_out: ``(learner, theta) -> learner``: the evolved leaves written back.
      evaluate: ``RoundState -> anything``: the round's evaluation of the result (the
        current selector's team return; the ES mean's, when the mean is the result), or
        ``None``.
    """

    num_candidates: int
    grad_steps: int
    step: Callable[[Any], tuple[Any, Any]] | None
    sync_in: Callable[[Any, jax.Array], jax.Array]
    generation: Callable[[Any, ESState, Any], tuple[ESState, dict]] | None
    sync_out: Callable[[Any, jax.Array], Any]
    evaluate: Callable[[RoundState], Any] | None = None
    settle: Callable[[Any], Any] | None = None
    steps: Callable[[Any], tuple[Any, Any]] | None = None


def merl_round(fns: RoundFns, state: RoundState, key: Any) -> tuple[RoundState, RoundOut]:
    """One MERL round (Khadka et al. 2019), in this order:

    (a) ``fns.grad_steps`` gradient steps on the learner (dispatched back to back, or
        ``fns.steps``' one call; their outputs are fetched once, after the last; then
        ``settle``);
    (b) inject: the ES mean becomes the learner's ES leaves (``sync_in``);
    (c) one ES generation by team fitness from ``key`` (``generation``);
    (d) write back: the evolved mean goes into the learner (``sync_out``);

    then ``evaluate`` on the result. Steps (b)-(d) run only with a ``generation``; the ES
    state's σ, optimizer moments and generation count carry over between rounds.

    Raises :class:`EveryCandidateFailed` (before anything is written back) when every
    candidate of the generation had non-finite fitness.
    """
    learner, es_state = state
    t0 = time.perf_counter()
    steps: list[Any] = []
    if fns.step is not None:
        if fns.steps is not None:
            learner, stacked = fns.steps(learner)
        else:
            for _ in range(fns.grad_steps):
                learner, aux = fns.step(learner)
                steps.append(aux)
        if fns.settle is not None:
            learner = fns.settle(learner)
        if fns.steps is not None:
            stacked = jax.device_get(stacked)
            steps = [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(fns.grad_steps)]
        else:
            steps = jax.device_get(steps)
    t1 = time.perf_counter()
    info = None
    if fns.generation is not None:
        mean = jnp.asarray(fns.sync_in(learner, es_state.mean), jnp.float32)
        es_state, info = fns.generation(key, es_state._replace(mean=mean), learner)
        info = jax.device_get(info)
        failed = np.atleast_1d(np.asarray(info["num_invalid"]) == fns.num_candidates)
        if failed.any():
            raise EveryCandidateFailed([int(i) for i in np.flatnonzero(failed)])
        learner = fns.sync_out(learner, es_state.mean)
    t2 = time.perf_counter()
    evaluation = None if fns.evaluate is None else jax.device_get(
        fns.evaluate(RoundState(learner, es_state)))
    t3 = time.perf_counter()
    return RoundState(learner, es_state), RoundOut(
        steps, info, evaluation, {"gradient": t1 - t0, "es": t2 - t1, "evaluation": t3 - t2})
