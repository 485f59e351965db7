"""Every shell command of README.md, as a newcomer pastes it (issue 33).

The commands are the lines of the README's fenced ``bash`` / ``sh`` / ``shell`` /
``console`` blocks (a ``\\``-continued or quote-spanning line is one command; ``#``
comments are dropped). :data:`PLAN` says what happens to each, keyed by the command with
its whitespace collapsed:

- :class:`Run`: run as written, from a scratch directory laid out like the repository's
  root (its ``.venv`` and sources linked, ``configs/`` copied), with ``.venv/bin`` first on
  ``PATH`` and no ``PYTHONPATH``, plus the :attr:`Run.extra` arguments that shrink it (a
  later ``--n-outer`` / ``--out`` / ``--seeds`` replaces the README's, ``--set`` adds to
  it). ``when="default"`` runs under ``-m heavy`` (``make test-heavy``, which CI runs after
  ``make test``), in README order (the tiny rover run
  trained first is the one ``eval`` / ``render`` / ``--resume`` read), and again in a fresh
  copy of the checkout with a virtual environment made from nothing by ``make demo``
  (``slow``); ``when="slow"`` runs in the project's venv under ``-m slow``, in README order
  among the default ones (so the slow part is the whole README; the heavy part keeps the
  first run and what proves it trains, resumes, evaluates and renders); ``when="clean"``
  only in the fresh copy (``make demo``, which would otherwise install into the
  project's venv).
- :class:`Skip`: not run, for the reason given.

A command that is in the README but not in :data:`PLAN` fails
:func:`test_every_readme_command_is_run_or_skipped_with_a_reason` (and one in :data:`PLAN`
that left the README fails it too), so a new command is either run or skipped with a
reason. The lines of "Your own PettingZoo env" (``cd examples`` and what runs there) are
run by ``test_readme.py::test_custom_env_section_runs_from_the_working_directory``.
Bracketed options, ``<placeholders>`` and ``PATH``-style capitals are refused in every
command, run or not: a README command must paste and run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text()
VENV_BIN = Path(sys.executable).parent
CUSTOM_SECTION = "## Your own PettingZoo env"
MODULE_HEADER = "# my_envs.py\n"

# a rover run small enough for the heavy part: configs/rover.json's model and env, a
# population of 4 on 2 episodes, 4 MAPPO env copies, one gradient step per round
ROVER_SMALL = ("--set", "es.pop_size=4", "--set", "episodes=2", "--set", "mappo.num_envs=4",
               "--set", "grad_steps_per_outer=1", "--no-progress")
# Coverage at the test suite's tiny size (tests/helpers.py's TINY): 12-step episodes on a
# 16-cell grid, the compact CNN actor at its smallest, no GIF; the README's own --set
# values (num_agents=4, es.pop_size=8) still apply
COVERAGE_SMALL = (
    "--set", "env_kwargs.max_steps=12", "--set", "env_kwargs.grid_size=16",
    "--set", "env_kwargs.map_size=8", "--set", "env_kwargs.num_features=3",
    "--set", "episodes=2", "--set", "mappo.num_envs=4", "--set", "mappo.num_steps=12",
    "--set", "mappo.epochs=1", "--set", "mappo.minibatches=1",
    "--set", "actor.cnn_channels=[4]", "--set", "actor.cnn_strides=[2]",
    "--set", "actor.cnn_out=8",
    "--set", "actor.gnn_features=16", "--set", "actor.embed_hidden=[]",
    "--set", "actor.embed_dim=16", "--set", "actor.executor_hidden=[16]",
    "--set", "critic.hidden=[16]", "--set", "gif=false", "--no-progress")
# pretraining at that size: one behaviour-cloning round of 1 episode (and the recipe's
# validation episodes), 2 gradient steps, 2 evaluation episodes (its least)
PRETRAIN_SMALL = ("--rounds", "1", "--episodes", "1", "--steps", "2", "--eval-episodes", "2",
                  *COVERAGE_SMALL)


def _second_rover_run(cwd: Path) -> None:
    """``runs/rover-es``: a copy of the README's ``runs/rover`` (the two-run ``eval`` needs a
    second run of the env; training one more would only cost time)."""
    import shutil

    shutil.copytree(cwd / "runs" / "rover", cwd / "runs" / "rover-es")


TWO_PROCESSES = ("a shell loop starting two processes of one run: the block runs as written, "
                 "with bash, in tests/test_distributed.py::test_readme_two_process_recipe")


@dataclass(frozen=True)
class Run:
    """Run the command with ``extra`` appended (see the module docstring for ``when``)."""

    extra: tuple[str, ...] = ()
    when: str = "default"  # "default" | "slow" | "clean"
    env: dict[str, str] = field(default_factory=dict)
    needs: str | None = None  # a module the command needs (skipped without it)
    setup: object = None  # called with the scratch directory first


@dataclass(frozen=True)
class Skip:
    reason: str


PLAN: dict[str, Run | Skip] = {
    # Quick start
    "make demo": Run(("DEMO_ARGS=--n-outer 2",), when="clean"),
    "make test": Skip("the whole test suite, of which this test is a part"),
    # Training on the bundled envs
    ".venv/bin/feudal-es envs": Run(),
    ".venv/bin/feudal-es train --config configs/rover.json --n-outer 30 --out runs/rover":
        Run(("--n-outer", "1", *ROVER_SMALL)),
    ".venv/bin/feudal-es train --env feudal_es/Coverage-v0 --n-outer 20 "
    "--set env_kwargs.num_agents=4 --set es.pop_size=8":
        Run(("--n-outer", "1", "--out", "runs/coverage", *COVERAGE_SMALL), when="slow"),
    ".venv/bin/feudal-es train --resume runs/rover --n-outer 60":
        Run(("--n-outer", "2", "--no-progress")),
    ".venv/bin/feudal-es pretrain --config configs/coverage_lpac.json "
    "--recipe configs/coverage_lpac_pretrain.json --rounds 3 --steps 500 "
    "--out runs/bc_actor.safetensors":
        Run(PRETRAIN_SMALL, when="slow"),
    ".venv/bin/feudal-es train --config configs/coverage_lpac.json "
    "--set init_from=runs/bc_actor.safetensors":
        Run(("--n-outer", "1", "--out", "runs/from-bc", *COVERAGE_SMALL), when="slow"),
    # Evaluating saved selectors (the run trained above)
    # the zoo: shipped runs, nothing trained first
    ".venv/bin/feudal-es zoo": Run(),
    ".venv/bin/feudal-es render zoo:rover --out rover.gif": Run(),
    ".venv/bin/feudal-es eval zoo:rover --selector final --episodes 64": Run(when="slow"),
    ".venv/bin/feudal-es eval runs/rover": Run(),
    ".venv/bin/feudal-es eval runs/rover --selector runs/rover/best_selector.safetensors "
    "--episodes 32 --seed 7 --json": Run(when="slow"),
    ".venv/bin/feudal-es eval runs/rover runs/rover-es --episodes 64 "
    "--export marl-eval rover.marl.json": Run(setup=_second_rover_run, when="slow"),
    ".venv/bin/feudal-es render runs/rover --out rover.gif": Run(),
    ".venv/bin/feudal-es render runs/rover --out rover-best.gif "
    "--selector runs/rover/best_selector.safetensors": Run(when="slow"),
    # Agents with different spaces
    ".venv/bin/pip install -e .[mpe]":
        Skip("installs into the project's venv; the test venv has what CI installs "
             "(.ci/run: dev, which holds mpe)"),
    "cp examples/mympe.py .": Run(when="slow", needs="mpe2"),
    ".venv/bin/feudal-es train --import mympe --env mympe/speaker_listener-v4 --n-outer 2 "
    "--out runs/speaker": Run(("--no-progress",), when="slow", needs="mpe2"),
    ".venv/bin/feudal-es eval runs/speaker --import mympe": Run(when="slow", needs="mpe2"),
    ".venv/bin/feudal-es train --import mympe --env mympe/adversary-v3 --n-outer 2 "
    "--out runs/adversary": Run(("--no-progress",), when="slow", needs="mpe2"),
    ".venv/bin/feudal-es eval runs/adversary --import mympe": Run(when="slow", needs="mpe2"),
    ".venv/bin/feudal-es train --import mympe --env mympe/adversary-v3 --n-outer 2 "
    "--set team=adversary --set others=mympe:stand_still --out runs/adv_vs_still":
        Run(("--no-progress",), when="slow", needs="mpe2"),
    ".venv/bin/feudal-es eval runs/adv_vs_still --import mympe":
        Run(when="slow", needs="mpe2"),
    ".venv/bin/feudal-es train --import mympe --env mympe/adversary-v3 --n-outer 2 "
    "--set team=agent --set others=runs/adv_vs_still --out runs/agents_vs_adv":
        Run(("--no-progress",), when="slow", needs="mpe2"),
    ".venv/bin/feudal-es eval runs/agents_vs_adv --import mympe":
        Run(when="slow", needs="mpe2"),
    ".venv/bin/feudal-es train --env jaxmarl/MPE_simple_speaker_listener_v4 --n-outer 2 "
    "--out runs/sl": Run(("--set", "mappo.num_envs=4", "--no-progress"), when="slow",
                         needs="jaxmarl"),
    ".venv/bin/feudal-es eval runs/sl": Run(when="slow", needs="jaxmarl"),
    ".venv/bin/feudal-es train --env jaxmarl/MPE_simple_tag_v3 --n-outer 2 "
    "--set actor.recurrent=true --out runs/tag":
        Run(("--set", "mappo.num_envs=4", "--no-progress"), when="slow", needs="jaxmarl"),
    ".venv/bin/feudal-es eval runs/tag": Run(when="slow", needs="jaxmarl"),
    ".venv/bin/feudal-es train --env jaxmarl/MPE_simple_spread_v3 --n-outer 2 --set "
    'groups={"lead": ["agent_0"]} --set team=lead --set others=train --out runs/lead':
        Run(("--set", "mappo.num_envs=4", "--no-progress"), when="slow", needs="jaxmarl"),
    ".venv/bin/feudal-es eval runs/lead": Run(when="slow", needs="jaxmarl"),
    # JaxMARL envs
    ".venv/bin/feudal-es train --env jaxmarl/MPE_simple_spread_v3 --mode mappo "
    "--config configs/mpe.json --n-outer 10":
        Run(("--n-outer", "1", "--set", "mappo.num_envs=4", "--set", "episodes=2",
             "--no-progress"), when="slow", needs="jaxmarl"),
    # Scaling out
    # two processes at once, one block: tests/test_distributed.py runs it with bash
    "for i in 0 1; do": Skip(TWO_PROCESSES),
    "JAX_NUM_CPU_DEVICES=1 .venv/bin/feudal-es train --env feudal_es/Rover-v0 --n-outer 4 "
    "--out runs/rover-2proc --coordinator 127.0.0.1:12355 --num-processes 2 "
    "--process-id $i &": Skip(TWO_PROCESSES),
    "done; wait": Skip(TWO_PROCESSES),
    '.venv/bin/pip install -e .[ray]':
        Skip("installs into the project's venv; the test venv has what CI installs "
             "(.ci/run: dev, ray, jaxmarl)"),
    ".venv/bin/feudal-es train --import my_envs --env me/LineMeet-v0 --set backend=ray "
    "--set ray_workers=8":
        Run(("--n-outer", "1", "--set", "ray_workers=2", "--set", "episodes=2",
             "--set", "es.pop_size=4", "--no-progress"), when="slow", needs="ray"),
    # Results
    "make results":
        Skip("every study at full scale, about an hour on 2 cores; the next two commands "
             "run its pipeline (experiments.all) at a tiny scale"),
    ".venv/bin/python -m experiments.all --scale 0.05 --out /tmp/smoke":
        Run(("--scale", "0.002", "--only", "dispersion", "--seeds", "0", "--out", "smoke"),
            when="slow"),
    ".venv/bin/python -m experiments.rover --seeds 0 1 2 3 4 5 6 7 8 9":
        Run(("--seeds", "0", "--scale", "0.002", "--couplings", "4", "--arms", "merl",
             "--out", "rover-study"), when="slow"),
}

SHELL_FENCE = re.compile(r"^```(bash|sh|shell|console)\n(.*?)^```", re.S | re.M)
ANY_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# what a command line of an untagged block would start with (none may hide there)
COMMANDISH = re.compile(r"^\s*(\$ |\.venv/|make |feudal-es |python3? |pip |source )", re.M)
# notation, not shell: [--option ...], <placeholder>, an all-capitals metavariable, "..."
NOTATION = re.compile(r"^\[-|^[^\[]*\]$|^<.*>$|^[A-Z][A-Z_]{2,}$|^\.\.\.$")


def _commands(block: str, console: bool) -> list[str]:
    """The commands of one shell block: ``\\``-continued and quote-spanning lines joined,
    comments dropped; in a console block only ``$ `` lines (and their continuations)."""
    out, pending = [], ""
    for line in block.splitlines():
        if console and not pending:
            if not line.startswith("$ "):
                continue  # a console block's output
            line = line[2:]
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        pending += line
        try:
            argv = shlex.split(pending, comments=True)
        except ValueError:  # a quote open across lines (python -c '...')
            pending += "\n"
            continue
        if argv:
            out.append(pending)
        pending = ""
    assert not pending, f"a README shell block ends inside a command: {pending!r}"
    return out


def readme_commands() -> list[tuple[str, str]]:
    """``(section, command)`` for every command of the README's shell blocks, in order."""
    found = []
    for match in SHELL_FENCE.finditer(TEXT):
        heading = re.findall(r"^## .*$", TEXT[:match.start()], re.M)
        for command in _commands(match.group(2), console=match.group(1) == "console"):
            found.append((heading[-1] if heading else "", command))
    return found


