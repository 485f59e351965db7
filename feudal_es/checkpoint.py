"""Checkpoints: safe, atomic, verified saving and loading of a run's pytree state.

A run's state (actor and critic modules, optax states, ``ESState``, batched env states,
typed PRNG keys, Python counters) is an arbitrary pytree. It is saved as **one**
`safetensors <https://huggingface.co/docs/safetensors>`_ file (format version 2, suffix
:data:`SUFFIX`): one tensor per array leaf, named by the leaf's path, and in the header's
``__metadata__`` one entry, ``"feudal_es"``, holding a JSON document: the format and its
version, the kind of file (``"tree"`` or ``"selector"``), the creation time, the JAX
version, the leaf table (path, logical dtype, shape; ``key_impl`` for typed PRNG keys,
``weak_type`` for JAX arrays), the caller's metadata (env id, configs, seed, step, ...)
and two sha256 checksums: ``document_sha256`` over the document's canonical JSON (sorted
keys, no spaces, without the checksums) and ``sha256`` over that JSON followed by every
tensor's name, dtype, shape and bytes, in leaf-table order.

Why this shape:

- **Safe.** safetensors holds raw little-endian arrays and JSON, nothing executable, and
  no compression: a file cannot make a loader run code, and a loader's memory stays
  proportional to the file's real size. Before any tensor byte is read, the 8-byte
  header length is checked against :data:`MAX_HEADER_BYTES` and the file size, the
  header is parsed here, every tensor's ``data_offsets`` must match its dtype x shape and
  tile the data area, and each tensor must be what the leaf table (and, in :func:`load`,
  the template) says; a file declaring a huge shape is refused without allocating it.
- **All or nothing.** Arrays and metadata live in one file, written by
  :func:`feudal_es.atomic.atomic_write` (temp file beside it, fsync, ``os.replace``,
  fsync of the directory). A crash or SIGKILL leaves the previous file or the new one.
- **Verified.** :func:`read_metadata` checks ``document_sha256`` (it reads the header
  only); :func:`load` and :func:`load_selector` also check ``sha256``. A truncated,
  byte-flipped, hand-edited (say, metadata naming another env) or foreign file raises
  :class:`CheckpointError` saying which, never a library traceback. The checksums detect
  damage and naive edits; they are not signatures (whoever rewrites a file can recompute
  them), but no file can run code or exhaust memory.
- **Template-filled.** Loading takes a template pytree of the same structure (e.g. a
  freshly initialised train state, or ``jax.eval_shape`` of one) and fills it, so Equinox
  modules, NamedTuples and static fields come from code, not from the file. A template of
  another architecture is refused, before reading tensors, with the first differing leaf
  named.

How leaves become stored arrays (typed PRNG keys, bfloat16 and other dtypes safetensors
does not name, Python scalars, non-array leaves) is :mod:`feudal_es.leaves`'.

Format 1 (an ``.npz`` zip of ``.npy`` members, written by older feudal-es) is refused by
every loader with a message saying how to convert it: ``feudal-es convert OLD.npz
[NEW.safetensors]`` (:func:`convert_v1`). The converter does not use numpy's npz reader,
which inflates a member in full before anything can be checked (a 1.6 MiB file can
inflate to gigabytes), but :mod:`feudal_es.legacy_npz`'s guarded one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import safetensors
import safetensors.numpy

from feudal_es.atomic import atomic_write, temp_prefix
from feudal_es.leaves import (
    ST_DTYPES,
    decode,
    describe,
    encode,
    flatten_with_paths,
    format_leaf,
    from_storage,
    logical_dtype,
    stored_as,
    tensor_name,
    to_storage,
)
from feudal_es.legacy_npz import StoredNpz

__all__ = [
    "FORMAT_VERSION",
    "MAX_HEADER_BYTES",
    "SUFFIX",
    "CheckpointError",
    "CheckpointManager",
    "convert_v1",
    "load",
    "load_selector",
    "read_metadata",
    "save",
    "save_selector",
]

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


def _differences(found: Any, expected: Any, where: str) -> list[tuple[str, Any, Any]]:
    """Innermost differing entries between two JSON values, as (dotted key, found, exp)."""
    if isinstance(found, dict) and isinstance(expected, dict):
        out = []
        for k in expected:
            sub = f"{where}.{k}"
            if k not in found:
                out.append((sub, "<absent>", expected[k]))
            else:
                out += _differences(found[k], expected[k], sub)
        return out
    same = found == expected and isinstance(found, bool) == isinstance(expected, bool)
    return [] if same else [(where, found, expected)]  # 1 == 1.0, but True != 1


def _check_expect(path: Path, found: dict[str, Any], expect: Mapping[str, Any] | None) -> None:
    diffs = []
    for key, value in _to_json(expect, "expect").items():
        if key not in found:
            diffs.append((key, "<absent>", value))
        else:
            diffs += _differences(found[key], value, key)
    if diffs:
        lines = [f"{k}: checkpoint has {f!r}, expected {e!r}" for k, f, e in diffs]
        raise CheckpointError(f"checkpoint {path} was saved for another setup: " + "; ".join(lines))


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


# ------------------------------------------------------------------------------- read
def _valid_shape(shape: Any) -> bool:
    return (isinstance(shape, list) and len(shape) <= _MAX_NDIM and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape))


def _valid_entry(e: Any) -> bool:
    if not isinstance(e, dict) or not isinstance(e.get("path"), str):
        return False
    if e.get("dtype") is None:
        return e.get("shape") is None
    return (isinstance(e["dtype"], str) and _valid_shape(e.get("shape"))
            and isinstance(e.get("key_impl", ""), str)
            and isinstance(e.get("weak_type", False), bool))


def _convert_hint(path: Path, what: str = "it") -> str:
    dst = path.with_suffix(SUFFIX) if path.suffix != SUFFIX else f"NEW{SUFFIX}"
    return f"convert {what} with: feudal-es convert {path} {dst}"


def _legacy_message(path: Path) -> str:
    return (f"{path} is a format-1 (.npz) file of an older feudal-es; this feudal-es reads "
            f"format {FORMAT_VERSION} ({SUFFIX}): {_convert_hint(path)}")


def _zip_refusal(path: Path) -> CheckpointError:
    """Why a zip file is refused: a format-1 checkpoint, or someone else's archive. Only
    the central directory is read (its size is bounded by the file's)."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        return CheckpointError(f"{path} is not a feudal-es checkpoint (an unreadable zip "
                               f"archive: {e})")
    if _V1_HEADER in names:
        return CheckpointError(_legacy_message(path))
    return CheckpointError(f"{path} is not a feudal-es checkpoint (a zip archive without "
                           f"{_V1_HEADER})")


