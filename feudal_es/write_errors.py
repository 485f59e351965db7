"""An OS error on a write, as the one line a user reads: the file, the cause and advice
that works when followed.

The cause decides the first half of the advice: a full disk (ENOSPC, EDQUOT) — free
space; a place that cannot be written (a read-only filesystem, no permission) — another
place, since freeing space would not help; something in the way (a directory where a
file goes, a regular file where a directory goes) — move it away or choose another
place; anything else (an I/O error) — fix the cause. For a run directory, the second
half continues the run from its last checkpoint (``feudal-es train --resume RUN``) when
there is one to continue from (every seed's, with several), and otherwise starts the run
again: a directory holding only what a run stopped before its first checkpoint leaves is
accepted by :func:`feudal_es.rundir.check_new_run_dir`, so the same command works. A
run stopped otherwise (Ctrl-C) goes on the same way: :func:`next_step`. A ``--resume``
command names what the run needs as pasted: the ``--import`` modules it was started with
(its config's ``imports``) and its env when that is a ``'module:attr'``.
"""

from __future__ import annotations

import errno
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from feudal_es import checkpoint
from feudal_es.rundir import seed_dirs

__all__ = ["FULL", "IN_THE_WAY", "NOT_WRITABLE", "cause", "is_run_write_failure",
           "next_step", "output_failure", "run_failure", "with_option"]

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
IN_THE_WAY = frozenset({errno.EISDIR, errno.ENOTDIR, errno.EEXIST})


def cause(err: OSError) -> str:
    """``"<what the OS said>: <file>"`` (the file when the error names one)."""
    what = err.strerror or str(err)
    return what if err.filename is None else f"{what}: {os.fspath(err.filename)}"


def is_run_write_failure(err: OSError, run_dir: str | os.PathLike | None) -> bool:
    """A full, read-only or failing disk, or any OS error on a file of the run directory
    (or, for a regular file in the way, on a parent of it), as opposed to an error raised
    inside a user's env."""
    if err.errno in FULL or err.errno in (errno.EROFS, errno.EIO):
        return True
    if not err.filename or run_dir is None:
        return False
    name, run = Path(os.fspath(err.filename)).resolve(), Path(run_dir).resolve()
    return name.is_relative_to(run) or (err.errno == errno.ENOTDIR
                                        and run.is_relative_to(name))


