"""One writer per run directory: an exclusive lock on ``RUN_DIR/.lock``.

Two processes writing one run directory would interleave their ``metrics.jsonl`` rows and
overwrite each other's checkpoints, each believing the files its own. So every writer
(``feudal-es train``, fresh or ``--resume``, one seed or many; ``ESTrainer.run`` and
``ESTrainer.resume``) takes :class:`RunLock` on the top-level run directory before it
writes anything there and holds it while it writes; a second writer is refused with
:class:`RunDirInUse`, naming the holder (pid, host, start time, command) that the holder
wrote into the lock file.

The lock is ``fcntl.flock`` on an open file: the kernel releases it when the holder's
last descriptor closes, so a process that died (SIGKILL, power cut of a client of a
network filesystem that supports it) leaves no stale lock, only a stale note, which the
next holder overwrites. The lock is re-entrant within a process (the CLI takes it before
building the trainer, whose ``run`` takes it again). A child forked (not exec'ed) while
the lock is held shares it until it exits.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["LOCK_NAME", "RunDirInUse", "RunLock", "command_line", "holder"]

LOCK_NAME = ".lock"
# path of a directory locked by this process -> [descriptor, depth, created the directory]
_HELD: dict[str, list[Any]] = {}
_GUARD = threading.Lock()


def command_line() -> str:
    """This process's command line as a user would type it (``feudal-es train ...`` for
    the CLI, whether started as ``feudal-es`` or ``python -m feudal_es.cli``)."""
    argv = sys.argv or ["python"]
    if Path(argv[0]).name in ("feudal-es", "cli.py"):
        return shlex.join(["feudal-es", *argv[1:]])
    return shlex.join([Path(sys.executable).name, *argv])


def holder(run_dir: str | os.PathLike, wait: float = 1.0) -> dict[str, Any] | None:
    """The note of the process that holds (or last held) ``run_dir``'s lock: ``pid``,
    ``host``, ``started`` (UTC, ISO 8601) and ``command``; ``None`` if there is none yet.
    Waits up to ``wait`` seconds for a holder that has locked but not yet written it."""
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(OSError, ValueError):
            note = json.loads((Path(run_dir) / LOCK_NAME).read_text())
            if isinstance(note, dict):
                return note
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


class RunDirInUse(ValueError):
    """Another process holds the run directory's lock (a ``ValueError``: the CLI prints it
    as one line)."""

    def __init__(self, run_dir: Path, note: dict[str, Any] | None, advice: str):
        self.run_dir, self.holder = run_dir, note
        if note is None:
            who = "holder unknown"
        else:
            who = (f"pid {note.get('pid')} on host {note.get('host')}, started "
                   f"{note.get('started')}: {note.get('command')}")
        super().__init__(f"run directory {run_dir} is in use by another feudal-es process "
                         f"({who}); {advice}")


class RunLock:
    """The exclusive lock of one run directory, as a context manager.

    ``RunLock(run_dir).acquire()`` creates the directory if needed, locks
    ``run_dir/.lock`` without waiting and writes this process's note into it; raises
    :class:`RunDirInUse` (``advice`` ends its message) when another process holds it, and
    an ``OSError`` when the directory cannot be written (a read-only filesystem, a full
    disk). ``release()`` unlocks; a directory the lock created and nothing else wrote
    into is removed again.
    """

    def __init__(self, run_dir: str | os.PathLike,
                 advice: str = "wait for it to end or choose another --out"):
        self.path = Path(run_dir)
        self.advice = advice
        self._key: str | None = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> RunLock:
        if self._key is not None:
            raise RuntimeError(f"this RunLock of {self.path} is already held")
        with _GUARD:
            created = not self.path.exists()
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):  # a file where a directory goes
                file = next(p for p in (self.path, *self.path.parents) if p.exists())
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                         str(file)) from None
            key = os.path.realpath(self.path)
            if key in _HELD:
                _HELD[key][1] += 1
            else:
                _HELD[key] = [self._lock(), 1, created]
            self._key = key
        return self

    def _lock(self) -> int:
        """Lock the lock file and write the note; returns the locked descriptor."""
        path = self.path / LOCK_NAME
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunDirInUse(self.path, holder(self.path), self.advice) from None
            except BaseException:
                os.close(fd)
                raise
            try:  # the file a releasing holder removed is not the lock any more: again
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:
            note = {"pid": os.getpid(), "host": socket.gethostname(),
                    "started": datetime.datetime.now(datetime.timezone.utc)
                    .isoformat(timespec="seconds"), "command": command_line()}
            data = (json.dumps(note) + "\n").encode()
            os.ftruncate(fd, 0)
            if os.pwrite(fd, data, 0) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        except OSError as e:
            os.close(fd)
            if e.filename is None:
                e.filename = str(path)
            raise
        except BaseException:
            os.close(fd)
            raise
        return fd

    def release(self) -> None:
        """Unlock (the outermost release of a re-entrant lock); no-op if not held."""
        key, self._key = self._key, None
        if key is None:
            return
        with _GUARD:
            held = _HELD[key]
            held[1] -= 1
            if held[1]:
                return
            del _HELD[key]
            fd, _, created = held
            try:  # a directory holding only the lock: as it was before
                if [p.name for p in self.path.iterdir()] == [LOCK_NAME]:
                    (self.path / LOCK_NAME).unlink()
                    if created:
                        self.path.rmdir()
            except OSError:
                pass
            finally:
                os.close(fd)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._key is not None