class _Reader:
    """A checkpoint file whose header has been read and checked; no tensor read yet.

    Checks, in order: the 8-byte header length (against :data:`MAX_HEADER_BYTES` and the
    file size), the header JSON, the document (format, version, ``document_sha256``,
    fields, leaf table), then every tensor's dtype, shape and ``data_offsets`` against
    the data area and the leaf table.
    """

    def __init__(self, path: PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            what = "is a directory" if self.path.is_dir() else "does not exist"
            raise CheckpointError(f"no checkpoint at {self.path}: it {what}")
        try:
            header, data_size = self._read_header()
            self.doc = self._check_document(header.pop("__metadata__", None))
            self._check_tensors(header, data_size)
            self.tensors: dict[str, dict[str, Any]] = header
        except CheckpointError:
            raise
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {e}") from None
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            raise CheckpointError(f"checkpoint {self.path} is corrupted ({e})") from None

    @property
    def metadata(self) -> dict[str, Any]:
        return self.doc["metadata"]

    @property
    def leaves(self) -> list[dict[str, Any]]:
        return self.doc["leaves"]

    def require_kind(self, kind: str) -> None:
        found = self.doc["kind"]
        if found == kind:
            return
        if kind == _SELECTOR:
            raise CheckpointError(f"{self.path} is a {found!r} file, not a selector file")
        raise CheckpointError(f"{self.path} is a {found!r} file, not a training checkpoint"
                              + ("; use load_selector" if found == _SELECTOR else ""))

    def _read_header(self) -> tuple[dict[str, Any], int]:
        """The safetensors header as a dict, and the size of the data area after it."""
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(9)
            if not head:
                raise CheckpointError(f"checkpoint {self.path} is empty (truncated write?)")
            if head.startswith(_ZIP_MAGIC):
                raise _zip_refusal(self.path)
            if len(head) < 9 or head[8:9] != b"{":
                raise CheckpointError(f"{self.path} is not a feudal-es checkpoint (not a "
                                      f"safetensors file{'; truncated?' if size < 9 else ''})")
            length = int.from_bytes(head[:8], "little")
            if length > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"checkpoint {self.path} is corrupted or hostile: its header claims "
                    f"{length} bytes, over the {MAX_HEADER_BYTES} accepted (MAX_HEADER_BYTES)")
            if 8 + length > size:
                raise CheckpointError(
                    f"checkpoint {self.path} is truncated: its header claims {length} bytes, "
                    f"the file holds {size - 8} after the length field")
            f.seek(8)
            header = json.loads(f.read(length).decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("the safetensors header is not a JSON object")
        return header, size - 8 - length

    def _check_document(self, st_metadata: Any) -> dict[str, Any]:
        if not isinstance(st_metadata, dict) or not isinstance(st_metadata.get(_DOC_KEY), str):
            raise CheckpointError(f"{self.path} is not a feudal-es checkpoint (a safetensors "
                                  f"file without a {_DOC_KEY!r} metadata entry)")
        doc = json.loads(st_metadata[_DOC_KEY])
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise CheckpointError(f"{self.path} is not a feudal-es checkpoint")
        version = doc.get("format_version")
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"checkpoint {self.path} has format version {version!r}; this feudal-es "
                f"reads format version {FORMAT_VERSION}")
        checksum = doc.get("checksum")
        if not isinstance(checksum, dict):
            raise ValueError("no checksum")
        actual, recorded = _document_digest(doc), checksum.get("document_sha256")
        if actual != recorded:
            raise CheckpointError(
                f"checkpoint {self.path} is corrupted: sha256 of its metadata document is "
                f"{actual}, the header recorded {recorded} (damaged or edited)")
        for field, typ in (("kind", str), ("leaves", list), ("metadata", dict)):
            if not isinstance(doc.get(field), typ):
                raise ValueError(f"bad {field!r}")
        if not all(_valid_entry(e) for e in doc["leaves"]):
            raise ValueError("bad leaf table")
        names = [tensor_name(e["path"]) for e in doc["leaves"]]
        if len(set(names)) != len(names):
            raise ValueError("two leaf-table entries share a name")
        return doc

    def _check_tensors(self, tensors: dict[str, Any], data_size: int) -> None:
        """Declared tensors: consistent in themselves, tiling the data area, and exactly
        the stored leaves of the leaf table. Reads nothing."""
        spans = []
        for name, t in tensors.items():
            if not (isinstance(t, dict) and t.get("dtype") in ST_DTYPES
                    and _valid_shape(t.get("shape")) and isinstance(t.get("data_offsets"), list)
                    and len(t["data_offsets"]) == 2
                    and all(isinstance(o, int) for o in t["data_offsets"])):
                raise ValueError(f"tensor {name!r}: bad dtype, shape or data_offsets")
            begin, end = t["data_offsets"]
            nbytes = math.prod(t["shape"]) * ST_DTYPES[t["dtype"]].itemsize
            if end - begin != nbytes:
                raise ValueError(f"tensor {name!r} declares {t['dtype']}{t['shape']} "
                                 f"({nbytes} bytes) but its data_offsets span {end - begin}")
            spans.append((begin, end, name))
        at = 0
        for begin, end, name in sorted(spans):
            if begin != at or end > data_size:
                raise ValueError(f"tensor {name!r}: data_offsets [{begin}, {end}] do not tile "
                                 f"the {data_size} data bytes of the file (truncated?)")
            at = end
        if at != data_size:
            raise ValueError(f"{data_size - at} data bytes belong to no tensor")
        stored = {tensor_name(e["path"]): e for e in self.leaves if e["dtype"] is not None}
        extra = [name for name in tensors if name not in stored]
        if extra:
            raise ValueError(f"tensor {extra[0]!r} is not a stored leaf of the leaf table")
        for name, entry in stored.items():
            if name not in tensors:
                raise ValueError(f"leaf {name!r} has no tensor")
            code, shape, prefix = stored_as(entry)
            found = tensors[name]["shape"]
            fits = (found[: len(shape)] == shape and len(found) > len(shape) if prefix
                    else found == shape)
            if tensors[name]["dtype"] != code or not fits:
                raise ValueError(f"tensor {name!r} is {tensors[name]['dtype']}{found}; the leaf "
                                 f"table says {format_leaf(entry)}, stored as {code}{shape}")

    def arrays(self) -> dict[str, np.ndarray]:
        """Every stored leaf array by path, after checking the sha256 checksum."""
        items = []
        try:
            with safetensors.safe_open(self.path, framework="numpy") as f:
                for entry in self.leaves:
                    if entry["dtype"] is not None:
                        name = tensor_name(entry["path"])
                        items.append((name, f.get_tensor(name)))
        except Exception as e:  # any failure to read checked bytes means a damaged file
            raise CheckpointError(f"checkpoint {self.path} is corrupted (safetensors cannot "
                                  f"read it: {e})") from None
        for name, arr in items:
            t = self.tensors[name]
            if arr.dtype != ST_DTYPES[t["dtype"]] or list(arr.shape) != t["shape"]:
                raise CheckpointError(f"checkpoint {self.path} changed while being read")
        expected, actual = self.doc["checksum"].get("sha256"), _digest(self.doc, items)
        if actual != expected:
            raise CheckpointError(
                f"checkpoint {self.path} is corrupted: sha256 of its metadata and arrays is "
                f"{actual}, the header recorded {expected}")
        paths = (e["path"] for e in self.leaves if e["dtype"] is not None)
        return {p: arr for p, (_, arr) in zip(paths, items, strict=True)}


