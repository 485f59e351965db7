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

The code is split by concern, and this module, the public one, re-exports it:
:mod:`feudal_es._ckpt_format` (constants, :class:`CheckpointError`, checksums, metadata as
JSON), :mod:`feudal_es._ckpt_writer` (:func:`save`, :func:`save_selector`),
:mod:`feudal_es._ckpt_reader` (the guarded reader, :func:`read_metadata`, :func:`load`,
:func:`load_selector`), :mod:`feudal_es._ckpt_convert` (:func:`convert_v1`) and
:mod:`feudal_es._ckpt_manager` (:class:`CheckpointManager`).
"""

from __future__ import annotations

from feudal_es._ckpt_convert import convert_v1
from feudal_es._ckpt_format import (
    FORMAT_VERSION,
    MAX_HEADER_BYTES,
    SUFFIX,
    CheckpointError,
)
from feudal_es._ckpt_manager import CheckpointManager
from feudal_es._ckpt_reader import load, load_selector, read_metadata
from feudal_es._ckpt_writer import save, save_selector

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

