"""Converting a format-1 checkpoint or selector file (``.npz``, older feudal-es) to format
2: :func:`convert_v1`, behind ``feudal-es convert``.

The ``.npz`` is read through :class:`feudal_es.legacy_npz.StoredNpz`, not numpy's npz
reader, which inflates a member in full before anything can be checked (a 1.6 MiB file
can inflate to gigabytes). Its header and array sha256 are checked, and its leaves are
written through the same :func:`~feudal_es._ckpt_writer._write` as a fresh save, keeping
the metadata and the creation time.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from feudal_es._ckpt_format import (
    _FORMAT,
    _SELECTOR,
    _TREE,
    _V1_HEADER,
    SUFFIX,
    CheckpointError,
    PathLike,
)
from feudal_es._ckpt_reader import _valid_entry
from feudal_es._ckpt_writer import _document, _write
from feudal_es.atomic import check_writable
from feudal_es.leaves import from_storage, logical_dtype, tensor_name, to_storage
from feudal_es.legacy_npz import StoredNpz


# ---------------------------------------------------------------------- format 1 (.npz)
def _read_v1(src: Path) -> tuple[dict[str, Any], list[tuple[dict[str, Any], np.ndarray]]]:
    """A format-1 file's header and its (leaf entry, stored array) pairs, checksum checked,
    read through the guarded :class:`~feudal_es.legacy_npz.StoredNpz`."""
    with StoredNpz(src) as npz:
        if _V1_HEADER not in npz.names:
            raise ValueError(f"no {_V1_HEADER} member: not a feudal-es file")
        blob = npz.array(_V1_HEADER)
        if blob.dtype != np.uint8 or blob.ndim != 1:
            raise ValueError(f"header member holds {blob.dtype}{list(blob.shape)}")
        header = json.loads(blob.tobytes().decode())
        if not isinstance(header, dict) or header.get("format") != _FORMAT:
            raise ValueError("not a feudal-es file")
        if header.get("format_version") != 1:
            raise ValueError(f"format version {header.get('format_version')!r}, not 1")
        if header.get("kind") not in (_TREE, _SELECTOR) or not isinstance(
                header.get("metadata"), dict) or not isinstance(header.get("checksum"), dict):
            raise ValueError("bad header")
        if not isinstance(header.get("leaves"), list) or not all(
                _valid_entry(e) for e in header["leaves"]):
            raise ValueError("bad leaf table")
        pairs = [(e, npz.array(tensor_name(e["path"]) + ".npy"))
                 for e in header["leaves"] if e["dtype"] is not None]
    h = hashlib.sha256()
    for e, arr in pairs:
        h.update(json.dumps([tensor_name(e["path"]) + ".npy", arr.dtype.str,
                             list(arr.shape)]).encode())
        h.update(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
    if h.hexdigest() != header["checksum"].get("sha256"):
        raise ValueError("sha256 of its arrays differs from the one its header recorded")
    return header, pairs


def _v1_storage(entry: Mapping[str, Any], arr: np.ndarray) -> np.ndarray:
    """A format-1 stored array (raw bits for dtypes .npy cannot name) -> format-2 storage."""
    if "key_impl" in entry:
        if arr.dtype != np.uint32 or list(arr.shape[: len(entry["shape"])]) != entry["shape"]:
            raise ValueError(f"leaf {entry['path']!r}: bad key data {arr.dtype}{arr.shape}")
        return to_storage(arr)
    logical = from_storage(arr, logical_dtype(entry["dtype"]))
    if list(logical.shape) != entry["shape"]:
        raise ValueError(f"leaf {entry['path']!r} has shape {logical.shape}, declared "
                         f"{entry['shape']}")
    return to_storage(logical)


def convert_v1(src: PathLike, dst: PathLike | None = None) -> Path:
    """Rewrite a format-1 ``.npz`` checkpoint or selector file as format 2 at ``dst``
    (default: ``src`` with :data:`SUFFIX`), keeping its leaves, metadata and creation
    time. ``src`` is read with the guarded reader described in the module docstring;
    ``dst`` must not exist. Returns ``dst``; raises :class:`CheckpointError` naming the
    cause when ``src`` cannot be converted, an ``OSError`` when ``dst`` cannot be
    written (checked before ``src`` is read)."""
    src = Path(src)
    dst = src.with_suffix(SUFFIX) if dst is None else Path(dst)
    if not src.is_file():
        raise CheckpointError(f"no format-1 file at {src}")
    if dst.exists():
        raise CheckpointError(f"{dst} exists; not overwriting it")
    check_writable(dst)  # a place that cannot be written: the OSError, before reading
    try:
        header, pairs = _read_v1(src)
        items = [(tensor_name(e["path"]), _v1_storage(e, arr)) for e, arr in pairs]
        created, version = (header.get(k) for k in ("created", "jax_version"))
        doc = _document(header["kind"], header["leaves"], header["metadata"],
                        created if isinstance(created, str) else None,
                        version if isinstance(version, str) else None)
        return _write(dst, doc, items)
    except (zipfile.BadZipFile, ValueError, TypeError, KeyError, EOFError,
            RecursionError) as e:
        raise CheckpointError(f"cannot convert {src}: {e}") from None
