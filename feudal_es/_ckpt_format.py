"""The checkpoint format's shared parts: constants, error, checksums, metadata as JSON.

What the writer (:mod:`feudal_es._ckpt_writer`), the reader (:mod:`feudal_es._ckpt_reader`),
the format-1 converter (:mod:`feudal_es._ckpt_convert`) and the run directory's manager
(:mod:`feudal_es._ckpt_manager`) must agree on, kept in one place so that they cannot
disagree: the format's name, version and file suffix, the ``__metadata__`` key of the JSON
document, the file kinds (``"tree"``, ``"selector"``), the bounds a reader enforces,
:class:`CheckpointError`, the two sha256 checksums, and how caller metadata is normalised
to JSON. The file layout itself is described in :mod:`feudal_es.checkpoint`, the public
module that re-exports all of this.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

FORMAT_VERSION = 2  # bump when the on-disk layout changes; loaders refuse other versions
SUFFIX = ".safetensors"  # of checkpoint and selector files
MAX_HEADER_BYTES = 64 * 2**20  # safetensors header (leaf table + metadata) size accepted
_FORMAT = "feudal-es"
_DOC_KEY = "feudal_es"  # the __metadata__ entry holding the JSON document
_TREE, _SELECTOR = "tree", "selector"
_SELECTOR_LEAF = "['theta']"  # the leaf path of save_selector's vector
_MAX_NDIM = 64  # numpy's limit; also bounds the work of checking a declared shape
_ZIP_MAGIC = b"PK\x03\x04"  # format 1 (.npz)
_V1_HEADER = "__feudal_es__.npy"  # format 1's JSON member

PathLike = str | os.PathLike


class CheckpointError(ValueError):
    """A checkpoint cannot be used: missing, foreign, corrupted, of another format version,
    or not matching the template / expected metadata. The message names the cause."""


# -------------------------------------------------------------------------- checksums
def _canonical(doc: Mapping[str, Any]) -> bytes:
    """The document without its checksums, as canonical JSON."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _document_digest(doc: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical(doc)).hexdigest()


def _digest(doc: Mapping[str, Any], items: list[tuple[str, np.ndarray]]) -> str:
    """sha256 over the document, then every tensor's name, dtype, shape and bytes."""
    h = hashlib.sha256(_canonical(doc))
    for name, arr in items:
        h.update(json.dumps([name, arr.dtype.str, list(arr.shape)]).encode())
        h.update(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
    return h.hexdigest()


# --------------------------------------------------------------------------- metadata
def _json_default(x: Any) -> Any:
    if isinstance(x, (np.generic, np.ndarray, jax.Array)):
        return np.asarray(x).tolist()
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.asdict(x)
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    raise TypeError(f"{type(x).__name__} is not JSON-serialisable")


def _to_json(metadata: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """Normalise caller metadata through JSON (tuples -> lists, numpy -> Python)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"{what} must be a dict, got {type(metadata).__name__}")
    out = {}
    for k, v in metadata.items():
        if not isinstance(k, str):
            raise TypeError(f"{what} keys must be strings, got {k!r}")
        try:
            out[k] = json.loads(json.dumps(v, default=_json_default))
        except (TypeError, ValueError) as e:
            raise TypeError(f"{what}[{k!r}] cannot be stored as JSON: {e}") from None
    return out
