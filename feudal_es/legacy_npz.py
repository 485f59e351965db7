"""Guarded reading of format-1 checkpoints (``.npz``: a zip of ``.npy`` members), only to
convert them (:func:`feudal_es.checkpoint.convert_v1`).

numpy's npz reader inflates a member in full before anything can be checked, so a 1.6 MiB
file can make it allocate gigabytes. :class:`StoredNpz` accepts only members stored
uncompressed within the file (format 1 never compressed), parses each ``.npy`` header with
a size cap, requires the declared shape x itemsize to equal the member's stored size
before reading a byte of data, refuses anything but numbers, and never unpickles.
Memory stays bounded by the file's size. Failures raise ``ValueError`` naming the member.
"""

from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

__all__ = ["NPY_HEADER_CAP", "StoredNpz"]

NPY_HEADER_CAP = 10_000  # bytes of a member's .npy header (numpy's default cap)


class StoredNpz:
    """An open ``.npz`` whose members were all checked to be stored within the file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        size = self.path.stat().st_size
        self._zf = zipfile.ZipFile(self.path)
        try:
            self._infos = {i.filename: i for i in self._zf.infolist()}
            for info in self._infos.values():
                if info.compress_type != zipfile.ZIP_STORED:
                    raise ValueError(f"member {info.filename!r} is compressed (method "
                                     f"{info.compress_type}); format 1 never compressed, and "
                                     "inflating it could take any amount of memory")
                if (info.file_size != info.compress_size
                        or info.header_offset + info.compress_size > size):
                    raise ValueError(f"member {info.filename!r} claims more bytes than the "
                                     "file holds")
        except BaseException:
            self._zf.close()
            raise

    def __enter__(self) -> StoredNpz:
        return self

    def __exit__(self, *exc: object) -> None:
        self._zf.close()

    @property
    def names(self) -> set[str]:
        return set(self._infos)

    def array(self, name: str) -> np.ndarray:
        """One member's array, its ``.npy`` header checked against its size first."""
        if name not in self._infos:
            raise ValueError(f"member {name!r} is missing")
        info = self._infos[name]
        with self._zf.open(info) as m:
            version = np.lib.format.read_magic(m)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"member {name!r} is .npy version {version}")
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(m, max_header_size=NPY_HEADER_CAP)
            if dtype != np.bool_ and not jnp.issubdtype(dtype, jnp.number):
                raise ValueError(f"member {name!r} holds {dtype}, not numbers (pickled "
                                 "objects are never read)")
            nbytes, held = math.prod(shape) * dtype.itemsize, info.file_size - m.tell()
            if nbytes != held:
                raise ValueError(f"member {name!r} declares {dtype}{list(shape)} "
                                 f"({nbytes} bytes) but holds {held} bytes")
            data = m.read(nbytes)
        if len(data) != nbytes:
            raise ValueError(f"member {name!r} is truncated")
        arr = np.frombuffer(data, dtype)
        return arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)
