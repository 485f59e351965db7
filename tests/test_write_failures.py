"""Writes that fail (issue 30): a full disk, a read-only filesystem, something in the way.

Each with the real CLI in a subprocess: a non-zero exit, one line naming the path and the
cause, no traceback, nothing already saved lost or half-written, no temporary file left
behind, and the advice printed works when followed. Each probe's advice is followed into
the next probe, then to completion (one run fewer per chain): ``train --resume`` on a
read-only filesystem (continue a copy), the copy on a full disk (free space, then the
printed command); a fresh run on a read-only filesystem (the printed command with another
``--out``), there filling the disk before its first checkpoint (free space, then the
printed command starts it again). ``render --out`` an existing directory, a path under a
regular file or a read-only place, ``pretrain --out`` and ``convert SRC DST`` to a
read-only place are refused before any work. In process, the advice of the causes no
mount here reaches (an I/O error, something in the way, many seeds).

Full and read-only disks are small tmpfs mounts (root with mount permission, as in this
project's sandbox; elsewhere, e.g. an unprivileged CI container, those tests skip and
say why). Resumes continue ``tests/data/run-5b7130d`` (a 1-round run); fresh runs use the
shared TINY config with one round, so the session's compile cache serves them.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, TESTS, TINY, metrics_rows

OLD = TESTS / "data" / "run-5b7130d"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
    return env


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "feudal_es.cli", *args], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=300)


def one_line(proc: subprocess.CompletedProcess, code: int) -> str:
    """The one line a failed command printed (asserting the exit status and no
    traceback)."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def follow(advice: str, cwd: Path, **fill: str) -> subprocess.CompletedProcess:
    """Run the ``feudal-es ...`` command a message ends with (placeholders filled)."""
    argv = shlex.split(advice.rsplit(": ", 1)[1])
    assert argv[0] == "feudal-es", advice
    proc = cli(*[fill.get(a, a) for a in argv[1:]], cwd=cwd)
    assert proc.returncode == 0, (advice, proc.stdout, proc.stderr)
    return proc


def digests(run: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.iterdir()
            if p.is_file() and p.name != ".lock"}


def temp_files(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if ".tmp" in p.name]


class Mount:
    """A tmpfs mounted at ``path``, to fill up or make read-only."""

    def __init__(self, path: Path, size: str):
        self.path = path
        path.mkdir()
        if os.geteuid() != 0:
            pytest.skip("needs root to mount a small tmpfs (a full or read-only disk)")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(path)], capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}): this "
                        "container lacks mount permission (CAP_SYS_ADMIN)")

    def fill(self, leave: int = 0) -> Path:
        """Fill the disk, then free ``leave`` bytes again."""
        filler = self.path / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        os.truncate(filler, max(0, filler.stat().st_size - leave))
        return filler

    def read_only(self) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def mount(tmp_path):
    mounts: list[Mount] = []

    def make(size: str = "2m") -> Mount:
        mounts.append(Mount(tmp_path / f"mnt{len(mounts)}", size))
        return mounts[-1]

    yield make
    for m in mounts:
        m.unmount()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("writes")
    (d / "tiny.json").write_text(json.dumps(TINY.override({"n_outer": 1}).to_dict()))
    return d


def copy_old(dest: Path) -> Path:
    return Path(shutil.copytree(OLD, dest, ignore=shutil.ignore_patterns("expected_*")))


