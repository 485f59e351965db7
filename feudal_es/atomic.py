"""Atomic file writes: a reader sees the old file or the new one, never part of one.

The bytes go to a temporary file beside the target (``.<name>.tmp-<random>``, a name no
reader of the project lists), which is flushed and fsynced, then renamed over the
target with ``os.replace``; the directory is fsynced so that the rename itself survives
a power cut. On an exception the temporary file is removed and the exception propagates
(an ``OSError`` such as ENOSPC stays the same ``OSError``, its ``filename`` set to the
target when it named none or the temporary file, so that a message names the file the
user knows); after a SIGKILL it stays behind under its temporary name, for its owner to
clean up. :func:`append` adds whole lines to a log the same way: all of them or none.
:func:`check_writable` meets the errors a write would meet before any work is spent.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

__all__ = ["append", "atomic_write", "atomic_write_text", "check_writable", "temp_prefix"]


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


def _oserror(code: int, path: str | os.PathLike) -> OSError:
    return OSError(code, os.strerror(code), str(path))  # OSError picks the subclass


@contextlib.contextmanager
def _naming(path: Path, *temporary: str) -> Iterator[None]:
    """An ``OSError`` raised inside names ``path`` (unless it names another file)."""
    try:
        yield
    except OSError as e:
        if e.filename is None or os.fspath(e.filename) in temporary:
            e.filename = str(path)
        raise


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as e:  # a regular file where the directory must be
        raise _oserror(errno.ENOTDIR, e.filename or path.parent) from None


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Replace ``path`` by what ``write`` writes into the binary file it is given.

    Creates the parent directory if needed; the new file is readable by all (0o644).
    Returns ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    _make_parent(path)
    with _naming(path):
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), dir=path.parent)
    try:
        with _naming(path, tmp), os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        with _naming(path, tmp):
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


def append(path: str | os.PathLike, text: str) -> Path:
    """Append ``text`` (whole lines) to ``path``, creating it: on an error (a full disk)
    the file is cut back to its old length, so a reader never sees part of a line."""
    path = Path(path)
    data = text.encode()
    with _naming(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
    return path


def check_writable(path: str | os.PathLike) -> Path:
    """Raise the ``OSError`` that writing ``path`` would meet, without writing anything:
    ``path`` is a directory, a parent of it is a regular file, or the nearest existing
    parent cannot be written (a read-only filesystem, no permission). A full disk shows
    only when writing. Returns ``path`` as a :class:`~pathlib.Path`."""
    path = Path(path)
    if path.is_dir():
        raise _oserror(errno.EISDIR, path)
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise _oserror(errno.ENOTDIR, parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        read_only = os.statvfs(parent).f_flag & os.ST_RDONLY
        raise _oserror(errno.EROFS if read_only else errno.EACCES, parent)
    return path
