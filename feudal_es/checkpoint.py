"""Checkpoints: safe, atomic, verified saving and loading of a run's pytree state.

A run's state (actor and critic modules, optax states, ``ESState``, batched env states,
typed PRNG keys, Python counters) is an arbitrary pytree. It is saved as **one** ``.npz``
file (an uncompressed zip of ``.npy`` arrays, one member per leaf, named by the leaf's
path) plus one member ``__feudal_es__`` holding a JSON document: the format version, the
kind of file, the leaf table (path, dtype, shape), a sha256 checksum of the array bytes
and the caller's metadata (env id, configs, seed, step, ...).

Why this shape:

- **Safe.** Nothing is ever unpickled: arrays are read with ``allow_pickle=False`` and
  metadata is JSON, so loading a file from someone else cannot run code.
- **All or nothing.** Arrays and metadata live in one file, written to a temporary file in
  the same directory, fsynced, then renamed over the target (``os.replace``). A crash or
  SIGKILL at any moment leaves either the previous file or the new one, never half of one.
- **Verified.** The checksum is checked on load; a truncated, byte-flipped or foreign file
  raises :class:`CheckpointError` with a message saying which, never a numpy/zipfile
  traceback.
- **Template-filled.** Loading takes a template pytree of the same structure (e.g. a
  freshly initialised train state, or ``jax.eval_shape`` of one) and fills it, so Equinox
  modules, NamedTuples and static fields come from code, not from the file. A template of
  another architecture is refused with the first differing leaf named.

Typed PRNG keys are stored as their ``jax.random.key_data`` and rebuilt with
``jax.random.wrap_key_data``; non-array leaves that are not Python scalars (e.g. the
activation functions inside ``eqx.nn.MLP``) are not stored and are taken from the template.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import re
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "CheckpointManager",
    "load",
    "load_selector",
    "read_metadata",
    "save",
    "save_selector",
]

FORMAT_VERSION = 1  # bump when the on-disk layout changes; load refuses other versions
_FORMAT = "feudal-es"
_HEADER = "__feudal_es__"  # zip member (without .npy) holding the JSON document
_TREE, _SELECTOR = "tree", "selector"
_SELECTOR_PATH = "theta"
_ZIP_MAGIC = b"PK\x03\x04"

PathLike = str | os.PathLike


class CheckpointError(ValueError):
    """A checkpoint cannot be used: missing, foreign, corrupted, of another format version,
    or not matching the template / expected metadata. The message names the cause."""


# ----------------------------------------------------------------------------- leaves
def _is_key(x: Any) -> bool:
    return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


_PY_SCALARS = ((bool, "py_bool", np.bool_), (int, "py_int", np.int64),
               (float, "py_float", np.float64), (complex, "py_complex", np.complex128))


def _py_scalar(x: Any) -> tuple[str, type] | None:
    if isinstance(x, np.generic):  # np.float64 subclasses float, but it is a numpy leaf
        return None
    for typ, name, np_type in _PY_SCALARS:  # bool first: it is a subclass of int
        if isinstance(x, typ):
            return name, np_type
    return None


def _describe(x: Any) -> dict[str, Any]:
    """Logical description of one leaf: what the template and the file must agree on."""
    scalar = _py_scalar(x)
    if scalar is not None:
        return {"dtype": scalar[0], "shape": []}
    if isinstance(x, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)):
        return {"dtype": str(x.dtype), "shape": list(x.shape)}
    return {"dtype": None, "shape": None, "type": type(x).__name__}  # not stored


def _fmt(desc: Mapping[str, Any]) -> str:
    if desc["dtype"] is None:
        return f"<not stored: {desc.get('type', '?')}>"
    return f"{desc['dtype']}[{', '.join(map(str, desc['shape']))}]"


def _encode(x: Any) -> tuple[np.ndarray | None, dict[str, Any]]:
    """One leaf -> (array to store or None, its leaf-table entry)."""
    desc = _describe(x)
    if desc["dtype"] is None:
        return None, desc
    scalar = _py_scalar(x)
    if scalar is not None:
        try:
            return np.asarray(x, dtype=scalar[1]), desc
        except OverflowError:
            raise ValueError(f"Python int {x} does not fit in int64") from None
    if _is_key(x):
        desc["key_impl"] = str(jax.random.key_impl(x))
        x = jax.random.key_data(x)
    if isinstance(x, jax.Array):
        desc["weak_type"] = bool(x.weak_type)
    arr = np.asarray(jax.device_get(x))
    if np.dtype(arr.dtype.str) != arr.dtype:  # e.g. bfloat16: .npy would store raw void
        arr = arr.view(f"u{arr.dtype.itemsize}")
    return arr, desc


def _decode(arr: np.ndarray, desc: Mapping[str, Any], template: Any) -> Any:
    """Stored array + its entry -> a leaf of the template's kind (already shape-checked)."""
    if desc["dtype"] is None:
        return template
    if desc["dtype"].startswith("py_"):
        if arr.shape != ():
            raise ValueError(f"scalar stored with shape {arr.shape}")
        return type(template)(arr.item())
    if _is_key(template):
        key = jax.random.wrap_key_data(jnp.asarray(arr), impl=desc["key_impl"])
        if key.shape != template.shape:
            raise ValueError(f"key data of shape {arr.shape} for keys of shape {template.shape}")
        return _place(key, template)
    arr = _as_dtype(arr, np.dtype(template.dtype))
    if arr.shape != template.shape:
        raise ValueError(f"array stored with shape {arr.shape}, declared {template.shape}")
    if isinstance(template, np.generic):
        return arr[()]
    if isinstance(template, np.ndarray):
        return arr
    out = jnp.asarray(arr)
    if desc.get("weak_type"):
        out = _weak(out)
    return _place(out, template)


