"""Data-parallel MAPPO for one seed: the env copies split over devices, the gradients
averaged across them (Mava's "Anakin" pattern), one compiled program.

With ``D`` devices each device collects ``num_envs / D`` of the copies and computes the
update on its share of the batch; the value-norm and advantage statistics are the whole
batch's (``psum``), each device shuffles its own samples into ``minibatches`` equal
parts, and each minibatch step averages the gradients over the devices (``pmean``)
before the optimizer, so every device takes the same step and the learner (actor,
critic, optimizer state, value norm, key) stays replicated. The same hyper-parameters
mean the same algorithm: a minibatch is the union of every device's part, a stratified
shuffle of the same batch. The collection draws exactly what one device would (each
copy's keys are its row of the one-device split, :func:`feudal_es.mappo.collect`); the
update differs from one device's only in which samples share a minibatch.

Only the fused update (one ``lax.scan``) runs data-parallel; the split update (a large
CNN on XLA:CPU) stays on one device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from envs.base import SwarmEnv
from feudal_es.distributed import place
from feudal_es.mappo.collect import fused_train_step, guarded, repeated
from feudal_es.mappo.config import MAPPOConfig
from feudal_es.mappo.state import TrainState
from feudal_es.sharding import SEED_AXIS, to_local

__all__ = ["DATA_AXIS", "data_devices", "data_parallel_seeds_step", "data_parallel_step",
           "place_train_state"]

DATA_AXIS = "data"


def data_devices(cfg: MAPPOConfig, available: int, requested: int = 0,
                 recurrent: bool = False) -> int:
    """How many devices one seed's MAPPO step runs on: ``requested`` (``0``: the most of
    ``available`` that fit) devices ``D`` such that ``D`` divides ``num_envs`` and
    ``minibatches`` divides each device's ``num_steps * num_envs / D`` samples (when
    ``recurrent``, a recurrent executor or critic, whose minibatches are sequences: its
    ``cfg.sequences / D``).
    An explicit ``requested`` that does not fit raises ``ValueError`` naming the reason."""
    def fits(d: int) -> bool:
        own = cfg.sequences // d if recurrent else cfg.batch_size // d
        return cfg.num_envs % d == 0 and own % cfg.minibatches == 0

    if requested:
        if requested > available:
            raise ValueError(f"data_parallel={requested} devices, but only {available} are "
                             "visible")
        if not fits(requested):
            raise ValueError(
                f"data_parallel={requested} devices must divide mappo.num_envs "
                f"({cfg.num_envs}), and mappo.minibatches ({cfg.minibatches}) each device's "
                + (f"sequences / {requested} (a recurrent executor or critic)" if recurrent else
                   f"num_steps * num_envs / {requested} samples"))
        return requested
    return max(d for d in range(1, available + 1) if fits(d))


def _specs(ts: TrainState, seeds: bool = False) -> TrainState:
    """The partition spec of each leaf of ``ts``: the rollout's (env axis first) split
    over :data:`DATA_AXIS`, everything else replicated; ``seeds``: every leaf stacked
    over seeds first, that axis split over ``SEED_AXIS``."""
    lead = (SEED_AXIS,) if seeds else ()
    specs = jax.tree.map(lambda _: P(*lead), ts._replace(rollout=None))
    return specs._replace(rollout=jax.tree.map(lambda _: P(*lead, DATA_AXIS), ts.rollout))


def place_train_state(ts: TrainState, mesh: Mesh) -> TrainState:
    """``ts`` where the data-parallel step reads it: its rollout split over ``mesh``'s
    :data:`DATA_AXIS`, the rest replicated (a mesh with a ``SEED_AXIS`` too: ``ts`` is
    stacked over seeds, split over that axis); arrays already there are not copied.
    Under ``jax.distributed`` each process passes its identical copy
    (:func:`feudal_es.distributed.place`)."""
    arrays, rest = eqx.partition(ts, eqx.is_array)
    shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec),
                             _specs(arrays, SEED_AXIS in mesh.axis_names),
                             is_leaf=lambda x: isinstance(x, P))
    return eqx.combine(jax.tree.map(place, arrays, shardings), rest)


def _local(x: Any) -> Any:
    """A replicated array's copy on this process's first device of its mesh; any other
    leaf as it is (a seed-stacked state mixes both; one seed's learner and metrics are
    all replicated and go through the strict :func:`feudal_es.sharding.to_local`)."""
    return x.addressable_data(0) if isinstance(x, jax.Array) and x.is_fully_replicated \
        and len(x.sharding.device_set) > 1 else x


def _sharded(step: Callable, mesh: Mesh, seeds: bool) -> Callable:
    """``step(ts) -> (ts, metrics, skipped)`` (one seed's, pure) run under ``shard_map``
    on ``mesh``: vmapped over the seed axis first when ``seeds``. One jitted program."""
    out = P(SEED_AXIS) if seeds else P()

    @eqx.filter_jit
    def sharded(ts: TrainState) -> tuple[TrainState, dict, jax.Array]:
        arrays, rest = eqx.partition(ts, eqx.is_array)
        spec = _specs(arrays, seeds)

        def local(arrays: TrainState) -> tuple[TrainState, dict, jax.Array]:
            run = eqx.filter_vmap(step) if seeds else step
            after, metrics, skipped = run(eqx.combine(arrays, rest))
            return eqx.filter(after, eqx.is_array), metrics, skipped

        arrays, metrics, skipped = jax.shard_map(
            local, mesh=mesh, in_specs=(spec,), out_specs=(spec, out, out),
            check_vma=False)(arrays)
        return eqx.combine(arrays, rest), metrics, skipped

    return sharded


Step = Callable[[TrainState], tuple[TrainState, dict, jax.Array]]


def data_parallel_step(env: SwarmEnv, cfg: MAPPOConfig, devices: Sequence[jax.Device],
                       repeat: int | None = None
                       ) -> tuple[Step, Callable[[TrainState], TrainState]]:
    """``(step, settle)``. ``step(ts) -> (ts, metrics, skipped)``:
    :func:`feudal_es.mappo.fused_train_step` guarded by :func:`feudal_es.mappo.keep_finite`,
    with the ``cfg.num_envs`` copies split over ``devices`` (``data_devices`` of them must
    fit ``cfg``); ``repeat``: that many such steps in one program
    (:func:`feudal_es.mappo.repeated`: metrics and ``skipped`` stacked over them).
    ``settle(ts)``: ``ts`` as the host-side code reads it.

    ``ts`` may live anywhere. Between steps it stays where the step keeps it (the learner
    replicated over the devices, the rollout split): placing it costs a transfer per leaf,
    so a round settles it once, after its steps, not after each. ``settle`` brings the
    learner (actor, critic, optimizer and value norm, key, counters) to this process's
    first device, and remembers where each leaf came from: a leaf the host has not
    replaced since (a new array is a new object) goes back into ``step`` as the
    replicated array it was, without a transfer. The rollout stays split (under
    ``jax.distributed``, over the processes: :func:`feudal_es.distributed.gather`
    assembles it). ``metrics`` are the whole swarm's (this process's copy under
    ``jax.distributed``)."""
    devices = list(devices)
    data_devices(cfg, len(devices), len(devices))  # a clear error when they do not fit
    mesh = Mesh(np.array(devices), (DATA_AXIS,))
    one = guarded(lambda t: fused_train_step(env, t, cfg, DATA_AXIS))
    sharded = _sharded(one if repeat is None else repeated(one, repeat), mesh, False)
    several = jax.process_count() > 1

    # the last settle's copies: id(settled copy) -> (that copy, the replicated array)
    kept: dict[int, tuple[jax.Array, jax.Array]] = {}

    def replicated(x: Any) -> Any:
        hit = kept.get(id(x))
        return hit[1] if hit is not None and hit[0] is x else x

    def step(ts: TrainState) -> tuple[TrainState, dict, jax.Array]:
        if kept:  # the leaves unchanged since the last settle: still on every device
            ts = jax.tree.map(replicated, ts)
        ts, metrics, skipped = sharded(place_train_state(ts, mesh))
        if several:  # the host reads this process's copy
            metrics, skipped = to_local((metrics, skipped))
        return ts, metrics, skipped

    def settle(ts: TrainState) -> TrainState:
        learner = ts._replace(rollout=None)
        local = to_local(learner)
        kept.clear()
        for mine, everywhere in zip(jax.tree.leaves(local), jax.tree.leaves(learner),
                                    strict=True):
            if mine is not everywhere:
                kept[id(mine)] = (mine, everywhere)
        return local._replace(rollout=ts.rollout)

    return step, settle


def data_parallel_seeds_step(env: SwarmEnv, cfg: MAPPOConfig, devices: Sequence[jax.Device],
                             seed_devices: int, home: Callable[[Any], Any]
                             ) -> tuple[Step, Callable[[TrainState], TrainState]]:
    """:func:`data_parallel_step` for a train state stacked over seeds (every leaf's first
    axis): a ``seed_devices x len(devices) / seed_devices`` mesh, the seeds split over its
    first axis and each seed's env copies over its second, so many seeds compose with the
    data-parallel step (seeds x devices). ``home(tree)`` puts a stacked tree where the
    rest of the many-seed program keeps it (``SeedFunctions.place``): ``settle`` puts the
    train state there (metrics come back there after every step)."""
    devices = list(devices)
    data = len(devices) // seed_devices
    data_devices(cfg, data, data)
    mesh = Mesh(np.array(devices).reshape(seed_devices, data), (SEED_AXIS, DATA_AXIS))
    sharded = _sharded(guarded(lambda t: fused_train_step(env, t, cfg, DATA_AXIS)), mesh,
                       True)

    def step(ts: TrainState) -> tuple[TrainState, dict, jax.Array]:
        ts, metrics, skipped = sharded(place_train_state(ts, mesh))
        return ts, *home(jax.tree.map(_local, (metrics, skipped)))

    def settle(ts: TrainState) -> TrainState:
        return home(jax.tree.map(_local, ts))

    return step, settle