def key(command: str) -> str:
    """A command as :data:`PLAN` names it: its words, whitespace collapsed, no comments."""
    return " ".join(" ".join(word.split()) for word in shlex.split(command, comments=True))


def _custom_env_line(section: str, command: str) -> bool:
    return section == CUSTOM_SECTION and command.lstrip().startswith(
        ("cd examples", "../.venv/bin/feudal-es "))


def _plan_of(section: str, command: str) -> Run | Skip | None:
    if _custom_env_line(section, command):
        return Skip("test_readme.py::test_custom_env_section_runs_from_the_working_directory")
    return PLAN.get(key(command))


def test_every_readme_command_is_run_or_skipped_with_a_reason():
    commands = readme_commands()
    assert len(commands) >= 15, "the README's shell blocks were not found"
    unplanned = [key(c) for s, c in commands if _plan_of(s, c) is None]
    assert not unplanned, (
        "README commands that tests/test_readme_commands.py neither runs nor skips with a "
        "reason; add each to PLAN (Run with shrinking arguments, or Skip('why')):\n"
        + "\n".join(unplanned))
    stale = set(PLAN) - {key(c) for _, c in commands}
    assert not stale, f"PLAN names commands the README no longer has: {sorted(stale)}"
    assert all(not isinstance(p, Skip) or p.reason for p in PLAN.values())


