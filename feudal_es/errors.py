"""Whose fault an exception is: the user's (one line, exit 2) or feudal-es's (a traceback).

``feudal-es`` hands every exception that ends a command to :func:`report`:

- **the user's** (exit 2, one line ``feudal-es <command>: error: <cause>``, no traceback):
  what their config, command line, files, installation, machine or own code caused.
  By type: ``ValueError`` (bad values, and the library's own refusals: ``CheckpointError``,
  ``UntrustedEnvError``, ``EnvOutputError``, ...), ``TypeError`` (config validation),
  ``FloatingPointError`` (every ES candidate failed), ``TimeoutError`` (``EnvTimeout``),
  ``OverflowError`` (a number too large), an ``OSError`` on a named file or of the
  machine (a missing, unreadable, read-only or full place), ``MemoryError`` and XLA's
  ``RESOURCE_EXHAUSTED`` (a config larger than the machine), an ``ImportError`` of a
  package that is not installed (the extras' install hints), a ``SyntaxError`` in the
  user's module; and any exception raised in the user's own code (an ``--import`` module,
  a custom env: the innermost frame outside installed libraries is not feudal-es's),
  named with its file and line.
- **a bug in feudal-es** (exit 1): anything else (``KeyError``, ``AttributeError``,
  ``RuntimeError`` from feudal-es's own code, ...): the traceback, then a line saying it
  is a bug, with the version, to report.
- **interrupted** (Ctrl-C outside training; training handles its own, see
  :mod:`feudal_es.signals`): one line, exit 130.
- **output no longer read** (``feudal-es train --list-keys | head``: the reader of stdout
  closed it): nothing more is printed, exit 141 (SIGPIPE, as a shell reports it).

``FEUDAL_ES_TRACEBACK=1`` prints the traceback of a user's error too (to debug an env).
"""

from __future__ import annotations

import errno
import os
import sys
import sysconfig
import traceback
from importlib import metadata, util
from pathlib import Path
from typing import NoReturn

__all__ = ["EXIT_BUG", "EXIT_INTERRUPTED", "EXIT_PIPE", "EXIT_USER", "exit_now", "report",
           "user_message", "version"]

EXIT_USER = 2  # the user's mistake (as argparse exits on a bad command line)
EXIT_BUG = 1
EXIT_INTERRUPTED = 128 + 2  # SIGINT, as a shell reports it
EXIT_PIPE = 128 + 13  # SIGPIPE: stdout's reader went away (`| head`)

OWN_PACKAGES = ("feudal_es", "envs", "agents")
# the user's types: what the config, inputs, env or machine cause (see the docstring)
USER_TYPES = (ValueError, TypeError, FloatingPointError, TimeoutError, OverflowError)
# OS errors that are the machine's or the file system's, whether or not a file is named
MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES,
                  errno.EPERM, errno.EMFILE, errno.ENFILE, errno.ENOMEM}


def version() -> str:
    """The installed feudal-es version (``(version unknown)`` when it is not installed)."""
    try:
        return metadata.version("feudal-es")
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def _package_dirs() -> list[Path]:
    """Where feudal-es's own packages live (found, not imported)."""
    specs = [util.find_spec(name) for name in OWN_PACKAGES]
    return [Path(p).resolve() for spec in specs if spec is not None
            for p in spec.submodule_search_locations or ()]


def _path_text(name: object) -> str:
    return os.fsdecode(name) if isinstance(name, (str, bytes, os.PathLike)) else str(name)


