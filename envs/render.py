"""Host-side drawing shared by the bundled envs: one swarm frame, and frames to a GIF.

Rendering is off the hot path, so it runs on numpy arrays with Pillow (``ImageDraw``)
rather than in JAX. Every env's ``render(state)`` builds its picture from
:func:`draw_swarm`, so all envs share one look and one coordinate convention:
world coordinates ``[0, world_size]^2``, y pointing up, inset by a few pixels so that an
agent on the world's edge is drawn whole, with the arena's border outlined.

:func:`decorate_frames` (applied by :func:`encode_gif` and :func:`write_gif` when given a
title, legend or info) adds a header band (title, ``step t / T``, optional per-step
values) above each frame and a legend band below it, so that a GIF explains itself. Envs
declare what their marks mean in ``SwarmEnv.render_legend``. :func:`encode_gif` writes
into a file object its caller opened (feudal-es: its atomic writer); :func:`write_gif`
writes a path atomically on its own.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageDraw, ImageFont

AGENT_COLOR = (31, 119, 180)
LINK_COLOR = (150, 150, 150)
TARGET_COLOR = (214, 39, 40)
DONE_COLOR = (44, 160, 44)
HEAT_COLOR = (245, 135, 25)  # the background heat map at the field's maximum (white at 0)

RGB = tuple[int, int, int]
#: ``(label, color)`` per kind of mark; the color is one of the constants above.
Legend = Sequence[tuple[str, RGB]]


ARENA_COLOR = (90, 90, 90)  # the arena's border line
MARGIN_COLOR = (228, 228, 228)  # the view outside the arena (padding, or a widened view)


def _to_px(xy: np.ndarray, world_size: float, size: int, pad: float = 0.0) -> np.ndarray:
    """World coordinates -> pixel coordinates (y flipped so that up is up): the view
    ``[0, world_size]^2`` fills the pixels ``[pad, size - 1 - pad]``."""
    xy = np.asarray(xy, dtype=np.float64) / float(world_size) * (size - 1 - 2 * pad) + pad
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
    arena: tuple[float, float, float, float] | None = None,
    pad_px: int | None = None,
) -> np.ndarray:
    """Draw one frame and return it as ``uint8 [size, size, 3]``.

    The view ``[0, world_size]^2`` is inset by ``pad_px`` pixels on every side, so an
    agent sitting on the world's edge is drawn whole rather than cut in half; the
    ``arena`` rectangle is outlined (:data:`ARENA_COLOR`) and what lies outside it is
    tinted (:data:`MARGIN_COLOR`), so a viewer sees where the world ends.

    Args:
      world_size: side of the square view (world units).
      positions: ``[N, 2]`` agent positions.
      adjacency: optional ``[N, N]`` comm graph; an edge is drawn for every nonzero entry.
      background: optional ``[H, W]`` scalar field over the view (row 0 = bottom, i.e.
        ``background[iy, ix]``), drawn as a white-to-orange heat map (e.g. a density).
      targets: optional ``[M, 2]`` target/goal positions, drawn as rings.
      targets_done: optional ``[M]`` bool; done targets are drawn green.
      target_radius: ring radius in world units (a small default if ``None``).
      agent_radius_px: agent dot radius in pixels.
      size: frame side in pixels.
      arena: ``(x0, y0, x1, y1)``, the world's boundary in view coordinates (default:
        the whole view, ``(0, 0, world_size, world_size)``); an env whose view is wider
        than its world (to keep agents that left it in frame) passes the world here.
      pad_px: margin around the view in pixels (default ``agent_radius_px + 4``).
    """
    pad = agent_radius_px + 4 if pad_px is None else int(pad_px)
    if not 0 <= 2 * pad < size - 1:
        raise ValueError(f"pad_px ({pad}) leaves no room in a {size} px frame")
    inner = size - 2 * pad  # the view's side in pixels
    img = Image.new("RGB", (size, size), MARGIN_COLOR)
    draw = ImageDraw.Draw(img)
    x0, y0, x1, y1 = (0.0, 0.0, world_size, world_size) if arena is None else arena
    (ax0, ay1), (ax1, ay0) = _to_px(np.array([[x0, y0], [x1, y1]]), world_size, size, pad)
    if background is not None:
        field = np.asarray(background, dtype=np.float64)
        span = field.max() - field.min()
        field = (field - field.min()) / span if span > 0 else np.zeros_like(field)
        field = field[::-1]  # row 0 is the bottom of the world
        rgb = 255 - np.multiply.outer(field, 255 - np.asarray(HEAT_COLOR, np.float64))
        img.paste(Image.fromarray(rgb.clip(0, 255).astype(np.uint8)).resize((inner, inner)),
                  (pad, pad))
    else:
        draw.rectangle([ax0, ay0, ax1, ay1], fill=(255, 255, 255))
    draw.rectangle([ax0 - 1, ay0 - 1, ax1 + 1, ay1 + 1], outline=ARENA_COLOR, width=1)
    px = _to_px(positions, world_size, size, pad)

    if adjacency is not None:
        adj = np.asarray(adjacency)
        for i, j in zip(*np.nonzero(np.triu(adj, k=1)), strict=True):
            draw.line([tuple(px[i]), tuple(px[j])], fill=LINK_COLOR, width=1)

    if targets is not None:
        tpx = _to_px(targets, world_size, size, pad)
        r = (target_radius if target_radius is not None else 0.02 * world_size)
        r_px = max(2.0, r / world_size * (inner - 1))
        done = np.zeros(len(tpx), bool) if targets_done is None else np.asarray(targets_done)
        for (x, y), d in zip(tpx, done, strict=True):
            color = DONE_COLOR if d else TARGET_COLOR
            draw.ellipse([x - r_px, y - r_px, x + r_px, y + r_px], outline=color, width=2)

    a = agent_radius_px
    for x, y in px:
        draw.ellipse([x - a, y - a, x + a, y + a], fill=AGENT_COLOR)
    return np.asarray(img, dtype=np.uint8)


# --- self-explaining frames: header (title, step counter, values) and legend bands -------
BAND_UNIT = 16  # band heights are multiples of this, so a 16-multiple frame stays one
_LINE_PX = 14  # one text line
_PAD = 4  # left margin and top/bottom padding inside a band
_SWATCH = 12  # legend swatch side
_BAND_BG = (242, 242, 242)
_TEXT = (20, 20, 20)


@functools.cache
def _font() -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    """Pillow's built-in font: no font file needed."""
    return ImageFont.load_default()