def read_metadata(path: PathLike) -> dict[str, Any]:
    """The caller metadata stored in a checkpoint or selector file, without reading the
    arrays: enough to build the template (configs, env id) before :func:`load`. Reads and
    checks the header only (``document_sha256`` included); the arrays and the ``sha256``
    over metadata and arrays are checked by :func:`load` / :func:`load_selector`."""
    return _Reader(path).metadata


def _check_structure(path: Path, table: list[dict[str, Any]], paths: list[str],
                     leaves: list[Any]) -> None:
    found = {e["path"]: e for e in table}
    expected = {p: describe(x) for p, x in zip(paths, leaves, strict=True)}
    missing = [p for p in paths if p not in found]
    extra = [e["path"] for e in table if e["path"] not in expected]

    def differs(p: str) -> bool:
        f, e = found[p], expected[p]
        if e["dtype"] is None or f["dtype"] is None:
            return (e["dtype"] is None) != (f["dtype"] is None)
        return (f["dtype"], f["shape"]) != (e["dtype"], e["shape"])

    changed = [p for p in paths if p in found and differs(p)]
    if not (missing or extra or changed):
        return
    order = {p: i for i, p in enumerate(paths)}
    first = min(missing + changed, key=order.__getitem__) if missing or changed else extra[0]
    exp = format_leaf(expected[first]) if first in expected else "<absent>"
    got = format_leaf(found[first]) if first in found else "<absent>"
    raise CheckpointError(
        f"checkpoint {path} does not match the template (another architecture or env?): "
        f"first difference at leaf {first or '<root>'}: template expects {exp}, checkpoint "
        f"has {got}; {len(changed)} leaves differ in shape/dtype, {len(missing)} template "
        f"leaves are missing from the checkpoint, {len(extra)} checkpoint leaves are extra"
    )