def _as_dtype(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Undo :func:`_encode`'s raw-bits storage of dtypes .npy cannot name (bfloat16...)."""
    if arr.dtype == dtype:
        return arr
    if arr.dtype != np.dtype(f"u{dtype.itemsize}"):
        raise ValueError(f"{dtype} data stored as {arr.dtype}")
    return arr.view(dtype)


def _weak(x: jax.Array) -> jax.Array:
    """Restore a weakly typed array (e.g. ``jnp.asarray(0.1)``) so that jitted code sees
    the same abstract value as before the save (no retrace, same dtype promotion)."""
    try:
        from jax._src.lax.lax import _convert_element_type
    except ImportError:  # pragma: no cover - private API moved; value is still exact
        return x
    return _convert_element_type(x, x.dtype, weak_type=True)


def _place(x: jax.Array, template: Any) -> jax.Array:
    """Put a restored array where the template's leaf lives (committed / sharded)."""
    sharding = getattr(template, "sharding", None)
    committed = getattr(template, "committed", isinstance(template, jax.ShapeDtypeStruct))
    if sharding is None or not committed:
        return x
    return jax.device_put(x, sharding)


def _flatten(tree: Any) -> tuple[list[str], list[Any], Any]:
    leaves_with_path, treedef = jax.tree_util.tree_flatten_with_path(tree)
    paths = [jax.tree_util.keystr(p) for p, _ in leaves_with_path]
    if len(set(paths)) != len(paths):
        dup = next(p for p in paths if paths.count(p) > 1)
        raise ValueError(f"two leaves share the path {dup!r}; cannot name them apart")
    return paths, [x for _, x in leaves_with_path], treedef


def _member(path: str) -> str:
    return (path or "<root>") + ".npy"


def _digest(items: list[tuple[str, np.ndarray]]) -> str:
    """sha256 over every stored array's name, dtype, shape and bytes, in leaf order."""
    h = hashlib.sha256()
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
def _write_payload(f: IO[bytes], items: list[tuple[str, np.ndarray]]) -> None:
    """Write the zip: one ``.npy`` member per (name, array), never pickling."""
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in items:
            with zf.open(name, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, arr, allow_pickle=False)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not supported everywhere (e.g. Windows)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}.tmp-"


def _atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write into a temp file beside ``path``, fsync, rename over ``path``, fsync the dir.

    Readers see the old file or the new one, never a partial one; on an exception the
    temp file is removed (after a SIGKILL it stays, under a name no reader lists).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _save(path: PathLike, tree: Any, metadata: Mapping[str, Any] | None, kind: str) -> Path:
    path = Path(path)
    user_meta = _to_json(metadata, "metadata")
    paths, leaves, _ = _flatten(tree)
    table, items = [], []
    for p, leaf in zip(paths, leaves, strict=True):
        try:
            arr, desc = _encode(leaf)
        except ValueError as e:
            raise ValueError(f"cannot save leaf {p!r}: {e}") from None
        table.append({"path": p, **desc})
        if arr is not None:
            if arr.dtype.hasobject:
                raise ValueError(f"leaf {p!r} is an object array; only numeric arrays are saved")
            items.append((_member(p), arr))
    header = {
        "format": _FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "jax_version": jax.__version__,
        "checksum": {"sha256": _digest(items)},
        "leaves": table,
        "metadata": user_meta,
    }
    blob = np.frombuffer(json.dumps(header, indent=1).encode(), dtype=np.uint8)
    _atomic_write(path, lambda f: _write_payload(f, [(_member(_HEADER), blob), *items]))
    return path


