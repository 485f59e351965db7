"""Host-side drawing shared by the bundled envs: one swarm frame, and frames to a GIF.

Rendering is off the hot path, so it runs on numpy arrays with Pillow (``ImageDraw``)
rather than in JAX. Every env's ``render(state)`` builds its picture from
:func:`draw_swarm`, so all envs share one look and one coordinate convention:
world coordinates ``[0, world_size]^2``, y pointing up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

AGENT_COLOR = (31, 119, 180)
LINK_COLOR = (150, 150, 150)
TARGET_COLOR = (214, 39, 40)
DONE_COLOR = (44, 160, 44)


def _to_px(xy: np.ndarray, world_size: float, size: int) -> np.ndarray:
    """World coordinates -> pixel coordinates (y flipped so that up is up)."""
    xy = np.asarray(xy, dtype=np.float64) / float(world_size) * (size - 1)
    return np.stack([xy[..., 0], (size - 1) - xy[..., 1]], axis=-1)


def draw_swarm(
    world_size: float,
    positions: np.ndarray,
    *,
    adjacency: np.ndarray | None = None,
    background: np.ndarray | None = None,
    targets: np.ndarray | None = None,
    targets_done: np.ndarray | None = None,
    target_radius: float | None = None,
    agent_radius_px: int = 4,
    size: int = 256,
) -> np.ndarray:
    """Draw one frame and return it as ``uint8 [size, size, 3]``.

    Args:
      world_size: side of the square world (world units).
      positions: ``[N, 2]`` agent positions.
      adjacency: optional ``[N, N]`` comm graph; an edge is drawn for every nonzero entry.
      background: optional ``[H, W]`` scalar field over the world (row 0 = bottom, i.e.
        ``background[iy, ix]``), drawn as a white-to-orange heat map (e.g. a density).
      targets: optional ``[M, 2]`` target/goal positions, drawn as rings.
      targets_done: optional ``[M]`` bool; done targets are drawn green.
      target_radius: ring radius in world units (a small default if ``None``).
    """
    if background is not None:
        field = np.asarray(background, dtype=np.float64)
        span = field.max() - field.min()
        field = (field - field.min()) / span if span > 0 else np.zeros_like(field)
        field = field[::-1]  # row 0 is the bottom of the world
        rgb = np.stack([255 - 10 * field, 255 - 120 * field, 255 - 230 * field], axis=-1)
        img = Image.fromarray(rgb.clip(0, 255).astype(np.uint8)).resize((size, size))
    else:
        img = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    px = _to_px(positions, world_size, size)

    if adjacency is not None:
        adj = np.asarray(adjacency)
        for i, j in zip(*np.nonzero(np.triu(adj, k=1)), strict=True):
            draw.line([tuple(px[i]), tuple(px[j])], fill=LINK_COLOR, width=1)

    if targets is not None:
        tpx = _to_px(targets, world_size, size)
        r = (target_radius if target_radius is not None else 0.02 * world_size)
        r_px = max(2.0, r / world_size * (size - 1))
        done = np.zeros(len(tpx), bool) if targets_done is None else np.asarray(targets_done)
        for (x, y), d in zip(tpx, done, strict=True):
            color = DONE_COLOR if d else TARGET_COLOR
            draw.ellipse([x - r_px, y - r_px, x + r_px, y + r_px], outline=color, width=2)

    a = agent_radius_px
    for x, y in px:
        draw.ellipse([x - a, y - a, x + a, y + a], fill=AGENT_COLOR)
    return np.asarray(img, dtype=np.uint8)


def write_gif(frames: Iterable[np.ndarray] | Sequence[np.ndarray], path: str | Path,
              fps: int = 10) -> Path:
    """Write ``uint8 [H, W, 3]`` frames to an animated GIF (Pillow), atomically."""
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    if not images:
        raise ValueError("write_gif needs at least one frame")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:],
                   duration=max(1, round(1000 / fps)), loop=0)
    tmp.replace(path)
    return path
