"""Pytree leaves <-> the arrays a checkpoint stores, and back into a template's leaves.

One leaf becomes one stored array plus an entry of the leaf table (path, logical dtype,
shape; ``key_impl`` for typed PRNG keys, ``weak_type`` for JAX arrays). Typed keys are
stored as their ``jax.random.key_data``; dtypes outside safetensors' numpy set (bfloat16,
float8, int4, complex, ...) as their raw bits in unsigned words; Python scalars come back
as their Python type; non-array leaves (an activation function inside ``eqx.nn.MLP``) are
not stored and come from the template. :mod:`feudal_es.checkpoint` writes and checks the
files; this module only converts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ST_CODES", "ST_DTYPES", "decode", "describe", "encode", "flatten_with_paths",
           "format_leaf", "from_storage", "is_key", "logical_dtype", "stored_as",
           "tensor_name", "to_storage"]

# safetensors dtype codes, as little-endian numpy dtypes (not C64, which older releases
# lack: complex64 is stored as raw bits, like complex128)
ST_DTYPES = {code: np.dtype(d) for code, d in (
    ("BOOL", "|b1"), ("U8", "|u1"), ("I8", "|i1"), ("U16", "<u2"), ("I16", "<i2"),
    ("F16", "<f2"), ("U32", "<u4"), ("I32", "<i4"), ("F32", "<f4"), ("U64", "<u8"),
    ("I64", "<i8"), ("F64", "<f8"))}
ST_CODES = {d: code for code, d in ST_DTYPES.items()}



def is_key(x: Any) -> bool:
    return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


_PY_SCALARS = ((bool, "py_bool", np.bool_), (int, "py_int", np.int64),
               (float, "py_float", np.float64), (complex, "py_complex", np.complex128))


def py_scalar(x: Any) -> tuple[str, type] | None:
    if isinstance(x, np.generic):  # np.float64 subclasses float, but it is a numpy leaf
        return None
    for typ, name, np_type in _PY_SCALARS:  # bool first: it is a subclass of int
        if isinstance(x, typ):
            return name, np_type
    return None


def describe(x: Any) -> dict[str, Any]:
    """Logical description of one leaf: what the template and the file must agree on."""
    scalar = py_scalar(x)
    if scalar is not None:
        return {"dtype": scalar[0], "shape": []}
    if isinstance(x, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)):
        return {"dtype": str(x.dtype), "shape": list(x.shape)}
    return {"dtype": None, "shape": None, "type": type(x).__name__}  # not stored


def format_leaf(desc: Mapping[str, Any]) -> str:
    if desc["dtype"] is None:
        return f"<not stored: {desc.get('type', '?')}>"
    return f"{desc['dtype']}[{', '.join(map(str, desc['shape']))}]"


def tensor_name(path: str) -> str:
    return path or "<root>"


def logical_dtype(name: str) -> np.dtype:
    """The numpy dtype of a leaf-table dtype name (``py_*`` scalars included)."""
    for _, py_name, np_type in _PY_SCALARS:
        if name == py_name:
            return np.dtype(np_type)
    try:
        dtype = jnp.dtype(name)
    except TypeError:
        raise ValueError(f"unknown dtype {name!r}") from None
    if dtype != np.bool_ and not jnp.issubdtype(dtype, jnp.number):
        raise ValueError(f"dtype {name!r} is not numeric")
    return dtype


def raw_words(dtype: np.dtype) -> tuple[np.dtype, int]:
    """(unsigned word dtype, words per element) holding the raw bits of ``dtype``."""
    size = dtype.itemsize
    word = size if size in (1, 2, 4, 8) else 8
    if size % word:
        raise ValueError(f"dtype {dtype} ({size} bytes) cannot be stored as raw bits")
    return np.dtype(f"<u{word}"), size // word


def to_storage(arr: np.ndarray) -> np.ndarray:
    """An array as stored: as is if safetensors names its dtype, else its raw bits."""
    arr = np.asarray(arr, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    if arr.dtype in ST_CODES:
        return arr
    word, n = raw_words(arr.dtype)
    return arr.view(word) if n == 1 else arr[..., None].view(word)


def from_storage(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Undo :func:`to_storage` for an array of logical ``dtype``."""
    if arr.dtype == dtype:
        return arr
    word, n = raw_words(dtype)
    if arr.dtype != word:
        raise ValueError(f"{dtype} data stored as {arr.dtype}")
    return arr.view(dtype) if n == 1 else arr.view(dtype)[..., 0]


