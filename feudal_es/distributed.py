"""One run over several processes (``jax.distributed``): every process runs the same
program, JAX's collectives join their devices, and process 0 alone writes the run.

:func:`initialize` starts ``jax.distributed`` (with Gloo collectives on CPU, so CPU
processes can ``psum`` across each other) before anything else touches JAX;
``jax.devices()`` then lists every process's devices, and the trainer's meshes (the
data-parallel MAPPO step, the ES population) span them. Each process keeps an identical
local copy of what the trainer reads on the host (the learner, the ES state, the
metrics); the env copies of the data-parallel step stay split over the processes, and
:func:`gather` assembles them where a checkpoint needs the whole array (every process
calls it at the same point, as it runs the same rounds). :func:`is_writer` says which
process writes the run directory: the others write nowhere the user sees.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jax
import numpy as np

__all__ = ["gather", "initialize", "is_writer", "local_device", "own_run_dir", "place",
           "scratch_dir"]


def initialize(coordinator: str, num_processes: int, process_id: int) -> None:
    """Join a run of ``num_processes`` processes coordinated at ``coordinator``
    (``host:port``, served by process 0) as process ``process_id``. Call it first thing,
    before JAX runs anything; on CPU the cross-process collectives use Gloo."""
    if not (isinstance(num_processes, int) and num_processes >= 1):
        raise ValueError(f"num_processes must be a positive int, got {num_processes!r}")
    if not (isinstance(process_id, int) and 0 <= process_id < num_processes):
        raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id!r}")
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"coordinator must be host:port, got {coordinator!r}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes=num_processes,
                               process_id=process_id)


def is_writer() -> bool:
    """Whether this process writes the run (process 0; the only one without
    ``jax.distributed``)."""
    return jax.process_index() == 0


@functools.cache
def scratch_dir() -> Path:
    """Where a process other than 0 keeps what a trainer writes (a private temporary
    directory, removed when the process exits): every process runs the same trainer, but
    only process 0's run directory is the user's."""
    path = Path(tempfile.mkdtemp(prefix=f"feudal-es-process-{jax.process_index()}-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path / "run"


def own_run_dir(run_dir: Path) -> Path:
    """Where this process writes the run ``run_dir``: there for process 0 (the only one
    without ``jax.distributed``), its :func:`scratch_dir` for the others."""
    return run_dir if is_writer() else scratch_dir()


def local_device() -> jax.Device:
    """This process's first device: where its host-side copies live."""
    return jax.local_devices()[0]


def gather(tree: Any) -> Any:
    """``tree`` with every array that spans other processes' devices replaced by the
    whole array on this process's device (a collective: every process calls it); arrays
    this process holds whole are left as they are."""
    from jax.experimental import multihost_utils

    def one(x: Any) -> Any:
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = multihost_utils.process_allgather(jax.random.key_data(x), tiled=True)
            return jax.random.wrap_key_data(jax.device_put(data, local_device()),
                                            impl=jax.random.key_impl(x))
        return jax.device_put(multihost_utils.process_allgather(x, tiled=True),
                              local_device())

    return jax.tree.map(one, tree)


def place(x: jax.Array, sharding: jax.sharding.Sharding) -> jax.Array:
    """``x`` (this process's whole copy, identical on every process, or already placed)
    as a global array with ``sharding``: ``jax.device_put`` in one process; each process
    contributing its own shards of its copy under ``jax.distributed``."""
    if getattr(x, "sharding", None) == sharding:
        return x  # already there (the data-parallel step's state between its steps)
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(place(jax.random.key_data(x), sharding),
                                        impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
