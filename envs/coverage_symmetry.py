"""The square world's eight symmetries (the dihedral group D4) acting on Coverage.

Coverage's task is the same in a rotated or mirrored world: the density's features are
drawn uniformly, the cost, sensor and comm graph depend only on distances between
positions and cell centres, and the cell centres map onto each other. So a state moved by
a symmetry is another state of the env's own distribution, and a policy that is good in
one is good, moved alike, in the other. Imitation uses this to multiply its data
(``PretrainConfig.augment``): each sample is observed and labelled in a random symmetry.

Element ``g`` in ``0 .. 7`` is three bits: swap the axes (bit 0), then mirror x
(``x -> W - x``, bit 1), then mirror y (bit 2). Each maps grid cells onto grid cells, so
the grids (``[..., iy, ix]``) are transposed and reversed, never resampled; ``g = 0``
returns its input unchanged, bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from envs.coverage import CoverageState

#: the number of symmetries of the square
ORDER = 8


def _bits(g: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    g = jnp.asarray(g, jnp.int32)
    return (g & 1) > 0, (g & 2) > 0, (g & 4) > 0


def transform_vectors(v: jax.Array, g: jax.Array) -> jax.Array:
    """``[..., 2]`` displacements (actions, velocities) moved by ``g``: no translation."""
    swap, fx, fy = _bits(g)
    v = jnp.where(swap, v[..., ::-1], v)
    return jnp.stack([jnp.where(fx, -v[..., 0], v[..., 0]),
                      jnp.where(fy, -v[..., 1], v[..., 1])], axis=-1)


def transform_points(p: jax.Array, g: jax.Array, world_size: float) -> jax.Array:
    """``[..., 2]`` positions (x, y) in a world of side ``world_size`` moved by ``g``: the
    mirrored coordinates shifted back into the world (``W + (-x)`` is ``W - x`` exactly)."""
    _, fx, fy = _bits(g)
    return transform_vectors(p, g) + jnp.stack([fx, fy]).astype(p.dtype) * world_size


def transform_grid(x: jax.Array, g: jax.Array) -> jax.Array:
    """``[..., G, G]`` grid indexed ``[iy, ix]`` moved by ``g``, as the cell centres move."""
    swap, fx, fy = _bits(g)
    x = jnp.where(swap, jnp.swapaxes(x, -1, -2), x)
    x = jnp.where(fx, x[..., ::-1], x)
    return jnp.where(fy, x[..., ::-1, :], x)


def inverse(g: jax.Array) -> jax.Array:
    """The element undoing ``g``: swapping after the mirrors swaps which axis they hit."""
    swap, fx, fy = _bits(g)
    return jnp.where(swap, (g & 1) | (fy.astype(jnp.int32) << 1) | (fx.astype(jnp.int32) << 2),
                     g)


def transform_state(state: CoverageState, g: jax.Array, world_size: float
                    ) -> CoverageState:
    """``state`` in the world moved by ``g``: positions and the places robots last met move,
    the density and sensed cells move with the grid; the per-robot costs, J(0), time and
    who has met whom do not change. A never-met pair's place (0, 0) stays 0."""
    met_pos = jnp.where(state.met[..., None], transform_points(state.met_pos, g, world_size),
                        state.met_pos)
    return state._replace(pos=transform_points(state.pos, g, world_size),
                          density=transform_grid(state.density, g),
                          seen=transform_grid(state.seen, g), met_pos=met_pos)