# ---------------------------------------------------------------- train --resume
@pytest.mark.heavy
def test_resume_on_a_read_only_then_a_full_disk_each_advice_works(mount, work):
    """``train --resume`` on a read-only filesystem says to continue a copy; the copy,
    made on a disk that turns out full, says to free space and repeat the command; after
    that the command completes the run. Nothing saved is lost on either disk."""
    ro, full = mount(), mount()
    run = copy_old(ro.path / "run")
    saved = digests(run)
    ro.read_only()
    line = one_line(cli("train", "--resume", str(run), "--n-outer", "2", "--no-progress",
                        cwd=work), 1)
    assert f"(Read-only file system: {run}/" in line and "free space" not in line
    assert f"the last good checkpoint is {run / 'ckpt_00000001.safetensors'}" in line
    assert line.endswith(f"copy {run} to a writable place, then continue the copy with: "
                         "feudal-es train --resume COPY --n-outer 2 --no-progress")
    copy = Path(shutil.copytree(run, full.path / "copy"))
    copied = digests(copy)
    filler = full.fill(leave=4096)  # room for the lock's note, not for config.json
    argv = shlex.split(line.rsplit(": ", 1)[1].replace("COPY", str(copy)))[1:]
    line = one_line(cli(*argv, cwd=work), 1)  # the printed command, on the full disk
    assert line.startswith(f"feudal-es: cannot write the run directory (No space left on "
                           f"device: {copy}/")
    assert f"the last good checkpoint is {copy / 'ckpt_00000001.safetensors'}" in line
    assert line.endswith(f"free space, then continue with: feudal-es train --resume {copy} "
                         "--n-outer 2 --no-progress")  # the command given, repeated
    assert digests(copy) == copied and temp_files(full.path) == []
    filler.unlink()
    follow(line, work)
    assert [r["round"] for r in metrics_rows(copy)] == [0, 1]
    assert (copy / "ckpt_00000002.safetensors").is_file() and digests(run) == saved


# ---------------------------------------------------------------- a fresh run
@pytest.mark.slow  # three CLI runs (~30 s); its advice lines are also checked in
# process by test_advice_for_each_cause_and_what_is_kept, the disks by the resume test
def test_fresh_run_on_a_read_only_then_a_full_disk_each_advice_works(mount, work):
    """A fresh run on a read-only filesystem says to start again in another directory
    (no "free space", no ``--resume``: nothing to resume); run there, on a disk that
    fills before the first checkpoint, it says to free space and start again with the
    same command, which then completes over what the stopped run left."""
    ro, full = mount(), mount("1m")
    ro.read_only()
    run = ro.path / "run"
    line = one_line(cli("train", "--config", "tiny.json", "--out", str(run), "--no-progress",
                        cwd=work), 1)
    assert f"(Read-only file system: {run})" in line and "free space" not in line
    assert line.endswith("no checkpoint was written; start the run again in another "
                         "directory: feudal-es train --config tiny.json --out NEW_DIR "
                         "--no-progress")
    new = full.path / "run"
    filler = full.fill(leave=96 * 1024)  # config, rows, best selector, plot; no checkpoint
    argv = shlex.split(line.rsplit(": ", 1)[1].replace("NEW_DIR", str(new)))[1:]
    line = one_line(cli(*argv, cwd=work), 1)  # the printed command, on the full disk
    assert line.startswith(f"feudal-es: cannot write the run directory (No space left on "
                           f"device: {new}/")
    assert "no checkpoint was written" in line and "--resume" not in line
    assert line.endswith("free space, then start the run again with: feudal-es train "
                         f"--config tiny.json --out {new} --no-progress")
    assert (new / "metrics.jsonl").is_file() and temp_files(full.path) == []
    filler.unlink()
    follow(line, work)  # starts over in the same --out
    assert [r["round"] for r in metrics_rows(new)] == [0]
    assert (new / "ckpt_00000001.safetensors").is_file()


