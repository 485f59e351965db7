"""User mistakes at the command line: one line ``feudal-es <command>: error: <cause>``,
exit status 2, no traceback; a bug in feudal-es itself: its traceback and a line saying
so, with the version, exit status 1; Ctrl-C before training starts: one line, 130.

Each case runs the real CLI in a subprocess (``python -m feudal_es.cli``). Every one of
them ends before any training, most before any compilation, so the cases run a few at a
time (:func:`runs`) and the whole file takes a few tens of seconds. Beside them: the
library checks behind the CLI's (``TrainerConfig``'s env and seed, ``compare_selectors``'
episodes, ``load_trainer`` of a run of an older feudal-es, the classifier of
:mod:`feudal_es.errors`), and the benchmark scripts run as files (``python
bench/<x>.py``, a mode in which the script's folder comes first on ``sys.path``: no bench
module may be named like a module it could shadow).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import pytest
from helpers import ROOT, TESTS, TINY, main_in

# --- the files a case needs, written into its working directory -------------------------
NORAY = '''import sys

sys.modules["ray"] = None  # `import ray` fails, as where Ray is not installed
'''
SIGINT_AT_COMPILE = '''"""A SIGINT (as from Ctrl-C) when JAX first compiles (traces) something."""
import os
import signal
import threading

import jax.monitoring


def _interrupt(event: str, *args, **kwargs) -> None:
    # a compile, or a hit of the persistent compilation cache (which other tests of the
    # session fill: a cached program raises no compile event). The signal is sent from
    # another thread, not raised here: a KeyboardInterrupt raised inside this listener,
    # which JAX calls from C++, can be swallowed there, and the run then goes on.
    if event.startswith(("/jax/core/compile/", "/jax/compilation_cache/")) and (
            not _interrupt.sent):
        _interrupt.sent = True
        threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT)).start()


_interrupt.sent = False
jax.monitoring.register_event_duration_secs_listener(_interrupt)
jax.monitoring.register_event_listener(_interrupt)
'''
BOOM_ENV = '''def make(**kwargs):
    raise RuntimeError("the env's own bug")
'''
MAKE_A_BUG = '''import envs.jaxmarl_env
import feudal_es.resolve

feudal_es.resolve.importable_ids = lambda: ([], None)  # `envs` then fails inside feudal-es
envs.jaxmarl_env.jaxmarl_ids = lambda: []  # without making every JaxMARL env first (~15 s)
'''

# name: (argv, exit status, what the last line of stderr says): the probes of issue 30, each
# in a subprocess as a user runs it
CASES: dict[str, tuple[list[str], int, list[str]]] = {
    "config is a directory": (["train", "--config", "adir"], 2,
                              ["config file adir is a directory"]),
    "config not UTF-8": (["train", "--config", "latin1.json"], 2,
                         ["config file latin1.json is not UTF-8", "0xe9"]),
    "seed 2**64": (["train", "--seed", str(2**64)], 2,
                   ["argument --seed", "<= 4294967295", str(2**64)]),
    "ray not installed": (["train", "--import", "noray", "--import", "user_envs", "--env",
                           "tests/CliLine-v0", "--set", "backend=ray", "--out", "ray-run",
                           "--no-progress"], 2,
                          ["backend='ray' needs Ray", 'pip install -e ".[ray]"']),
    "empty --env": (["train", "--env", ""], 2, ["argument --env: must not be empty"]),
    "eval --episodes 0": (["eval", "legacy", "--episodes", "0"], 2,
                          ["argument --episodes: must be >= 2, got 0"]),
    "eval a legacy run": (["eval", "legacy"], 2,
                          ["only format-1 ones", "ckpt_00000004.npz",
                           "feudal-es convert legacy/ckpt_00000004.npz"]),
    "error in the user's env": (["train", "--env", "boom_env:make"], 2,
                                ["your code raised RuntimeError: the env's own bug",
                                 "boom_env.py:2, in make"]),
    # 20 rounds: a signal in a run's last round is ignored by design (the run is done), so
    # a compile event that fires late (the session's XLA cache) must not land there
    "SIGINT during compilation": (["train", "--import", "sigint_at_compile", "--config",
                                   "tiny.json", "--out", "interrupted", "--no-progress",
                                   "--n-outer", "20"],
                                  130, ["feudal-es train: interrupted"]),
    "a bug in feudal-es": (["envs", "--import", "make_a_bug"], 1,
                           [f"feudal-es {metadata.version('feudal-es')}: this is a bug in "
                            "feudal-es, please report it with the traceback above"]),
}
# more of the same, through cli.main in this process (the same code, no process start)
IN_PROCESS: dict[str, tuple[list[str], list[str]]] = {
    "blank --env": (["train", "--env", "  "], ["argument --env: must not be empty"]),
    "blank env from --set": (["train", "--set", "env= "],
                             ["TrainerConfig.env must name an env"]),
    "empty --out": (["train", "--out", ""], ["argument --out: must not be empty"]),
    "empty --resume": (["train", "--resume", ""], ["argument --resume: must not be empty"]),
    "empty --config": (["train", "--config", ""], ["argument --config: must not be empty"]),
    "--num-seeds 0": (["train", "--num-seeds", "0"], ["argument --num-seeds: must be >= 1"]),
    "seed 2**32 from --set": (["train", "--set", f"seed={2**32}"],
                              ["TrainerConfig.seed must be <= 4294967295"]),
    "seeds past the range": (["train", "--seed", str(2**32 - 1), "--num-seeds", "2"],
                             ["TrainerConfig.seeds[1] must be <= 4294967295"]),
    "render --seed -1": (["render", "legacy", "--out", "x.gif", "--seed", "-1"],
                         ["argument --seed: the seed must be >= 0"]),
    "render a legacy run": (["render", "legacy", "--out", "x.gif"],
                            ["ckpt_00000004.npz", "feudal-es convert"]),
}
BENCH = sorted(p for p in (ROOT / "bench").glob("*.py") if p.name != "__init__.py")
SCRIPTS = [p for p in BENCH if 'if __name__ == "__main__":' in p.read_text()]


def _cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "feudal_es.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The cases' working directory and the files they name."""
    """Every case and bench script started, three at a time; the cases in one working
    directory (:func:`work`)."""
    work = tmp_path_factory.mktemp("cli-errors")
    (work / "adir").mkdir()
    (work / "latin1.json").write_bytes('{"env": "caf\u00e9"}'.encode("latin-1"))
    (work / "tiny.json").write_text(json.dumps(TINY.to_dict()))
    (work / "legacy").mkdir()  # a run directory of an older feudal-es (format 1)
    for step in (2, 4):
        (work / "legacy" / f"ckpt_{step:08d}.npz").write_bytes(b"PK")
    for name, text in (("noray", NORAY), ("sigint_at_compile", SIGINT_AT_COMPILE),
                       ("boom_env", BOOM_ENV), ("make_a_bug", MAKE_A_BUG)):
        (work / f"{name}.py").write_text(text)
    return work