def save(path: PathLike, tree: Any, metadata: Mapping[str, Any] | None = None) -> Path:
    """Save a pytree and JSON metadata to ``path`` as one checkpoint file, atomically.

    ``metadata`` should hold what is needed to rebuild the template and to refuse a wrong
    one later (env id and kwargs, actor/critic/ES configs, seed, step); values must be
    JSON-serialisable (numpy scalars and dataclasses are converted). Returns ``path``.
    """
    return _save(path, tree, metadata, _TREE)


def save_selector(path: PathLike, theta: Any, metadata: Mapping[str, Any] | None = None) -> Path:
    """Save one flat selector parameter vector (e.g. a run's ``best_selector``) atomically,
    in the same safe format, for ``feudal-es eval`` to load later."""
    arr = np.asarray(jax.device_get(theta))
    if arr.ndim != 1 or not jnp.issubdtype(arr.dtype, jnp.number):
        raise ValueError(f"theta must be a 1-D numeric vector, got {arr.dtype}{list(arr.shape)}")
    return _save(path, {_SELECTOR_PATH: theta}, metadata, _SELECTOR)


# ------------------------------------------------------------------------------- read
def _valid_entry(e: Any) -> bool:
    if not isinstance(e, dict) or not isinstance(e.get("path"), str):
        return False
    if e.get("dtype") is None:
        return e.get("shape") is None
    shape = e.get("shape")
    return (isinstance(e["dtype"], str) and isinstance(shape, list)
            and all(isinstance(n, int) and n >= 0 for n in shape))


class _Reader:
    """An open checkpoint file whose header has been read and validated."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            what = "is a directory" if self.path.is_dir() else "does not exist"
            raise CheckpointError(f"no checkpoint at {self.path}: it {what}")
        with open(self.path, "rb") as f:
            magic = f.read(4)
        if not magic:
            raise CheckpointError(f"checkpoint {self.path} is empty (truncated write?)")
        if magic != _ZIP_MAGIC:
            raise CheckpointError(f"{self.path} is not a feudal-es checkpoint (not an npz archive)")
        try:
            self.zf = zipfile.ZipFile(self.path)
        except Exception as e:
            raise CheckpointError(
                f"checkpoint {self.path} is truncated or corrupted (unreadable archive: {e})"
            ) from None
        try:
            self.header = self._read_header()
        except BaseException:
            self.zf.close()
            raise

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.zf.close()

    def array(self, name: str) -> np.ndarray:
        """One stored array, read without pickle; any failure is a CheckpointError."""
        try:
            with self.zf.open(name) as member:
                return np.lib.format.read_array(member, allow_pickle=False)
        except KeyError:
            raise CheckpointError(
                f"checkpoint {self.path} is corrupted: member {name!r} is missing"
            ) from None
        except Exception as e:  # any failure to decode stored bytes means a damaged file
            raise CheckpointError(
                f"checkpoint {self.path} is corrupted or unsafe: cannot read {name!r} ({e})"
            ) from None

    def _read_header(self) -> dict[str, Any]:
        if _member(_HEADER) not in self.zf.namelist():
            raise CheckpointError(
                f"{self.path} is not a feudal-es checkpoint (no {_HEADER} entry)"
            )
        blob = self.array(_member(_HEADER))
        try:
            if blob.dtype != np.uint8 or blob.ndim != 1:
                raise ValueError(f"header has dtype {blob.dtype} and shape {blob.shape}")
            header = json.loads(blob.tobytes().decode())
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(
                f"checkpoint {self.path} is corrupted (bad header: {e})"
            ) from None
        if not isinstance(header, dict) or header.get("format") != _FORMAT:
            raise CheckpointError(f"{self.path} is not a feudal-es checkpoint")
        version = header.get("format_version")
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"checkpoint {self.path} has format version {version!r}; this feudal-es "
                f"reads format version {FORMAT_VERSION}"
            )
        for field, typ in (("leaves", list), ("metadata", dict), ("checksum", dict)):
            if not isinstance(header.get(field), typ):
                raise CheckpointError(f"checkpoint {self.path} is corrupted (bad {field!r})")
        if not all(_valid_entry(e) for e in header["leaves"]):
            raise CheckpointError(f"checkpoint {self.path} is corrupted (bad leaf table)")
        return header

    def arrays(self) -> dict[str, np.ndarray]:
        """Every stored leaf array by path, after checking the sha256 checksum."""
        out, items = {}, []
        for entry in self.header["leaves"]:
            if entry.get("dtype") is not None:
                name = _member(entry["path"])
                out[entry["path"]] = arr = self.array(name)
                items.append((name, arr))
        expected = self.header["checksum"].get("sha256")
        actual = _digest(items)
        if actual != expected:
            raise CheckpointError(
                f"checkpoint {self.path} is corrupted: sha256 of its arrays is {actual}, "
                f"the header recorded {expected}"
            )
        return out


def read_metadata(path: PathLike) -> dict[str, Any]:
    """The caller metadata stored in a checkpoint or selector file, without reading the
    arrays: enough to build the template (configs, env id) before :func:`load`."""
    with _Reader(path) as r:
        return r.header["metadata"]


def _check_structure(path: Path, table: list[dict[str, Any]], paths: list[str],
                     leaves: list[Any]) -> None:
    found = {e["path"]: e for e in table}
    expected = {p: _describe(x) for p, x in zip(paths, leaves, strict=True)}
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
    exp = _fmt(expected[first]) if first in expected else "<absent>"
    got = _fmt(found[first]) if first in found else "<absent>"
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
    Raises :class:`CheckpointError` naming the cause on any problem.
    """
    with _Reader(path) as r:
        header = r.header
        if header.get("kind") != _TREE:
            raise CheckpointError(
                f"{r.path} is a {header.get('kind')!r} file, not a training checkpoint"
                + ("; use load_selector" if header.get("kind") == _SELECTOR else "")
            )
        arrays = r.arrays()
    _check_expect(r.path, header["metadata"], expect)
    paths, leaves, treedef = _flatten(template)
    _check_structure(r.path, header["leaves"], paths, leaves)
    table = {e["path"]: e for e in header["leaves"]}
    try:
        restored = [_decode(arrays.get(p), table[p], x) for p, x in zip(paths, leaves, strict=True)]
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"checkpoint {r.path} is corrupted ({e})") from None
    return jax.tree_util.tree_unflatten(treedef, restored), header["metadata"]


