"""Writing checkpoint files: :func:`save` (a pytree) and :func:`save_selector` (one flat
parameter vector).

Both go through :func:`_save`: every leaf is encoded (:mod:`feudal_es.leaves`), the JSON
document (:func:`_document`) is built around the leaf table and the caller's metadata,
and :func:`_write` checksums it with the arrays and writes one safetensors file
atomically (:func:`feudal_es.atomic.atomic_write`: a crash leaves the previous file or the
new one). The format-1 converter writes through :func:`_document` and :func:`_write` too,
so a converted file is what a fresh save would have written.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy

from feudal_es._ckpt_format import (
    _DOC_KEY,
    _FORMAT,
    _SELECTOR,
    _TREE,
    FORMAT_VERSION,
    MAX_HEADER_BYTES,
    PathLike,
    _digest,
    _document_digest,
    _to_json,
)
from feudal_es.atomic import atomic_write
from feudal_es.leaves import encode, flatten_with_paths, tensor_name


# ------------------------------------------------------------------------------ write
def _document(kind: str, table: list[dict[str, Any]], metadata: dict[str, Any],
              created: str | None = None, jax_version: str | None = None) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"format": _FORMAT, "format_version": FORMAT_VERSION, "kind": kind,
            "created": created or now, "jax_version": jax_version or jax.__version__,
            "leaves": table, "metadata": metadata}


def _write(path: PathLike, doc: dict[str, Any], items: list[tuple[str, np.ndarray]]) -> Path:
    """Checksum ``doc`` and the stored arrays, serialise, write atomically."""
    checksum = {"document_sha256": _document_digest(doc), "sha256": _digest(doc, items)}
    document = json.dumps({**doc, "checksum": checksum})
    payload = safetensors.numpy.save(dict(items), metadata={_DOC_KEY: document})
    header = int.from_bytes(payload[:8], "little")
    if header > MAX_HEADER_BYTES:
        raise ValueError(f"checkpoint header of {header} bytes (leaf table + metadata) exceeds "
                         f"MAX_HEADER_BYTES ({MAX_HEADER_BYTES}); loaders would refuse it")
    return atomic_write(path, lambda f: f.write(payload))


def _save(path: PathLike, tree: Any, metadata: Mapping[str, Any] | None, kind: str) -> Path:
    user_meta = _to_json(metadata, "metadata")
    paths, leaves, _ = flatten_with_paths(tree)
    table, items = [], []
    for p, leaf in zip(paths, leaves, strict=True):
        try:
            arr, desc = encode(leaf)
        except ValueError as e:
            raise ValueError(f"cannot save leaf {p!r}: {e}") from None
        table.append({"path": p, **desc})
        if arr is not None:
            items.append((tensor_name(p), arr))
    return _write(path, _document(kind, table, user_meta), items)


def save(path: PathLike, tree: Any, metadata: Mapping[str, Any] | None = None) -> Path:
    """Save a pytree and JSON metadata to ``path`` as one checkpoint file, atomically.

    ``metadata`` should hold what is needed to rebuild the template and to refuse a wrong
    one later (env id and kwargs, actor/critic/ES configs, seed, step); values must be
    JSON-serialisable (numpy scalars and dataclasses are converted). Returns ``path``.
    An ``OSError`` while writing (e.g. a full disk) propagates unchanged; the previous
    file at ``path``, if any, is then intact.
    """
    return _save(path, tree, metadata, _TREE)


def save_selector(path: PathLike, theta: Any, metadata: Mapping[str, Any] | None = None) -> Path:
    """Save one flat selector parameter vector (e.g. a run's ``best_selector``) atomically,
    in the same safe format, for ``feudal-es eval`` to load later."""
    arr = np.asarray(jax.device_get(theta))
    if arr.ndim != 1 or not jnp.issubdtype(arr.dtype, jnp.number):
        raise ValueError(f"theta must be a 1-D numeric vector, got {arr.dtype}{list(arr.shape)}")
    return _save(path, {"theta": theta}, metadata, _SELECTOR)
