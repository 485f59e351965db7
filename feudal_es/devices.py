"""One JAX CPU device per core, so the ES population runs on every core of a CPU host.

XLA's CPU backend runs one executable's small ops on one thread: the batched population
rollout of one device keeps about one core busy (``bench/RESULTS.md``, the population
rollout's cores busy). With one CPU device per core the
trainer's population sharding (:mod:`feudal_es.sharding`) gives each core its share of
the members, which on 2 cores halves an ES generation. :func:`use_cpu_cores` sets JAX's
``jax_num_cpu_devices``; the entry points (``feudal-es``, the benchmarks and studies) call
it first thing, and a script can call ``feudal_es.use_cpu_cores()``. It is a no-op when the
device count was already chosen (``JAX_NUM_CPU_DEVICES``, ``XLA_FLAGS`` with
``--xla_force_host_platform_device_count``, or ``jax.config``) or when JAX has already
run something (the option only applies before the backends start). Other JAX code is
unaffected: it keeps running on the default device, ``jax.devices()[0]``.
"""

from __future__ import annotations

import os

import jax

__all__ = ["cpu_cores", "use_cpu_cores"]


def cpu_cores() -> int:
    """The number of cores this process may run on (its CPU affinity set)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _chosen_elsewhere() -> bool:
    return ("JAX_NUM_CPU_DEVICES" in os.environ
            or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            or jax.config.jax_num_cpu_devices != -1)


def use_cpu_cores(count: int | None = None) -> bool:
    """Give JAX ``count`` CPU devices (default: one per core); True if it took effect.

    Must run before JAX executes anything in this process; afterwards, or when the device
    count was chosen by the environment or an earlier ``jax.config.update``, it changes
    nothing and returns False.
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or count < 1):
        raise ValueError(f"use_cpu_cores: count must be a positive int, got {count!r}")
    if _chosen_elsewhere():
        return False
    try:
        jax.config.update("jax_num_cpu_devices", count or cpu_cores())
    except RuntimeError:  # the backends are already initialised
        return False
    return True
