"""Coverage's ``"memory"`` observation: each robot's whole-world maps, coarse.

A robot's memory (its sensed density, its seen mask, and optionally where it last met
each other robot) covers the whole world, while its ``"maps"`` window shows only its
neighbourhood. Two frames:

- ``"world"``: the grid as it is (rows = y), averaged over ``size`` near-equal blocks a
  side. Where the robot itself stands is not drawn; a network must match these maps
  with its position from ``"vec"``.
- ``"robot"``: the grid re-centred on the robot's cell, over the ``2 G`` cells a side
  that hold the whole world wherever the robot stands, averaged over ``size`` blocks a
  side, with a last channel holding the share of each pixel outside the world. What the
  robot's Voronoi cell and its centroid depend on then lies at the same pixels wherever
  the robot is: the robot-centred layout of LPAC's local maps, extended to the world.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

MEMORY_FRAMES = ("world", "robot")


def block_means(g: int, m: int) -> np.ndarray:
    """``[m, g]``: row ``r`` averages cells ``floor(r g / m) .. floor((r + 1) g / m) - 1``
    (``m`` blocks of near-equal size covering all ``g`` cells; ``A x A^T`` pools a map)."""
    a = np.zeros((m, g), np.float32)
    for r in range(m):
        lo, hi = r * g // m, (r + 1) * g // m
        a[r, lo:hi] = 1.0 / (hi - lo)
    return a


def memory_maps(layers: jax.Array, idx: jax.Array, size: int, frame: str) -> jax.Array:
    """``[N, C, size, size]`` float32 from each robot's ``layers`` ``[N, L, G, G]`` (rows =
    y) and its cell ``idx`` ``[N, 2]`` (ix, iy), in ``frame`` (see the module docstring;
    ``C = L``, plus the outside share with ``"robot"``)."""
    _, nl, g, _ = layers.shape
    layers = layers.astype(jnp.float32)
    if frame == "world":
        avg = jnp.asarray(block_means(g, size))
        return jnp.einsum("rg,nlgh,ch->nlrc", avg, layers, avg)
    if frame != "robot":
        raise ValueError(f"memory frame must be one of {MEMORY_FRAMES}, got {frame!r}")
    # Pixel s of the 2G-cell span is world cell idx - G + s: the robot's cell sits at s = G.
    padded = jnp.pad(layers, [(0, 0), (0, 0), (g, g), (g, g)])
    cut = lambda x, ix, iy: lax.dynamic_slice(x, (0, iy, ix), (nl, 2 * g, 2 * g))
    ego = jax.vmap(cut)(padded, idx[:, 0], idx[:, 1])  # [N, L, 2G, 2G]
    offs = jnp.arange(2 * g) - g
    off_x = (idx[:, 0:1] + offs < 0) | (idx[:, 0:1] + offs >= g)  # [N, 2G]
    off_y = (idx[:, 1:2] + offs < 0) | (idx[:, 1:2] + offs >= g)
    outside = (off_y[:, :, None] | off_x[:, None, :]).astype(jnp.float32)
    avg = jnp.asarray(block_means(2 * g, size))
    return jnp.einsum("rg,nlgh,ch->nlrc", avg,
                      jnp.concatenate([ego, outside[:, None]], axis=1), avg)