def load_selector(path: PathLike, expected_size: int | None = None
                  ) -> tuple[jax.Array, dict[str, Any]]:
    """Load a file written by :func:`save_selector`: returns ``(theta[D], metadata)``.

    With ``expected_size`` (the selector size of the actor it will be put into), a vector
    of another length is refused naming both sizes.
    """
    with _Reader(path) as r:
        if r.header.get("kind") != _SELECTOR:
            raise CheckpointError(
                f"{r.path} is a {r.header.get('kind')!r} file, not a selector file"
            )
        arrays = r.arrays()
    theta = arrays.get(f"[{_SELECTOR_PATH!r}]")
    entry = next((e for e in r.header["leaves"] if e["path"] == f"[{_SELECTOR_PATH!r}]"), None)
    if theta is None or entry is None or theta.ndim != 1 or entry["dtype"].startswith("py_"):
        raise CheckpointError(f"selector file {r.path} is corrupted (no 1-D theta)")
    if expected_size is not None and theta.shape[0] != expected_size:
        raise CheckpointError(
            f"selector file {r.path} holds {theta.shape[0]} parameters; the actor's "
            f"selector has {expected_size}"
        )
    try:
        theta = _as_dtype(theta, jnp.dtype(entry["dtype"]))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"selector file {r.path} is corrupted ({e})") from None
    return jnp.asarray(theta), r.header["metadata"]


# ---------------------------------------------------------------------------- manager
class CheckpointManager:
    """The checkpoints of one run directory: ``run_dir/ckpt_<step>.npz``, newest ``keep``
    kept.

    One writer per run directory. Saves are atomic; older checkpoints are pruned only
    after the new one is on disk, so a crash never leaves fewer than before.
    """

    _NAME = re.compile(r"^ckpt_(\d+)\.npz$")

    def __init__(self, run_dir: PathLike, keep: int | None = 3):
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep must be an int >= 1 or None (keep all), got {keep!r}")
        self.run_dir = Path(run_dir)
        self.keep = keep

    def path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` lives (names sort by step)."""
        return self.run_dir / f"ckpt_{step:08d}.npz"

    def all(self) -> list[Path]:
        """Complete checkpoints, oldest first (temp files of unfinished writes excluded)."""
        if not self.run_dir.is_dir():
            return []
        found = []
        for p in self.run_dir.iterdir():
            m = self._NAME.match(p.name)
            if m and p.is_file():
                found.append((int(m.group(1)), p))
        return [p for _, p in sorted(found)]

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
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()
        return path

    def load_latest(self, template: Any, expect: Mapping[str, Any] | None = None
                    ) -> tuple[Any, dict[str, Any]]:
        """:func:`load` the newest checkpoint. A damaged newest checkpoint is reported
        (with the older ones that remain), not silently skipped."""
        found = self.all()
        if not found:
            raise CheckpointError(f"no checkpoint in {self.run_dir} (no ckpt_*.npz files)")
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
            for p in self.run_dir.glob(".ckpt_*.npz.tmp-*"):
                with contextlib.suppress(OSError):
                    p.unlink()