def load(path: PathLike, template: Any, expect: Mapping[str, Any] | None = None
         ) -> tuple[Any, dict[str, Any]]:
    """Load a checkpoint into ``template``'s structure: returns ``(tree, metadata)``.

    ``template`` is a pytree of the saved structure (concrete arrays or
    ``jax.ShapeDtypeStruct``); each leaf comes back as the template leaf's kind (jax or
    numpy array, typed key, Python scalar) with the saved dtype and bits. ``expect`` holds
    metadata entries that must match (e.g. ``{"env_id": ..., "actor_config": {...}}``).
    Both are checked before any array is read. Raises :class:`CheckpointError` naming the
    cause on any problem.
    """
    r = _Reader(path)
    r.require_kind(_TREE)
    _check_expect(r.path, r.metadata, expect)
    paths, leaves, treedef = flatten_with_paths(template)
    _check_structure(r.path, r.leaves, paths, leaves)
    arrays = r.arrays()
    table = {e["path"]: e for e in r.leaves}
    try:
        restored = [decode(arrays.get(p), table[p], x) for p, x in zip(paths, leaves, strict=True)]
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"checkpoint {r.path} is corrupted ({e})") from None
    return jax.tree_util.tree_unflatten(treedef, restored), r.metadata


def load_selector(path: PathLike, expected_size: int | None = None
                  ) -> tuple[jax.Array, dict[str, Any]]:
    """Load a file written by :func:`save_selector`: returns ``(theta[D], metadata)``.

    With ``expected_size`` (the selector size of the actor it will be put into), a vector
    of another length is refused naming both sizes, before it is read.
    """
    r = _Reader(path)
    r.require_kind(_SELECTOR)
    entry = next((e for e in r.leaves if e["path"] == _SELECTOR_LEAF), None)
    if (entry is None or entry["dtype"] is None or entry["dtype"].startswith("py_")
            or "key_impl" in entry or len(entry["shape"]) != 1):
        raise CheckpointError(f"selector file {r.path} is corrupted (no 1-D theta)")
    size = entry["shape"][0]
    if expected_size is not None and size != expected_size:
        raise CheckpointError(f"selector file {r.path} holds {size} parameters; the actor's "
                              f"selector has {expected_size}")
    theta = from_storage(r.arrays()[_SELECTOR_LEAF], logical_dtype(entry["dtype"]))
    return jnp.asarray(theta), r.metadata


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
    cause when ``src`` cannot be converted."""
    src = Path(src)
    dst = src.with_suffix(SUFFIX) if dst is None else Path(dst)
    if not src.is_file():
        raise CheckpointError(f"no format-1 file at {src}")
    if dst.exists():
        raise CheckpointError(f"{dst} exists; not overwriting it")
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


# ---------------------------------------------------------------------------- manager
class CheckpointManager:
    """The checkpoints of one run directory: ``run_dir/ckpt_<step:08d>.safetensors``,
    newest ``keep`` kept.

    One writer per run directory. Saves are atomic; older checkpoints are pruned only
    after the new one is on disk, so a crash never leaves fewer than before.
    """

    _NAME = re.compile(rf"^ckpt_(\d+){re.escape(SUFFIX)}$")
    _LEGACY_NAME = re.compile(r"^ckpt_(\d+)\.npz$")

    def __init__(self, run_dir: PathLike, keep: int | None = 3):
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep must be an int >= 1 or None (keep all), got {keep!r}")
        self.run_dir = Path(run_dir)
        self.keep = keep

    def path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` lives (names sort by step)."""
        return self.run_dir / f"ckpt_{step:08d}{SUFFIX}"

    def _scan(self, pattern: re.Pattern[str]) -> list[Path]:
        if not self.run_dir.is_dir():
            return []
        found = []
        for p in self.run_dir.iterdir():
            m = pattern.match(p.name)
            if m and p.is_file():
                found.append((int(m.group(1)), p))
        return [p for _, p in sorted(found)]

    def all(self) -> list[Path]:
        """Complete checkpoints, oldest first (temp files of unfinished writes excluded)."""
        return self._scan(self._NAME)

    def legacy(self) -> list[Path]:
        """Format-1 checkpoints (``ckpt_*.npz``, older feudal-es), oldest first; loaders
        refuse them, :func:`convert_v1` rewrites them."""
        return self._scan(self._LEGACY_NAME)

    def latest(self) -> Path | None:
        """The newest checkpoint, or None if the run has none yet."""
        found = self.all()
        return found[-1] if found else None

    def save(self, step: int, tree: Any, metadata: Mapping[str, Any] | None = None) -> Path:
        """Save ``tree`` as the checkpoint of ``step`` (added to the metadata as
        ``"step"``), then prune to the newest ``keep``. Returns its path."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        step = int(step)
        self._remove_stale_temps()
        path = _save(self.path(step), tree, {**(metadata or {}), "step": step}, _TREE)
        if self.keep is not None:
            for old in self.all()[: -self.keep]:
                old.unlink(missing_ok=True)
        return path

    def load_latest(self, template: Any, expect: Mapping[str, Any] | None = None
                    ) -> tuple[Any, dict[str, Any]]:
        """:func:`load` the newest checkpoint. A damaged newest checkpoint is reported
        (with the older ones that remain), not silently skipped."""
        found = self.all()
        if not found:
            legacy = self.legacy()
            if legacy:
                raise CheckpointError(
                    f"no format-{FORMAT_VERSION} checkpoint in {self.run_dir}, only format-1 "
                    f"ones of an older feudal-es ({', '.join(p.name for p in legacy)}); "
                    f"{_convert_hint(legacy[-1], 'the newest')}")
            raise CheckpointError(f"no checkpoint in {self.run_dir} (no ckpt_*{SUFFIX} files)")
        try:
            return load(found[-1], template, expect)
        except CheckpointError as e:
            if len(found) > 1:
                older = ", ".join(p.name for p in reversed(found[:-1]))
                raise CheckpointError(f"{e} (older checkpoints in this run: {older})") from None
            raise

    def _remove_stale_temps(self) -> None:
        """Drop temp files that a killed writer left behind (this is the only writer)."""
        if self.run_dir.is_dir():
            for p in self.run_dir.glob(temp_prefix(f"ckpt_*{SUFFIX}") + "*"):
                with contextlib.suppress(OSError):
                    p.unlink()
