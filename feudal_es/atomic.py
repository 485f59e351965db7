"""Atomic file writes: a reader sees the old file or the new one, never part of one.

The bytes go to a temporary file beside the target (``.<name>.tmp-<random>``, a name no
reader of the project lists), which is flushed and fsynced, then renamed over the
target with ``os.replace``; the directory is fsynced so that the rename itself survives
a power cut. On an exception the temporary file is removed and the exception propagates
unchanged (an ``OSError`` such as ENOSPC stays an ``OSError``); after a SIGKILL it stays
behind under its temporary name, for its owner to clean up.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["atomic_write", "atomic_write_text", "temp_prefix"]


def temp_prefix(path: str | os.PathLike) -> str:
    """The name prefix of :func:`atomic_write`'s temporary files for ``path``."""
    return f".{Path(path).name}.tmp-"


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not supported everywhere (e.g. Windows)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Replace ``path`` by what ``write`` writes into the binary file it is given.

    Creates the parent directory if needed; the new file is readable by all (0o644).
    Returns ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), dir=path.parent)
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
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write` of ``text`` encoded as UTF-8."""
    return atomic_write(path, lambda f: f.write(text.encode()))
