"""The ES population sharded over devices (and hosts) with ``jax.sharding``.

ES is embarrassingly parallel over the population: member ``p``'s fitness depends only on
``thetas[p]`` and the replicated inputs (executor, env keys). :func:`shard_population`
wraps a batched ``fn(thetas[P, ...], *replicated)`` in a ``jax.shard_map`` over a 1-D
device mesh (axis ``"pop"``): each device runs the same vmapped rollout on its slice of
the population, the other inputs are replicated, and the outputs are gathered to every
device, so the code around the call (the ES update) stays unsharded. A population that
does not divide the device count is padded with copies of its first member and the
padding is cut off again, so results never depend on the device count (each member's
computation is the same program on the same inputs).

Multi-host: call ``jax.distributed.initialize()`` at the top of the program on every
host before anything else touches JAX. ``jax.devices()`` then lists every host's devices,
:func:`population_mesh` spans them all, and the same code path shards the population
across hosts (each process runs the same program; :func:`replicate` builds the global
replicated inputs from each process's identical local copy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = ["AXIS", "SEED_AXIS", "batch_sharding", "committed", "population_mesh", "replicate",
           "shard_batched", "shard_population", "to_local"]

AXIS = "pop"
SEED_AXIS = "seed"  # the mesh axis of many seeds trained in one program (feudal_es.seeds)


def population_mesh(devices: Sequence[jax.Device] | None = None, axis: str = AXIS) -> Mesh:
    """A 1-D mesh (axis ``"pop"``, or ``axis``) over ``devices`` (default: all of
    ``jax.devices()``, every host's after ``jax.distributed.initialize``)."""
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("population_mesh needs at least one device")
    return Mesh(np.array(devs), (axis,))


def shard_population(fn: Callable[..., Any], mesh: Mesh) -> Callable[..., Any]:
    """``fn(thetas[P, ...], *replicated) -> pytree of [P, ...]``, run with ``thetas``
    split over ``mesh`` along the population axis and every other argument replicated.

    Call it inside ``jit`` (or let it be traced by one). ``P`` need not divide the mesh
    size: the population is padded with copies of member 0 and the outputs cut back to
    ``P`` rows. Non-array leaves of the replicated arguments (e.g. an Equinox module's
    static parts) are closed over, not sent through the ``shard_map``.
    """
    n = mesh.size

    def sharded(thetas: jax.Array, *replicated: Any) -> Any:
        num = thetas.shape[0]
        pad = (-num) % n
        if pad:
            fill = jnp.broadcast_to(thetas[:1], (pad, *thetas.shape[1:]))
            thetas = jnp.concatenate([thetas, fill], axis=0)
        dynamic, static = eqx.partition(replicated, eqx.is_array)
        chunk = thetas.shape[0] // n

        def local(th: jax.Array, dyn: Any) -> Any:
            mine = jax.lax.dynamic_slice_in_dim(th, jax.lax.axis_index(AXIS) * chunk, chunk)
            return fn(mine, *eqx.combine(dyn, static))

        # thetas go in replicated and each device slices its own rows, and the outputs are
        # gathered to every device: no sharding annotation reaches the code around the
        # call, so XLA cannot split (and reorder) e.g. the ES update's reductions.
        out = jax.shard_map(local, mesh=mesh, in_specs=(P(), P()), out_specs=P(AXIS),
                            check_vma=False)(thetas, dynamic)
        out = jax.lax.with_sharding_constraint(out, NamedSharding(mesh, P()))
        return jax.tree.map(lambda x: x[:num], out) if pad else out

    return sharded


def shard_batched(fn: Callable[..., Any], mesh: Mesh) -> Callable[..., Any]:
    """``fn(*args)`` where every array leaf of every argument and of the output has a
    leading batch axis (e.g. seeds) that ``mesh``'s one axis splits: each device runs
    ``fn`` on its own rows, nothing is exchanged between devices. The batch must divide
    the mesh size. Non-array leaves (an Equinox module's static parts) pass through.
    Call it inside ``jit``."""
    (name,) = mesh.axis_names
    spec = P(name)

    def sharded(*args: Any) -> Any:
        dynamic, static = eqx.partition(args, eqx.is_array)
        out_static = eqx.filter(eqx.filter_eval_shape(fn, *args),
                                lambda x: not isinstance(x, jax.ShapeDtypeStruct))

        def local(dyn: Any) -> Any:
            return eqx.filter(fn(*eqx.combine(dyn, static)), eqx.is_array)

        out = jax.shard_map(local, mesh=mesh, in_specs=(spec,), out_specs=spec,
                            check_vma=False)(dynamic)
        return eqx.combine(out, out_static)

    return sharded


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Where a batched array lives: its leading axis split over ``mesh``'s one axis."""
    return NamedSharding(mesh, P(*mesh.axis_names))


def replicate(tree: Any, mesh: Mesh) -> Any:
    """The array leaves of ``tree`` as arrays replicated over ``mesh`` (other leaves kept).

    Single process: ``jax.device_put``. Several processes (``jax.distributed``): every
    process passes its own identical copy and ``jax.make_array_from_process_local_data``
    assembles the global array (typed PRNG keys go through their raw key data).
    """
    sharding = NamedSharding(mesh, P())
    if jax.process_count() == 1:
        return jax.tree.map(lambda x: jax.device_put(x, sharding) if eqx.is_array(x) else x,
                            tree)

    def one(x: Any) -> Any:
        if not eqx.is_array(x):
            return x
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = jax.make_array_from_process_local_data(
                sharding, np.asarray(jax.random.key_data(x)))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))

    return jax.tree.map(one, tree)


def to_local(tree: Any) -> Any:
    """Fully replicated global arrays -> this process's first local copy (a plain
    single-device array), so eager code after a sharded call mixes devices freely."""

    def one(x: Any) -> Any:
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
            if not x.is_fully_replicated:
                raise ValueError(f"to_local expects replicated arrays, got {x.sharding}")
            return x.addressable_data(0)
        return x

    return jax.tree.map(one, tree)


def committed(tree: Any) -> Any:
    """``tree``'s arrays committed to the default device (this process's first), as
    every jitted round returns them: an uncommitted input (a fresh init, a loaded
    checkpoint) would make each jitted function of the loop compile a second time once
    its inputs turn committed."""
    arrays, rest = eqx.partition(tree, eqx.is_array)
    return eqx.combine(jax.device_put(arrays, jax.local_devices()[0]), rest)