def stored_as(entry: Mapping[str, Any]) -> tuple[str, list[int], bool]:
    """How the leaf table says a leaf is stored: (safetensors dtype code, shape, whether
    the shape is only a prefix: key data has trailing dimensions set by the key impl)."""
    shape = entry["shape"]
    if "key_impl" in entry:
        return "U32", shape, True
    dtype = logical_dtype(entry["dtype"])
    if dtype in ST_CODES:
        return ST_CODES[dtype], shape, False
    word, n = raw_words(dtype)
    return ST_CODES[word], shape + [n] * (n > 1), False


def encode(x: Any) -> tuple[np.ndarray | None, dict[str, Any]]:
    """One leaf -> (array to store or None, its leaf-table entry)."""
    desc = describe(x)
    if desc["dtype"] is None:
        return None, desc
    scalar = py_scalar(x)
    if scalar is not None:
        try:
            return to_storage(np.asarray(x, dtype=scalar[1])), desc
        except OverflowError:
            raise ValueError(f"Python int {x} does not fit in int64") from None
    if is_key(x):
        desc["key_impl"] = str(jax.random.key_impl(x))
        x = jax.random.key_data(x)
    if isinstance(x, jax.Array):
        desc["weak_type"] = bool(x.weak_type)
    arr = np.asarray(jax.device_get(x))
    if arr.dtype != np.bool_ and not jnp.issubdtype(arr.dtype, jnp.number):
        raise ValueError(f"dtype {arr.dtype} is not numeric; only numeric arrays are saved")
    return to_storage(arr), desc


def decode(arr: np.ndarray | None, desc: Mapping[str, Any], template: Any) -> Any:
    """Stored array + its entry -> a leaf of the template's kind (shapes already checked)."""
    if desc["dtype"] is None:
        return template
    if desc["dtype"].startswith("py_"):
        return type(template)(from_storage(arr, logical_dtype(desc["dtype"])).item())
    if is_key(template):
        key = jax.random.wrap_key_data(jnp.asarray(arr), impl=desc["key_impl"])
        if (key.dtype, key.shape) != (template.dtype, template.shape):
            raise ValueError(f"key data {arr.dtype}{list(arr.shape)} of {desc['key_impl']} "
                             f"for keys {template.dtype}{list(template.shape)}")
        return place(key, template)
    arr = from_storage(arr, np.dtype(template.dtype))
    if isinstance(template, np.generic):
        return arr[()]
    if isinstance(template, np.ndarray):
        return arr
    out = jnp.asarray(arr)
    if desc.get("weak_type"):
        out = weak(out)
    return place(out, template)


def weak(x: jax.Array) -> jax.Array:
    """Restore a weakly typed array (e.g. ``jnp.asarray(0.1)``) so that jitted code sees
    the same abstract value as before the save (no retrace, same dtype promotion)."""
    try:
        from jax._src.lax.lax import _convert_element_type
    except ImportError:  # pragma: no cover - private API moved; value is still exact
        return x
    return _convert_element_type(x, x.dtype, weak_type=True)


def place(x: jax.Array, template: Any) -> jax.Array:
    """Put a restored array where the template's leaf lives (committed / sharded)."""
    sharding = getattr(template, "sharding", None)
    committed = getattr(template, "committed", isinstance(template, jax.ShapeDtypeStruct))
    if sharding is None or not committed:
        return x
    return jax.device_put(x, sharding)


def flatten_with_paths(tree: Any) -> tuple[list[str], list[Any], Any]:
    leaves_with_path, treedef = jax.tree_util.tree_flatten_with_path(tree)
    paths = [jax.tree_util.keystr(p) for p, _ in leaves_with_path]
    if len(set(paths)) != len(paths):
        dup = next(p for p in paths if paths.count(p) > 1)
        raise ValueError(f"two leaves share the path {dup!r}; cannot name them apart")
    return paths, [x for _, x in leaves_with_path], treedef