def _library_dirs() -> list[Path]:
    """Where the interpreter's standard library and installed packages live."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *sysconfig.get_paths().values()}
    return [Path(p).resolve() for p in paths if p]


def _under(path: Path, dirs: list[Path]) -> bool:
    return any(path.is_relative_to(d) for d in dirs)


def _frames(err: BaseException) -> list[traceback.FrameSummary]:
    """The frames that raised ``err``, innermost last: its traceback's, or, for an
    exception raised in a host worker process and raised again here
    (:mod:`feudal_es.host_worker`: its ``__cause__`` carries the worker's ``frames``),
    the worker's."""
    remote = getattr(err.__cause__, "frames", None)
    if isinstance(remote, list) and remote:
        return [traceback.FrameSummary(f, n, name, lookup_line=False)
                for f, n, name in remote]
    return traceback.extract_tb(err.__traceback__)


def _user_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The frame that raised, if it is the user's code: the innermost frame that is
    neither an installed library's nor feudal-es's own, when no feudal-es frame lies
    between it and the raise (a library called by feudal-es is feudal-es's doing)."""
    ours, libraries = _package_dirs(), _library_dirs()
    for frame in reversed(frames):
        if frame.filename.startswith("<"):  # frozen importlib, exec'd code: a library's
            continue
        path = Path(frame.filename).resolve()
        if _under(path, ours):
            return None
        if not _under(path, libraries):
            return frame
    return None


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _is_own_module(name: str | None) -> bool:
    return bool(name) and name.partition(".")[0] in OWN_PACKAGES


def _type_message(err: BaseException) -> str | None:
    """The cause of a user's error recognised by its type, or None."""
    if isinstance(err, SyntaxError) and not _under(
            Path(err.filename or "<>").resolve(), _package_dirs()):
        return f"{err.filename}:{err.lineno}: {type(err).__name__}: {err.msg}"
    if isinstance(err, OverflowError):
        return f"a number is too large: {err}"
    if isinstance(err, USER_TYPES):
        return str(err) or type(err).__name__
    if isinstance(err, OSError):
        if err.filename is not None:
            where = _path_text(err.filename) + (f" -> {_path_text(err.filename2)}"
                                                if err.filename2 is not None else "")
            return f"{where}: {err.strerror or err}"
        return str(err) if err.errno in MACHINE_ERRNOS else None
    if isinstance(err, MemoryError) or (type(err).__name__ in ("XlaRuntimeError",
                                                               "JaxRuntimeError")
                                        and "RESOURCE_EXHAUSTED" in str(err)):
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return (f"out of memory ({first}): the config asks for more memory than this "
                "machine has; lower its sizes (es.pop_size, episodes, mappo.num_envs, "
                "actor sizes, env_kwargs such as num_agents)")
    if isinstance(err, ImportError) and not _is_own_module(err.name):  # ours: a bug
        if "pip install" in str(err):  # an extra's install hint, written for the user
            return str(err)
        if isinstance(err, ModuleNotFoundError) and err.name:
            return f"{err}: a package it needs is not installed in {sys.executable}'s Python"
    return None


def user_message(err: BaseException) -> str | None:
    """The one-line cause of ``err`` if it is the user's (see the module docstring), else
    None (a bug in feudal-es)."""
    frame = _user_frame(_frames(err))
    message = _type_message(err)
    if frame is not None:
        where = f"{frame.filename}:{frame.lineno}, in {frame.name}"
        message = (f"{message} (raised in your code: {where})" if message else
                   f"your code raised {type(err).__name__}: {err} ({where}; "
                   "FEUDAL_ES_TRACEBACK=1 shows the traceback)")
    return None if message is None else _one_line(message)


def report(err: BaseException, command: str | None) -> int:
    """Print what ``err`` means on stderr and return the exit status (see the module
    docstring). ``command``: the subcommand, or None before the command line is read."""
    prefix = f"feudal-es {command}" if command else "feudal-es"
    if isinstance(err, KeyboardInterrupt):
        print(f"{prefix}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if isinstance(err, BrokenPipeError) and _stdout_gone():
        return EXIT_PIPE
    message = user_message(err)
    if message is None:
        traceback.print_exception(err)
        print(f"feudal-es {version()}: this is a bug in feudal-es, please report it with "
              "the traceback above", file=sys.stderr)
        return EXIT_BUG
    if os.environ.get("FEUDAL_ES_TRACEBACK") == "1":
        traceback.print_exception(err)
    print(f"{prefix}: error: {message}", file=sys.stderr)
    return EXIT_USER


def _stdout_gone() -> bool:
    """Whether stdout's reader closed it (a broken pipe of stdout itself, not of some
    other pipe, e.g. a user's env's): then stdout is pointed at the null device, so the
    interpreter's own flush at exit does not report the broken pipe again."""
    import select

    try:
        fd = sys.stdout.fileno()
        poll = select.poll()  # a pipe whose reader is gone polls as an error (POSIX)
        poll.register(fd, select.POLLOUT)
        if not any(events & select.POLLERR for _, events in poll.poll(0)):
            return False
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    except (OSError, ValueError, AttributeError):  # no file descriptor (captured), no poll
        return False
    return True


def exit_now(status: int) -> NoReturn:
    """End the process with ``status`` at once (stdout and stderr flushed), without the
    interpreter's shutdown: after a Ctrl-C that landed inside an XLA compilation, freeing
    JAX's half-built objects during shutdown crashes the process now and then (a SIGSEGV
    in place of the exit status). Only for a process that is the command itself."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
