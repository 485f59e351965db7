"""One host worker: the side of :mod:`feudal_es.host_workers` that runs in a worker
process (or Ray actor), and how exceptions cross between the two.

A worker builds its share of MAPPO's env copies (:class:`WorkerInit`: the env factory,
the copies' indices, the collector's settings) into a
:class:`~feudal_es.host_copies.CopyGroup` and answers the pool's requests
(:class:`WorkerServer`): ``("reset", [(copy, seed), ...])`` and ``("step", actions,
skills)``, each answered ``("ok", result, notices)`` or ``("error", exception)``.
:func:`serve` is a worker process's main loop; :class:`RayWorker` the same as a Ray actor.

An exception raised in a worker (the env's own, or the checks'
:class:`~feudal_es.pettingzoo_host.EnvOutputError` and
:class:`~feudal_es.pettingzoo_host.EnvTimeout`) travels as :func:`pack_error` packs it
and is rebuilt by :func:`unpack_error` in the main process as the same exception, type
and message, its ``__cause__`` a :class:`RemoteTraceback` with the worker's traceback and
frames (:mod:`feudal_es.errors` reads them to name the line of the user's env that
raised, as it does for an env stepped in process). Nothing here imports JAX's backends.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

from feudal_es.host_copies import CopiesLost, CopyGroup
from feudal_es.pettingzoo_host import EnvNotices, HostEnvSpec

__all__ = ["RayWorker", "RemoteTraceback", "WorkerInit", "WorkerServer", "pack_error",
           "serve", "unpack_error"]


class RemoteTraceback(Exception):
    """The ``__cause__`` of an exception raised in a worker and re-raised here: the
    worker's formatted traceback (its ``str``) and its frames as ``(filename, lineno,
    name)``, innermost last (read by :mod:`feudal_es.errors` to name the user's line)."""

    def __init__(self, text: str, frames: list[tuple[str, int, str]]):
        super().__init__(text)
        self.text, self.frames = text, frames

    def __str__(self) -> str:
        return f"\n\"\"\"\n(in a host worker process)\n{self.text}\"\"\""


def pack_error(e: BaseException) -> tuple:
    """An exception as a worker sends it: the pickled exception (None if it does not
    pickle), its type name, message, formatted traceback and frames."""
    frames = [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(e.__traceback__)]
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        blob: bytes | None = pickle.dumps(e)
        pickle.loads(blob)
    except Exception:
        blob = None
    return blob, type(e).__name__, str(e), text, frames


def unpack_error(packed: tuple, worker: int) -> BaseException:
    """The exception a worker sent, its ``__cause__`` the worker's traceback."""
    blob, name, message, text, frames = packed
    exc = pickle.loads(blob) if blob is not None else CopiesLost(
        f"host worker {worker}: the env raised {name}: {message} (an exception that cannot "
        "be sent between processes; FEUDAL_ES_TRACEBACK=1 shows where)")
    exc.__cause__ = RemoteTraceback(text, frames)
    return exc


# --- the worker side -------------------------------------------------------------------
class WorkerInit(NamedTuple):
    """What a worker needs to build its share of the copies."""

    make: Callable[..., Any]
    spec: HostEnvSpec
    reward: str
    copies: range
    step_timeout: float
    max_episode_steps: int
    env_id: str


class WorkerServer:
    """A worker's copies and its answers to the pool's requests."""

    def __init__(self, init: WorkerInit):
        self.notices = EnvNotices(init.env_id)
        self.group = CopyGroup([init.make() for _ in init.copies], init.spec, init.reward,
                               init.copies.start, init.step_timeout, init.max_episode_steps,
                               self.notices)
        self._reported = (0, None)

    def handle(self, request: tuple) -> tuple:
        """``("ok", result, notices)`` (``notices``: ``(seen, source)`` when new warnings
        came, else None) or ``("error", packed exception)``."""
        try:
            if request[0] == "reset":
                result: Any = self.group.reset_copies(request[1])
            elif request[0] == "step":
                result = self.group.step_copies(request[1], request[2])
            else:
                raise ValueError(f"unknown host worker request {request[0]!r}")
        except Exception as e:
            return ("error", pack_error(e))
        now = (len(self.notices.seen), self.notices.source)
        news = None if now == self._reported else (dict(self.notices.seen),
                                                  self.notices.source)
        self._reported = now
        return ("ok", result, news)


def _quiet() -> None:
    """No feudal-es log output from a worker: the main process logs what its notices
    report (and stderr may be a terminal the progress bar owns)."""
    logger = logging.getLogger("feudal_es")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False


def _send(conn: Any, message: tuple) -> bool:
    try:
        conn.send(message)
    except (OSError, EOFError):  # the main process is gone
        return False
    return True


def serve(conn: Any, init: WorkerInit) -> None:
    """A worker process: build the copies, then answer requests until ``("close",)`` or
    until the pipe closes (the main process ended)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _quiet()
    try:
        server = WorkerServer(init)
    except Exception as e:
        _send(conn, ("error", pack_error(e)))
        return
    try:
        if not _send(conn, ("ready", os.getpid())):
            return
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                return
            if request[0] == "close" or not _send(conn, server.handle(request)):
                return
    finally:
        server.group.close()


class RayWorker:
    """A Ray actor holding one worker's copies (the process worker's :class:`WorkerServer`)."""

    def __init__(self, init: WorkerInit):
        _quiet()
        try:
            self.server: WorkerServer | None = WorkerServer(init)
            self.first: tuple = ("ready", os.getpid())
        except Exception as e:
            self.server, self.first = None, ("error", pack_error(e))

    def ready(self) -> tuple:
        """``("ready", pid)``, or ``("error", packed)`` if the copies could not be built."""
        return self.first

    def handle(self, request: tuple) -> tuple:
        """:meth:`WorkerServer.handle`."""
        return self.server.handle(request)
