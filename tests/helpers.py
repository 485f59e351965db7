"""What several test modules share: tiny configs, tree and history comparisons, raw
safetensors files. Test modules import from here (and from the env modules
``line_envs`` and ``user_envs``), never from each other.

The tiny configs are shared on purpose: every trainer of the same config reuses the jitted
functions compiled for it (:func:`feudal_es.functions.jax_functions` caches them per
process, the persistent compilation cache across the CLI subprocesses).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest

from feudal_es.config import TrainerConfig
from feudal_es.resolve import ResolvedEnv
from feudal_es.trainer import ESTrainer

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

TINY_ACTOR = dict(cnn_channels=[4], cnn_strides=[2], cnn_out=8, vec_hidden=[16], vec_out=8,
                  gnn_hops=2, gnn_layers=1, gnn_features=16, embed_hidden=[], embed_dim=16,
                  executor_hidden=[16])
# 3 Coverage robots, 12-step episodes, the compact CNN actor: the JAX-path trainer tests
TINY = TrainerConfig(
    env="feudal_es/Coverage-v0",
    env_kwargs=dict(num_agents=3, max_steps=12, grid_size=16, map_size=8, num_features=3),
    n_outer=3, episodes=2, seed=0,
    es=dict(pop_size=4, sigma=0.5, lr=0.1, optimizer="adam"),
    mappo=dict(num_envs=4, num_steps=12, epochs=2, minibatches=2),
    actor={**TINY_ACTOR, "selector_period": 4}, critic=dict(hidden=[32]), checkpoint_every=1,
    gif=False,
)
# 3 agents, vector observations (an MLP actor: the fused one-program update), two seeds
VEC = TrainerConfig(
    env="feudal_es/Discovery-v0",
    env_kwargs=dict(num_agents=3, num_targets=3, max_steps=10, obs_mode="vec", sectors=4),
    mode="merl", n_outer=2, grad_steps_per_outer=1, episodes=2, seeds=(3, 5),
    es=dict(pop_size=4, sigma=0.5, lr=0.1, optimizer="adam"),
    mappo=dict(num_envs=4, num_steps=10, epochs=2, minibatches=2),
    actor=dict(vec_hidden=[16], vec_out=16, gnn_layers=0, embed_hidden=[], embed_dim=16,
               executor_hidden=[16], selector_period=5),
    critic=dict(hidden=[16]), checkpoint_every=1, plot_every=100, gif=False,
    auto=())  # literal: no defaults by observation kind (vector: test_custom_env_learns)
# the host path: line_envs.FaultyLine, ES on the selector over a frozen executor
HOST = TrainerConfig(
    env="tests/Line", mode="es-selector", n_outer=2, episodes=2, seed=3, num_skills=2,
    es=dict(pop_size=4, sigma=0.5, lr=0.1), actor={**TINY_ACTOR, "selector_period": 2},
    critic=dict(hidden=[16]), mappo=dict(num_envs=2, num_steps=6, epochs=1, minibatches=1),
    checkpoint_every=100, plot_every=100, gif=False,
    auto=(),  # literal: the fault plans count its episodes (1 MAPPO step per round)
)
VOLATILE = ("wall_time", "round_time", "sps", "mappo/sps")  # host timing, not results


def host_trainer(run_dir, plan=None, config: TrainerConfig = HOST, **env_kwargs) -> ESTrainer:
    """A host-path trainer of ``config`` on ``line_envs.FaultyLine`` with ``plan``."""
    from line_envs import FaultyLine

    make = lambda **kw: FaultyLine(plan, **env_kwargs, **kw)
    return ESTrainer(config, run_dir, resolved=ResolvedEnv(config.env, "host", make=make))


def leaves(tree) -> list[np.ndarray]:
    """The array leaves of ``tree`` as numpy arrays."""
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def loss_minibatch(batch, key: jax.Array) -> dict:
    """A ``mappo.loss`` minibatch of every sample of a collected ``batch`` (``[T, E, ...]``
    flattened to ``[T * E, ...]``), with standard-normal advantages drawn from ``key`` and
    value targets one above the batch's values: a loss whose every term has a gradient."""
    data = {"obs": batch.obs, "adj": batch.adj, "global_state": batch.global_state,
            "option": batch.option, "action": batch.action, "log_prob": batch.log_prob,
            "value": batch.value, "alive": batch.alive,
            "advantage": jax.random.normal(key, batch.reward.shape),
            "target": batch.value + 1.0}
    return jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), data)


def _key_data(x):
    if hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(x)
    return x


def assert_trees_equal(a, b) -> None:
    """Every leaf bit-identical (typed keys by their key data)."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(_key_data(x)), np.asarray(_key_data(y)))


def assert_trees_close(a, b, rtol: float, atol: float) -> None:
    """Every leaf equal to a stated tolerance (another XLA program: floats reassociate)."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(_key_data(x)), np.asarray(_key_data(y)),
                                   rtol=rtol, atol=atol)


def stable(history: list[dict]) -> list[dict]:
    """Rows without their clock-dependent columns (:data:`VOLATILE`)."""
    return [{k: v for k, v in h.items() if k not in VOLATILE} for h in history]


def assert_history_close(a: list[dict], b: list[dict]) -> None:
    """Same rows and keys; ints / None / the ES and fitness columns exact; MAPPO's float
    diagnostics to float32 rounding (across *processes* XLA may reduce in another order:
    last-bit differences seen in means over identical batches)."""
    a, b = stable(a), stable(b)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            if k.startswith("mappo/") and isinstance(x[k], float):
                assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-7), (x["round"], k)
            else:
                assert x[k] == y[k], (x["round"], k)


def metrics_rows(run_dir: Path) -> list[dict]:
    """The rows of a run directory's ``metrics.jsonl``."""
    return [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def read_st(path: Path) -> tuple[dict, bytes]:
    """A safetensors file's header (parsed here, independently of feudal_es) and body."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8: 8 + n]), data[8 + n:]


def write_st(path: Path, header: dict, body: bytes) -> Path:
    """A valid safetensors file: 8-byte length, JSON header padded to 8 bytes, body."""
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + body)
    return path


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a ``feudal-es`` subprocess: this one's, with the repository and
    ``tests/`` importable (``--import user_envs``), plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def cli_command(*args: str) -> list[str]:
    """The argv of ``feudal-es ARGS`` run by this interpreter."""
    return [sys.executable, "-m", "feudal_es.cli", *args]


def two_device_result(script: str, timeout: float = 300) -> dict:
    """Run ``script`` (Python source) in a subprocess with two CPU devices and the
    repository and ``tests/`` importable; the JSON it prints after ``RESULT ``."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    env.update(JAX_NUM_CPU_DEVICES="2", PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


def run_cli(*args: str, cwd: Path, check: bool = True, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``feudal-es ARGS`` in a subprocess (output captured as text); ``check``: it must
    exit 0 (the failure shows its output)."""
    proc = subprocess.run(cli_command(*args), cwd=cwd, env=env or cli_env(),
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"feudal-es {args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def main_in(work: Path, *argv: str) -> tuple[int, str, str]:
    """``feudal-es ARGV`` through ``cli.main`` in this process, from ``work``: (exit
    status, stdout, stderr). The same code as the subprocess (:func:`run_cli`) without its
    start, import and compilations; argparse's refusal (``SystemExit``) is a status too."""
    import contextlib
    import io

    from feudal_es import cli

    out, err, cwd = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(work)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(list(argv))
            except SystemExit as e:
                status = e.code
    finally:
        os.chdir(cwd)
    return status, out.getvalue(), err.getvalue()