def test_readme_commands_have_no_notation():
    """Every command pastes as written: no ``[--opt X]``, ``<file>``, ``PATH``, ``...``."""
    bad = [(c, w) for _, c in readme_commands() for w in shlex.split(c, comments=True)
           if NOTATION.search(w) and not w.startswith("$")]
    assert not bad, f"README commands with notation in them: {bad}"


def test_no_command_hides_in_an_untagged_block():
    for match in ANY_FENCE.finditer(TEXT):
        if match.group(1) == "":
            hit = COMMANDISH.search(match.group(2))
            assert hit is None, (f"an untagged README block holds a command ({hit.group(0)!r}):"
                                 " tag it ```bash so tests/test_readme_commands.py runs it")


def test_bare_python_and_pip_are_the_venvs():
    """``python`` / ``pip`` without ``.venv/bin/`` have no jax on a fresh machine."""
    bare = [key(c) for _, c in readme_commands()
            if shlex.split(c, comments=True)[0] in ("python", "python3", "pip", "pip3")]
    assert not bare, f"README commands that need .venv/bin/ (or an activated venv): {bare}"


# --- running them --------------------------------------------------------------------------

def _scratch(tmp: Path, root: Path) -> Path:
    """A directory laid out like ``root`` (links to its entries; ``configs/`` copied, so a
    command may change it; no ``runs/``), with the README's ``my_envs.py`` in it."""
    work = tmp / "work"
    work.mkdir()
    for entry in root.iterdir():
        if entry.name in ("runs", ".git", ".pytest_cache", ".ruff_cache", "configs"):
            continue
        (work / entry.name).symlink_to(entry)
    shutil.copytree(root / "configs", work / "configs")
    module = [b for b in re.findall(r"```python\n(.*?)```", TEXT, re.S)
              if b.startswith(MODULE_HEADER)]
    assert len(module) == 1, "the README's custom-env section lost its my_envs.py block"
    (work / "my_envs.py").write_text(module[0])
    return work