def with_option(argv: Sequence[str], option: str, value: str) -> list[str]:
    """``argv`` with ``option``'s value replaced by ``value`` (where it stands), or
    ``option value`` appended when ``argv`` has none."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == option or argv[i].startswith(option + "="):
            out += [option, value]
            i += 2 if argv[i] == option else 1
        else:
            out.append(argv[i])
            i += 1
    return out if option in out else [*out, option, value]


def output_failure(err: OSError, target: str | os.PathLike, option: str = "--out") -> str:
    """The line for a file the user named (``render --out``, ``pretrain --out``,
    ``convert DST``) that cannot be written."""
    if err.errno in FULL:
        advice = f"free space or choose another {option}"
    elif err.errno in NOT_WRITABLE or err.errno in IN_THE_WAY:
        advice = f"choose another {option}"
    else:
        advice = f"fix the cause or choose another {option}"
    return f"cannot write {target} ({cause(err)}); {advice}"


def _values(argv: Sequence[str], option: str) -> list[str]:
    """Every value ``option`` has in ``argv`` (``--opt V`` and ``--opt=V``), in order."""
    out = []
    for i, a in enumerate(argv):
        if a == option and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith(option + "="):
            out.append(a[len(option) + 1:])
    return out


def _recorded(run_dir: Path) -> dict:
    """The config a run directory records (``config.json``; a many-seed run's top one, or
    its first seed's), ``{}`` when there is none that reads (the disk may be failing)."""
    import json

    for d in (run_dir, *seed_dirs(run_dir).values()):
        try:
            data = json.loads((d / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return {}


class _Stopped:
    """What a stopped run left: its checkpoints (the newest of each seed) and the
    commands that go on from there."""

    def __init__(self, run_dir: str | os.PathLike, argv: Sequence[str] | None):
        self.run_dir, self.argv = Path(run_dir), argv
        self.latest = [checkpoint.CheckpointManager(d).latest()
                       for d in (list(seed_dirs(self.run_dir).values()) or [self.run_dir])]
        self.resumable = all(self.latest)
        self.resuming = argv is not None and any(
            a == "--resume" or a.startswith("--resume=") for a in argv)

    def _needs(self) -> list[str]:
        """What a command on the run must name besides the run: each ``--import`` it was
        started with (recorded in its config's ``imports``, or given in ``argv``): a run
        directory never imports a module, so an env such a module registers is unknown
        without it; and its env when that is a ``'module:attr'`` (read from a file, it is
        not trusted: :class:`feudal_es.resolve.UntrustedEnvError`)."""
        from feudal_es.resolve import is_code_reference

        config, argv = _recorded(self.run_dir), list(self.argv or ())
        recorded = config.get("imports")
        imports = ([m for m in recorded if isinstance(m, str)] if isinstance(recorded, list)
                   else [])
        imports += _values(argv, "--import")
        env = config.get("env")
        envs = [env] if isinstance(env, str) else _values(argv, "--env")[-1:]
        return ([a for m in dict.fromkeys(imports) for a in ("--import", m)]
                + [a for e in envs if is_code_reference(e) for a in ("--env", e)])

    def resume(self, run: str) -> str:
        """The command that continues the run (``run``: its directory, or a copy's)."""
        argv = (with_option(self.argv, "--resume", run) if self.resuming
                else ["train", "--resume", run])
        needs = self._needs()
        for option, value in zip(needs[::2], needs[1::2], strict=True):
            if value not in _values(argv, option):
                argv = [*argv, option, value]
        return shlex.join(["feudal-es", *argv])

    def kept(self) -> str:
        if self.resumable:  # a many-seed run resumes at the round every seed has
            return f"the last good checkpoint is {min(self.latest, key=lambda p: p.name)}"
        return ("no checkpoint was written" if not any(self.latest)
                else "not every seed has a checkpoint")

    def again(self) -> str:
        if self.resumable:
            return f"continue with: {self.resume(str(self.run_dir))}"
        return "start the run again with: " + (shlex.join(["feudal-es", *self.argv])
                                               if self.argv else "the command that started it")


def next_step(run_dir: str | os.PathLike, argv: Sequence[str] | None = None) -> str:
    """How a stopped run (interrupted, say) goes on: ``continue with: feudal-es train
    --resume RUN`` (with the run's ``--import`` modules and 'module:attr' ``--env``) when
    there is a checkpoint to continue from, else the command that starts it again
    (``argv`` as for :func:`run_failure`)."""
    return _Stopped(run_dir, argv).again()


def run_failure(err: OSError, run_dir: str | os.PathLike,
                argv: Sequence[str] | None = None) -> str:
    """The line for a run that stopped because its run directory could not be written:
    the cause, what is kept (the last good checkpoint) and the command that goes on from
    there. ``argv``: the arguments of the ``feudal-es`` command that was running
    (without the program name): a ``--resume`` is repeated as given (its ``--n-outer``
    may not be on disk yet), a fresh run is started again as given."""
    run, code = _Stopped(run_dir, argv), err.errno
    if run.resumable and code in NOT_WRITABLE:
        advice = (f"copy {run.run_dir} to a writable place, then continue the copy with: "
                  f"{run.resume('COPY')}")
    elif not run.resumable and (code in NOT_WRITABLE or code in IN_THE_WAY
                                or any(run.latest)):
        advice = "start the run again in another directory: " + (
            shlex.join(["feudal-es", *with_option(argv, "--out", "NEW_DIR")]) if argv
            else "the command that started it, with --out NEW_DIR")
    elif code in FULL:
        advice = f"free space, then {run.again()}"
    elif code in IN_THE_WAY:
        advice = f"move {err.filename} away, then {run.again()}"
    else:
        advice = f"fix the cause, then {run.again()}"
    return f"cannot write the run directory ({cause(err)}); {run.kept()}; {advice}"