def test_advice_for_each_cause_and_what_is_kept(tmp_path):
    """The branches the subprocess tests do not reach (in process, no disk needed): a
    many-seed run resumes from the round every seed has; an I/O error says to fix it;
    something in the way is named; a seed without a checkpoint means starting again; a
    run stopped by Ctrl-C is told to resume only when it has a checkpoint."""
    from feudal_es.write_errors import next_step, run_failure

    run = tmp_path / "run"
    for seed, rounds in ((3, (1, 2)), (5, (1,))):
        for r in rounds:
            (run / f"seed_{seed}").mkdir(parents=True, exist_ok=True)
            (run / f"seed_{seed}" / f"ckpt_{r:08d}.safetensors").write_bytes(b"")
    eio = OSError(errno.EIO, os.strerror(errno.EIO), str(run / "seed_5" / "x"))
    line = run_failure(eio, run, ["train", "--config", "c.json", "--out", str(run)])
    assert f"the last good checkpoint is {run / 'seed_5' / 'ckpt_00000001.safetensors'}" \
        in line and line.endswith(f"fix the cause, then continue with: feudal-es train "
                                  f"--resume {run}")
    in_the_way = OSError(errno.EISDIR, os.strerror(errno.EISDIR), str(run / "metrics.jsonl"))
    assert run_failure(in_the_way, run).endswith(
        f"move {run / 'metrics.jsonl'} away, then continue with: feudal-es train --resume "
        f"{run}")
    (run / "seed_7").mkdir()  # a seed without a checkpoint: nothing to resume as a whole
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(run / "seed_7"))
    assert run_failure(full, run, ["train", "--num-seeds", "3", "--out", str(run)]).endswith(
        "not every seed has a checkpoint; start the run again in another directory: "
        "feudal-es train --num-seeds 3 --out NEW_DIR")
    assert run_failure(full, tmp_path / "fresh").endswith(
        "no checkpoint was written; free space, then start the run again with: the "
        "command that started it")
    rofs = OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / "fresh"))
    assert run_failure(rofs, tmp_path / "fresh", ["train", "--config", "c.json", "--out",
                                                  str(tmp_path / "fresh")]).endswith(
        "no checkpoint was written; start the run again in another directory: feudal-es "
        "train --config c.json --out NEW_DIR")  # a fresh run on a read-only disk
    # a run stopped by Ctrl-C goes on the same way: resumed only from a checkpoint
    argv = ["train", "--config", "c.json", "--out", str(tmp_path / "fresh")]
    assert next_step(tmp_path / "fresh", argv) == f"start the run again with: feudal-es " \
        f"train --config c.json --out {tmp_path / 'fresh'}"
    assert next_step(run / "seed_3", argv) == f"continue with: feudal-es train --resume " \
        f"{run / 'seed_3'}"


# ---------------------------------------------------------------- one output file
@pytest.mark.parametrize("where", ["directory", "under_a_file", "read_only"])
def test_render_out_that_cannot_be_written_is_one_line_before_any_work(where, mount,
                                                                       tmp_path):
    run = copy_old(tmp_path / "run")
    if where == "read_only":
        disk = mount()
        disk.read_only()
        out, cause = disk.path / "episode.gif", f"Read-only file system: {disk.path}"
    elif where == "directory":
        out, cause = run, f"Is a directory: {run}"
    else:
        out, cause = run / "config.json" / "episode.gif", \
            f"Not a directory: {run / 'config.json'}"
    saved = digests(run)
    line = one_line(cli("render", str(run), "--out", str(out), cwd=tmp_path), 2)
    assert line == f"feudal-es render: error: cannot write {out} ({cause}); choose " \
                   "another --out"
    assert digests(run) == saved and temp_files(tmp_path) == []


def test_pretrain_and_convert_outputs_on_a_read_only_disk_are_refused_first(mount,
                                                                            tmp_path):
    disk = mount()
    disk.read_only()
    out = disk.path / "actor.safetensors"
    proc = cli("pretrain", "--out", str(out), cwd=tmp_path)
    line = one_line(proc, 2)
    assert line == (f"feudal-es pretrain: error: cannot write {out} (Read-only file "
                    f"system: {disk.path}); choose another --out")
    assert "imitating" not in proc.stdout  # before any work
    src = tmp_path / "old.npz"
    src.write_bytes(b"not read: the destination is checked first")
    line = one_line(cli("convert", str(src), str(out), cwd=tmp_path), 2)
    assert line == (f"feudal-es convert: error: cannot write {out} (Read-only file "
                    f"system: {disk.path}); choose another DST")


def test_gif_writers_of_one_path_never_share_a_temporary_file(tmp_path):
    """``envs.render.write_gif`` (and feudal-es's atomic writer) write through a temporary
    file of their own: two writers of one path leave one whole GIF and nothing else; a
    path that is a directory fails naming it, leaving nothing behind."""
    import threading

    import numpy as np
    from PIL import Image

    from envs.render import write_gif

    path = tmp_path / "episode.gif"
    frames = [np.full((32, 32, 3), 40 * i, np.uint8) for i in range(6)]
    writers = [threading.Thread(target=write_gif, args=(frames[k:], path)) for k in (0, 3)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    with Image.open(path) as im:
        assert im.n_frames in (3, 6)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    with pytest.raises(IsADirectoryError) as err:
        write_gif(frames, tmp_path)
    assert err.value.filename == str(tmp_path)
    assert not list(tmp_path.parent.glob(f".{tmp_path.name}.tmp*"))