@pytest.fixture(scope="module")
def runs(work) -> dict[str, Future]:
    # the children start with SIGINT at its default, as a shell starts a command: a child
    # inherits an ignored SIGINT (a handler is reset by exec, SIG_IGN is kept), and in a
    # full parallel run this worker had come to ignore it (the Ctrl-C case's child saw
    # SIG_IGN), so that case's signal went nowhere and its run ended with status 0
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    pool = ThreadPoolExecutor(max_workers=3)
    futures = {name: pool.submit(_cli, argv, work) for name, (argv, _, _) in CASES.items()}
    for script in SCRIPTS:  # run as a file, as its docstring says it may be
        futures[script.name] = pool.submit(
            subprocess.run, [sys.executable, str(script), "--help"], cwd=ROOT,
            capture_output=True, text=True, timeout=240)
    yield futures
    pool.shutdown(cancel_futures=True)
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("case", list(CASES))
def test_cli_error_is_one_line_naming_the_cause(runs, case):
    argv, status, says = CASES[case]
    proc = runs[case].result()
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == status, (proc.stdout, proc.stderr)
    assert lines, proc.stdout
    for text in says:
        assert text in lines[-1], (text, proc.stderr)
    if status == 1:  # a bug: the traceback to report comes first
        assert "Traceback (most recent call last)" in proc.stderr
        return
    assert "Traceback" not in proc.stderr + proc.stdout
    prefix = f"feudal-es {argv[0]}: " + ("interrupted" if status == 130 else "error: ")
    assert lines[-1].startswith(prefix), lines[-1]
    if status == 130:  # before the banner: Ctrl-C while compiling the trainer
        assert "training" not in proc.stdout and len(lines) == 1, proc.stderr


