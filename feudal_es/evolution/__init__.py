"""The ES core under :mod:`feudal_es.es`: one concept per module, pure and jittable.

- :mod:`~feudal_es.evolution.config` — :class:`ESConfig`, the reference's hyper-parameters;
- :mod:`~feudal_es.evolution.vectors` — pytrees and modules as flat parameter vectors;
- :mod:`~feudal_es.evolution.state` — :class:`ESState`, :func:`init`, :func:`ask`;
- :mod:`~feudal_es.evolution.ranks` — centered-rank fitness shaping;
- :mod:`~feudal_es.evolution.nes` and :mod:`~feudal_es.evolution.cem` — the two updates;
- :mod:`~feudal_es.evolution.ga` — MERL's genetic algorithm (``kind="ga"``);
- :mod:`~feudal_es.evolution.evosax_kind` — evosax's strategies as kinds (``"evosax:..."``);
- :mod:`~feudal_es.evolution.generation` — :func:`tell` and whole generations (batched,
  scanned, or with a fitness computed outside JAX).

Like the reference, these modules import only jax, jax.numpy, equinox, optax, numpy and
each other (and evosax, on first use of an evosax kind): no networks, no environments.
"""

from feudal_es.evolution.config import ESConfig
from feudal_es.evolution.generation import (
    FitnessFn,
    ask_jit,
    evolve,
    generation,
    host_generation,
    make_generation,
    tell,
    tell_jit,
)
from feudal_es.evolution.ranks import centered_rank
from feudal_es.evolution.state import ESState, ask, init
from feudal_es.evolution.vectors import flatten, module_theta, set_module_theta

__all__ = ["ESConfig", "ESState", "FitnessFn", "ask", "ask_jit", "centered_rank", "evolve",
           "flatten", "generation", "host_generation", "init", "make_generation",
           "module_theta", "set_module_theta", "tell", "tell_jit"]