def _width(text: str) -> float:
    return _font().getlength(text)


def _wrap(items: Sequence[str], sep: str, width: float) -> list[str]:
    """Pack ``items`` greedily into lines at most ``width`` px wide, joined by ``sep``;
    an item that is too wide on its own is broken between characters."""
    lines: list[str] = []
    for item in items:
        if lines and _width(lines[-1] + sep + item) <= width:
            lines[-1] += sep + item
            continue
        lines.append("")
        for ch in item:
            if lines[-1] and _width(lines[-1] + ch) > width:
                lines.append("")
            lines[-1] += ch
    return lines


def _fmt(value: float | str | None) -> str:
    if value is None or isinstance(value, str):
        return "-" if value is None else value
    value = float(value)
    if not math.isfinite(value):
        return "-" if math.isnan(value) else str(value)
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:.4g}"


def _round_up(px: int) -> int:
    return -(-px // BAND_UNIT) * BAND_UNIT


def _header_lines(width: int, count: int, title: str | None,
                  info: Mapping[str, Sequence[float | str | None]] | None
                  ) -> tuple[list[str], list[list[str]]]:
    """The title's lines and every frame's status lines (``step t / T`` then values)."""
    usable = width - 2 * _PAD
    title_lines = _wrap(title.split(" · "), " · ", usable) if title else []
    status = []
    for t in range(count):
        items = [f"step {t} / {count - 1}"]
        items += [f"{k} {_fmt(v[t])}" for k, v in (info or {}).items()]
        status.append(_wrap(items, "   ", usable))
    return title_lines, status


def _legend_rows(width: int, legend: Legend | None) -> list[list[tuple[str, RGB, int]]]:
    """Legend entries packed into rows: ``(label, color, x)`` per entry."""
    rows: list[list[tuple[str, RGB, int]]] = []
    x = width
    for label, color in legend or ():
        w = _SWATCH + 4 + math.ceil(_width(label))
        if not rows or x + w > width - _PAD:
            rows.append([])
            x = _PAD
        rows[-1].append((label, tuple(int(c) for c in color), x))
        x += w + 12
    return rows


def band_heights(width: int, count: int, *, title: str | None = None,
                 legend: Legend | None = None,
                 info: Mapping[str, Sequence[float | str | None]] | None = None
                 ) -> tuple[int, int]:
    """``(header_px, legend_px)`` that :func:`decorate_frames` adds above and below
    ``count`` frames of ``width`` px (each a multiple of :data:`BAND_UNIT`; 0 = no legend)."""
    if count < 1:
        raise ValueError("band_heights needs at least one frame")
    title_lines, status = _header_lines(width, count, title, info)
    lines = len(title_lines) + max(len(s) for s in status)
    rows = len(_legend_rows(width, legend))
    return (_round_up(lines * _LINE_PX + 2 * _PAD),
            _round_up(rows * BAND_UNIT + 2 * _PAD) if rows else 0)


def _swatch(draw: ImageDraw.ImageDraw, x: int, y: int, color: RGB) -> None:
    """The mark as :func:`draw_swarm` draws it: dot (agents), line (links), ring
    (targets), gradient (heat map), square (anything else)."""
    s = _SWATCH
    if color == AGENT_COLOR:
        draw.ellipse([x + 2, y + 2, x + s - 3, y + s - 3], fill=color)
    elif color == LINK_COLOR:
        draw.line([x, y + s - 2, x + s - 1, y + 1], fill=color, width=1)
    elif color in (TARGET_COLOR, DONE_COLOR):
        draw.ellipse([x + 1, y + 1, x + s - 2, y + s - 2], outline=color, width=2)
    elif color == HEAT_COLOR:
        for i in range(s):
            f = i / (s - 1)
            c = tuple(round(255 - f * (255 - h)) for h in HEAT_COLOR)
            draw.line([x + i, y, x + i, y + s - 1], fill=c)
    else:
        draw.rectangle([x, y, x + s - 1, y + s - 1], fill=color)


def decorate_frames(frames: Sequence[np.ndarray], *, title: str | None = None,
                    legend: Legend | None = None,
                    info: Mapping[str, Sequence[float | str | None]] | None = None
                    ) -> list[np.ndarray]:
    """Frames with a header band (``title``, ``step t / T``, and ``name value`` for each
    ``info`` entry, one value per frame) above and a legend band (``legend``) below.

    Frame ``t`` is step ``t`` of an episode (frame 0 = the reset state), so ``T`` is
    ``len(frames) - 1``. The raw pixels are kept unchanged; bands are
    :func:`band_heights` px tall, so the frame height stays a multiple of 16 if it was.
    """
    frames = [np.asarray(f, dtype=np.uint8) for f in frames]
    if not frames:
        raise ValueError("decorate_frames needs at least one frame")
    height, width = frames[0].shape[:2]
    if any(f.shape != frames[0].shape for f in frames):
        raise ValueError("all frames must have the same shape")
    for k, v in (info or {}).items():
        if len(v) != len(frames):
            raise ValueError(f"info[{k!r}] has {len(v)} values for {len(frames)} frames")
    title_lines, status = _header_lines(width, len(frames), title, info)
    top, bottom = band_heights(width, len(frames), title=title, legend=legend, info=info)
    font = _font()

    base = Image.new("RGB", (width, top + height + bottom), _BAND_BG)
    draw = ImageDraw.Draw(base)
    for i, line in enumerate(title_lines):
        draw.text((_PAD, _PAD + i * _LINE_PX), line, fill=_TEXT, font=font)
    for r, row in enumerate(_legend_rows(width, legend)):
        y = top + height + _PAD + r * BAND_UNIT + (BAND_UNIT - _SWATCH) // 2
        for label, color, x in row:
            _swatch(draw, x, y, color)
            draw.text((x + _SWATCH + 4, y), label, fill=_TEXT, font=font)

    out = []
    y0 = _PAD + len(title_lines) * _LINE_PX
    for frame, lines in zip(frames, status, strict=True):
        img = base.copy()
        img.paste(Image.fromarray(frame), (0, top))
        draw = ImageDraw.Draw(img)
        for i, line in enumerate(lines):
            draw.text((_PAD, y0 + i * _LINE_PX), line, fill=_TEXT, font=font)
        out.append(np.asarray(img, dtype=np.uint8))
    return out


def encode_gif(frames: Iterable[np.ndarray] | Sequence[np.ndarray], file: BinaryIO,
               fps: int = 10, *, title: str | None = None, legend: Legend | None = None,
               info: Mapping[str, Sequence[float | str | None]] | None = None) -> None:
    """Encode ``uint8 [H, W, 3]`` frames as an animated GIF (Pillow) into the binary
    ``file`` the caller opened (e.g. the temporary file of an atomic writer).

    With a ``title``, ``legend`` or ``info``, frames are first decorated by
    :func:`decorate_frames` (title, step counter, per-step values, legend); without,
    they are written as given.
    """
    frames = list(frames)
    if frames and (title is not None or legend is not None or info is not None):
        frames = decorate_frames(frames, title=title, legend=legend, info=info)
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    if not images:
        raise ValueError("encode_gif needs at least one frame")
    images[0].save(file, format="GIF", save_all=True, append_images=images[1:],
                   duration=max(1, round(1000 / fps)), loop=0)


def write_gif(frames: Iterable[np.ndarray] | Sequence[np.ndarray], path: str | Path,
              fps: int = 10, *, title: str | None = None, legend: Legend | None = None,
              info: Mapping[str, Sequence[float | str | None]] | None = None) -> Path:
    """:func:`encode_gif` into ``path``, atomically: the GIF goes to a temporary file of
    its own beside ``path`` (a unique name, so two writers of one path never share it),
    then replaces ``path``; on any error the temporary file is removed and ``path`` is
    left as it was. (feudal-es writes its GIFs through its own atomic writer.)"""
    frames = list(frames)
    if not frames:
        raise ValueError("write_gif needs at least one frame")
    path, tmp = Path(path), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            encode_gif(frames, f, fps, title=title, legend=legend, info=info)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(e, OSError) and (e.filename is None or e.filename == tmp):
            e.filename = str(path)  # name the file the caller knows, not the temporary one
        raise
    return path