def _environment(venv_bin: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("SLURM_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def _argv(command: str, plan: Run) -> list[str]:
    return [*shlex.split(command, comments=True), *plan.extra]


def _out_path(argv: list[str]) -> str | None:
    """The last ``--out`` of ``argv`` (what the command was asked to write)."""
    outs = [argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "--out"]
    return outs[-1] if outs else None


def run_commands(when: set[str], work: Path, venv_bin: Path, timeout: float = 600
                 ) -> list[str]:
    """Run every README command planned for ``when`` in ``work``, in README order; returns
    one line per command that failed (its exit status and output's tail)."""
    failures, ran = [], 0
    for section, command in readme_commands():
        plan = _plan_of(section, command)
        if not isinstance(plan, Run) or plan.when not in when:
            continue
        if plan.needs:
            probe = subprocess.run([str(venv_bin / "python"), "-c", f"import {plan.needs}"],
                                   capture_output=True)
            if probe.returncode != 0:
                print(f"skipped (no {plan.needs} installed): {key(command)}")
                continue
        if plan.setup is not None:
            plan.setup(work)
        argv = _argv(command, plan)
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=work, env=_environment(venv_bin, plan.env),
                              capture_output=True, text=True, timeout=timeout)
        ran += 1
        print(f"{time.perf_counter() - start:6.1f}s  rc {proc.returncode}  {shlex.join(argv)}")
        out = _out_path(argv)
        problem = None
        if proc.returncode != 0:
            problem = f"exit status {proc.returncode}"
        elif "Traceback (most recent call last)" in proc.stderr:
            problem = "a traceback on stderr"
        elif out is not None and not (work / out).exists():
            problem = f"exit status 0 but no {out}"
        elif "--json" in argv:
            json.loads(proc.stdout)  # --json prints JSON
        if problem:
            tail = (proc.stdout + proc.stderr)[-3000:]
            failures.append(f"README command failed ({problem}):\n  {command}\n"
                            f"run as: {shlex.join(argv)}\n{tail}")
    assert ran, f"no README command is planned for {when}"
    return failures


@pytest.mark.skipif(not (VENV_BIN / "feudal-es").exists(),
                    reason="the feudal-es console script is not installed")
@pytest.mark.heavy
def test_readme_commands_run(tmp_path):
    """The heavy part (``make test-heavy``): envs, a rover run of 1 round, its resume, eval and
    render, and the zoo's list and render (the rest of the README runs under ``slow``)."""
    work = _scratch(tmp_path, ROOT)
    failures = run_commands({"default"}, work, VENV_BIN)
    assert not failures, "\n\n".join(failures)
    rows = (work / "runs" / "rover" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["round"] for r in rows] == [0, 1]  # trained, then resumed


@pytest.mark.slow  # the whole README: pretraining, JaxMARL, multi-host, Ray, tiny studies
@pytest.mark.skipif(not (VENV_BIN / "feudal-es").exists(),
                    reason="the feudal-es console script is not installed")
@pytest.mark.timeout(3600)  # every command has its own 600 s; together they take longer
def test_readme_slow_commands_run(tmp_path):
    work = _scratch(tmp_path, ROOT)
    failures = run_commands({"default", "slow"}, work, VENV_BIN)
    assert not failures, "\n\n".join(failures)


def _checkout(dest: Path) -> Path:
    """The checkout's files (tracked and untracked, not ignored) copied to ``dest``, as a
    fresh clone of this working tree would have them: no ``.venv``, no ``runs/``."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.slow  # a fresh venv: pip installs the package and its dev extra (minutes)
@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None
                    or not (ROOT / ".git").exists(),
                    reason="needs make, git and a git checkout")
@pytest.mark.timeout(1800)
def test_quick_start_in_a_clean_venv(tmp_path):
    """``make demo`` in a copy of the checkout with nothing installed (it makes ``.venv``
    with ``python3 -m venv`` and ``pip install -e ".[dev]"``), then the heavy part's
    README commands with that venv."""
    clone = _checkout(tmp_path / "clone")
    assert not (clone / ".venv").exists()
    failures = run_commands({"clean"}, clone, clone / ".venv" / "bin", timeout=1500)
    assert not failures, "\n\n".join(failures)
    assert (clone / ".venv" / "bin" / "feudal-es").exists()
    work = _scratch(tmp_path, clone)
    failures = run_commands({"default"}, work, clone / ".venv" / "bin")
    assert not failures, "\n\n".join(failures)


# --- the versions the README says were tested ------------------------------------------------

def _tested_versions() -> dict[str, Version]:
    """``name -> version`` from the README's "## Tested versions" line(s)."""
    section = TEXT[TEXT.index("## Tested versions"):].split("(")[0]  # the list, not the notes
    found = {}
    for names, version in re.findall(r"\b([A-Za-z][\w/-]*) (\d+\.\d+(?:\.\d+)?)\b", section):
        for name in names.split("/"):
            found[name.lower()] = Version(version)
    return found


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements() -> list[Requirement]:
    """Every requirement of the package and of each of its extras (pyproject.toml)."""
    project = _pyproject()["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return reqs


def test_tested_versions_satisfy_pyproject():
    tested = _tested_versions()
    assert {"jax", "jaxlib", "equinox", "numpy", "gymnasium", "pettingzoo"} <= set(tested)
    for req in _requirements():
        name = req.name.lower()
        if name in tested:
            assert req.specifier.contains(tested[name], prereleases=True), (
                f"README's tested {name} {tested[name]} is outside pyproject's {req}")


def _closure(reqs: list[Requirement]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``reqs`` pull in, transitively (extras of theirs not)."""
    found: dict[str, metadata.Distribution] = {}
    todo = [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]
    while todo:
        name = canonicalize_name(todo.pop().name)
        if name in found:
            continue
        try:
            found[name] = dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an extra that is not installed
        todo += [r for r in map(Requirement, dist.requires or ())
                 if r.marker is None or r.marker.evaluate({"extra": ""})]
    return found


def _constraints(dists) -> list[tuple[str, Requirement]]:
    """``(who, requirement)`` for each unconditional requirement of ``dists``."""
    return [(f"{d.metadata['Name']} {d.version}", r) for d in dists
            for r in map(Requirement, d.requires or ())
            if r.marker is None or r.marker.evaluate({"extra": ""})]


def test_one_gymnasium_with_every_extra_installed():
    """The installed packages the extras bring (e.g. the jaxmarl extra's gymnax, which
    requires gymnasium < 1.4) accept the README's tested versions, and what a plain install
    would pick (the newest release pyproject and the plain install's own packages admit) is
    within their ranges too: installing an extra never swaps a tested dependency of a plain
    install for another version. Without the extras installed it checks less (CI has them)."""
    tested = _tested_versions()
    project = _pyproject()["project"]
    base = _closure([Requirement(r) for r in project["dependencies"]])
    extras = _closure([Requirement(r) for extra in project["optional-dependencies"].values()
                       for r in extra])
    plain = {canonicalize_name(r.name): r.specifier for r in _requirements()}
    for _, req in _constraints(base.values()):  # what a plain install's packages allow
        name = canonicalize_name(req.name)
        if name in plain:
            plain[name] &= req.specifier
    only_extras = [d for n, d in extras.items() if n not in base]
    for who, req in _constraints([*base.values(), *only_extras]):
        name = canonicalize_name(req.name)
        if name not in tested:
            continue
        assert req.specifier.contains(tested[name], prereleases=True), (
            f"{who} requires {req}: the README's tested {name} {tested[name]} is not "
            f"installable with it")
    for who, req in _constraints(only_extras):
        name = canonicalize_name(req.name)
        if name not in tested or name not in plain:
            continue
        # a plain install gets the newest release its ranges admit (here: on a grid of
        # versions around the tested one); an extra's package that refuses it makes pip
        # swap it for an older one
        major = tested[name].major
        grid = [Version(f"{a}.{b}.{c}") for a in (major, major + 1) for b in range(40)
                for c in range(10)]
        newest = max(v for v in grid if plain[name].contains(v))
        assert req.specifier.contains(newest), (
            f"{who} (an extra's) requires {req}, but a plain install may get {name} "
            f"{newest}: installing the extra would swap it for an older one; cap "
            f"pyproject's range where that package does")
