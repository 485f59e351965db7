"""README.md as a newcomer runs it: every ```python block, and the custom-env commands.

Each python block runs as written, in a fresh interpreter whose working directory is a
scratch directory (nothing on ``PYTHONPATH`` but what the installed package provides);
the block headed ``# my_envs.py`` is saved there as that module (and must equal the shipped
``examples/my_envs.py``). The shell block of "Your own PettingZoo env" then runs verbatim,
line by line, in a scratch copy of the checkout's layout (``examples/`` beside a ``.venv``
that is the test session's), without ``PYTHONPATH``, as the README says it can.
Compilations are shared with the rest of the session through its XLA cache (conftest.py).
Every other shell command of the README: tests/test_readme_commands.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

README = Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, re.S)
MODULE_HEADER = "# my_envs.py\n"
CONSOLE = Path(sys.executable).parent / "feudal-es"


def _clean_env() -> dict[str, str]:
    """The test session's environment without ``PYTHONPATH`` (a newcomer has none)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


EXAMPLE = README.parent / "examples" / "my_envs.py"


def _module_block() -> str:
    module = [b for b in PYTHON_BLOCKS if b.startswith(MODULE_HEADER)]
    assert len(module) == 1, "the README's custom-env section lost its my_envs.py block"
    return module[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """``ROOT/examples`` of a scratch ``ROOT`` whose ``.venv`` is the session's venv,
    holding the README's ``my_envs.py``."""
    root = tmp_path_factory.mktemp("readme")
    (root / ".venv").symlink_to(Path(sys.executable).parents[1], target_is_directory=True)
    d = root / "examples"
    d.mkdir()
    (d / "my_envs.py").write_text(_module_block())
    return d


def test_the_shipped_examples_are_the_readme_blocks():
    assert EXAMPLE.read_text() == _module_block(), (
        "examples/my_envs.py and README's my_envs.py block differ: copy one onto the other")
    (mpe,) = [b for b in PYTHON_BLOCKS if b.startswith("# mympe.py\n")]
    assert (EXAMPLE.parent / "mympe.py").read_text() == mpe, (
        "examples/mympe.py and README's mympe.py block differ: copy one onto the other")


def test_readme_has_the_blocks_this_test_runs():
    assert len(PYTHON_BLOCKS) >= 5
    assert "../shared" not in TEXT, "the README must not point outside the repository"


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)),
                         ids=[b.splitlines()[0][:40] for b in PYTHON_BLOCKS])
@pytest.mark.heavy
def test_python_block_runs_as_written(index, workdir):
    code = PYTHON_BLOCKS[index]
    proc = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=_clean_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"README python block {index} failed:\n{code}\n{proc.stderr}"


def _custom_env_commands() -> list[str]:
    section = TEXT[TEXT.index("## Your own PettingZoo env"):]
    section = section[:section.index("\n## ")]
    shell = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(shell) == 1
    lines = [line.split("  #")[0].strip() for line in shell[0].splitlines()]
    assert lines[0] == "cd examples", "the section's commands run from examples/"
    return lines[1:]


@pytest.mark.skipif(not CONSOLE.exists(), reason="the feudal-es console script is not installed")
@pytest.mark.slow  # five CLI launches on the host path (~2 min); python blocks stay fast
def test_custom_env_section_runs_from_the_working_directory(workdir):
    """envs, train, eval, render and a module:attr train, verbatim, no PYTHONPATH."""
    commands = _custom_env_commands()
    assert [c.split()[:2] for c in commands] == [
        ["../.venv/bin/feudal-es", c] for c in ("envs", "train", "eval", "render", "train")]
    outputs = []
    for command in commands:
        argv = shlex.split(command)  # ../.venv/bin/feudal-es, resolved from cwd
        if argv[1] == "train":
            argv.append("--no-progress")
        proc = subprocess.run(argv, cwd=workdir, env=_clean_env(), capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
        outputs.append(proc.stdout)
    assert "me/LineMeet-v0" in outputs[0]
    run = workdir / "runs" / "linemeet"
    assert (run / "ckpt_00000003.safetensors").is_file() and "host path" in outputs[1]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert all(r["fitness_best"] is not None and r["mappo/policy_loss"] is not None
               for r in rows)
    assert "team fitness (mean ± std)" in outputs[2] and "higher is better" in outputs[2]
    with Image.open(workdir / "linemeet.gif") as gif:
        assert gif.n_frames > 1
    assert "me/LineMeet-v0" in (run / "config.json").read_text()  # and its --import:
    assert '"my_envs"' in (run / "config.json").read_text()
    # without the --import, eval names the flag instead of importing anything itself
    proc = subprocess.run([str(CONSOLE), "eval", str(run)], cwd=workdir, env=_clean_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "pass --import my_envs" in proc.stderr
