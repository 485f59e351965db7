"""Reading checkpoint files, guarded: nothing is read or allocated before it is checked.

:class:`_Reader` opens a file and checks its header (the 8-byte length against
:data:`~feudal_es._ckpt_format.MAX_HEADER_BYTES` and the file size, the JSON, the
document's format, version, ``document_sha256`` and leaf table, every tensor's dtype,
shape and ``data_offsets``) before any tensor byte is read; :meth:`_Reader.arrays` then
reads the tensors and checks ``sha256``. On it: :func:`read_metadata` (the header only),
:func:`load` (into a template, once :func:`_check_expect` and :func:`_check_structure`
have compared the header with what the caller expects) and :func:`load_selector`.
Format-1 (``.npz``) and other zip files are recognised by their first bytes and refused
with a message saying how to convert them.
"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import safetensors

from feudal_es._ckpt_format import (
    _DOC_KEY,
    _FORMAT,
    _MAX_NDIM,
    _SELECTOR,
    _SELECTOR_LEAF,
    _TREE,
    _V1_HEADER,
    _ZIP_MAGIC,
    FORMAT_VERSION,
    MAX_HEADER_BYTES,
    SUFFIX,
    CheckpointError,
    PathLike,
    _digest,
    _document_digest,
    _to_json,
)
from feudal_es.leaves import (
    ST_DTYPES,
    decode,
    describe,
    flatten_with_paths,
    format_leaf,
    from_storage,
    logical_dtype,
    stored_as,
    tensor_name,
)


# ----------------------------------------------------------------------- expectations
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


def _renamer(renamed: Mapping[str, str] | None):
    """A leaf path as the template names it: an old path (or a prefix of whole path
    components) in ``renamed`` becomes its new one."""
    def rename(path: str) -> str:
        for old, new in (renamed or {}).items():
            if path == old or (path.startswith(old) and path[len(old)] in ".["):
                return new + path[len(old):]
        return path

    return rename


def load(path: PathLike, template: Any, expect: Mapping[str, Any] | None = None,
         renamed: Mapping[str, str] | None = None) -> tuple[Any, dict[str, Any]]:
    """Load a checkpoint into ``template``'s structure: returns ``(tree, metadata)``.

    ``template`` is a pytree of the saved structure (concrete arrays or
    ``jax.ShapeDtypeStruct``); each leaf comes back as the template leaf's kind (jax or
    numpy array, typed key, Python scalar) with the saved dtype and bits. ``expect`` holds
    metadata entries that must match (e.g. ``{"env_id": ..., "actor_config": {...}}``).
    Both are checked before any array is read. ``renamed`` maps leaf paths the file may
    use (written before a field was renamed) to the template's, whole path components at
    a time (``{"['a'].held": "['a'].option"}`` also renames ``['a'].held.skill``). Raises
    :class:`CheckpointError` naming the cause on any problem.
    """
    r = _Reader(path)
    r.require_kind(_TREE)
    _check_expect(r.path, r.metadata, expect)
    paths, leaves, treedef = flatten_with_paths(template)
    rename = _renamer(renamed)
    entries = [{**e, "path": rename(e["path"])} for e in r.leaves]
    _check_structure(r.path, entries, paths, leaves)
    arrays = {rename(p): a for p, a in r.arrays().items()}
    table = {e["path"]: e for e in entries}
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