@pytest.mark.parametrize("case", list(IN_PROCESS))
def test_cli_main_error_is_one_line_naming_the_cause(work, case):
    argv, says = IN_PROCESS[case]
    status, _, err = main_in(work, *argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and lines, err
    assert lines[-1].startswith(f"feudal-es {argv[0]}: error: ") and "Traceback" not in err
    for text in says:
        assert text in lines[-1], (text, err)


# --- the library checks behind the CLI's ------------------------------------------------
def test_trainer_config_refuses_blank_envs_and_seeds_jax_cannot_keep_whole(tmp_path):
    from feudal_es.config import SEED_MAX, TrainerConfig

    for env in ("", " ", "\t"):
        with pytest.raises(ValueError, match=r"TrainerConfig\.env must name an env"):
            TrainerConfig(env=env)
    assert TrainerConfig(seed=SEED_MAX, seeds=(0, SEED_MAX)).seeds == (0, SEED_MAX)
    for kwargs, field in ((dict(seed=SEED_MAX + 1), "seed"), (dict(seed=2**64), "seed"),
                          (dict(seeds=(1, 2**32)), r"seeds\[1\]")):
        with pytest.raises(ValueError, match=rf"TrainerConfig\.{field} must be <= 4294967295"):
            TrainerConfig(**kwargs)
    (tmp_path / "latin1.json").write_bytes(b'{"env": "caf\xe9"}')
    for path, says in ((tmp_path, "is a directory"), (tmp_path / "latin1.json", "not UTF-8")):
        with pytest.raises(ValueError, match=says) as err:
            TrainerConfig.load(path)
        assert str(path) in str(err.value)


def test_compare_selectors_reads_0_episodes_as_0_not_as_the_default():
    from feudal_es.evaluate import compare_selectors

    for episodes in (0, 1, -3):  # refused before the trainer is touched
        with pytest.raises(ValueError, match=f"episodes must be >= 2, got {episodes}"):
            compare_selectors(None, None, episodes=episodes)
    with pytest.raises(ValueError, match="seed must be <= 4294967295"):
        compare_selectors(None, None, episodes=2, seed=2**32)


def test_load_trainer_of_a_legacy_run_names_its_files_and_the_convert_command(tmp_path):
    from feudal_es.checkpoint import CheckpointError
    from feudal_es.evaluate import load_trainer

    for step in (1, 3):
        (tmp_path / f"ckpt_{step:08d}.npz").write_bytes(b"PK")
    with pytest.raises(CheckpointError) as err:
        load_trainer(tmp_path)
    assert "ckpt_00000001.npz, ckpt_00000003.npz" in str(err.value)
    newest = tmp_path / "ckpt_00000003.npz"
    assert f"feudal-es convert {newest} {newest.with_suffix('.safetensors')}" in str(err.value)


def _raised(filename: str, code: str) -> BaseException:
    """The exception ``code`` raises when run as if it were the file ``filename``."""
    try:
        exec(compile(code, filename, "exec"), {})
    except BaseException as err:  # what the test inspects
        return err
    raise AssertionError(f"{code!r} raised nothing")


def test_errors_tell_the_users_mistakes_from_bugs(tmp_path):
    import errno

    import feudal_es
    from feudal_es.errors import user_message

    ours = str(Path(feudal_es.__file__).parent / "somewhere.py")
    mine = str(tmp_path / "my_env.py")
    assert user_message(_raised(ours, "{}['k']")) is None  # feudal-es's own KeyError: a bug
    assert user_message(_raised(ours, "raise ValueError('bad value')")) == "bad value"
    assert user_message(_raised(mine, "{}['k']")).startswith(
        f"your code raised KeyError: 'k' ({mine}:1, in <module>;")
    full = OSError(errno.ENOSPC, "No space left on device", "/runs/x/ckpt.tmp")
    assert user_message(full) == "/runs/x/ckpt.tmp: No space left on device"
    assert user_message(OSError(errno.ECONNRESET, "reset")) is None
    assert user_message(ModuleNotFoundError("no", name="feudal_es.gone")) is None
    assert user_message(ImportError("cannot import name 'x'", name="envs.base")) is None
    assert "pip install" in user_message(ImportError("needs Ray: pip install 'x[ray]'"))
    assert "not installed" in user_message(ModuleNotFoundError("No module named 'yaml'",
                                                               name="yaml"))
    assert user_message(MemoryError("Unable to allocate 119 GiB")).startswith(
        "out of memory (Unable to allocate 119 GiB)")
    assert "\n" not in user_message(ValueError("two\nlines"))
    syntax = _raised(ours, f"compile('x = (', {mine!r}, 'exec')")  # an --import'ed module
    assert user_message(syntax).startswith(f"{mine}:1: SyntaxError: ")


# --- benchmark scripts run as files -------------------------------------------------------


def test_no_bench_module_is_named_like_a_module_it_could_shadow():
    """``python bench/x.py`` puts bench/ first on ``sys.path``: a bench module named like
    an installed or repository module (``jaxmarl``, ``envs``) would be imported in its
    place (``import jaxmarl`` importing the script itself)."""
    shadowing = {p.name: importlib.util.find_spec(p.stem).origin for p in BENCH
                 if importlib.util.find_spec(p.stem) is not None}
    assert not shadowing, f"bench modules named like importable modules: {shadowing}"


def test_every_bench_script_runs_as_a_file(runs):
    """``python bench/<x>.py --help``: each script's imports resolve in file mode."""
    failed = {}
    for script in SCRIPTS:
        proc = runs[script.name].result()
        if proc.returncode != 0 or "usage:" not in proc.stdout:
            failed[script.name] = proc.stderr.strip().splitlines()[-1:] or proc.stdout[-200:]
    assert not failed, f"`python bench/<x>.py --help` failed: {failed}"
