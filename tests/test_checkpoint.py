"""Checkpoints: exact round trips, refusals with named causes, damaged and hostile files,
crash atomicity. Tiny networks and hand-built env states keep XLA compiles out."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from gymnasium import spaces

from agents import ActorConfig, CentralCritic, CriticConfig, FeudalActor, selector_theta
from envs.coverage import CoverageState
from feudal_es import checkpoint
from feudal_es.checkpoint import (
    CheckpointError,
    CheckpointManager,
    load,
    load_selector,
    read_metadata,
    save,
    save_selector,
)
from feudal_es.es import ESConfig, ESState
from feudal_es.es import init as es_init

# The per-agent spaces of Coverage(num_agents=3, grid_size=8, map_size=4), written out
# (reading them from the env traces a reset)
N_AGENTS, GRID, SKILLS = 3, 8, 2  # skills: ("explore", "cover")
BOX = lambda *shape: spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)
OBS_SPACE = spaces.Dict({"maps": BOX(3, 4, 4), "vec": BOX(2)})
ACTION_SPACE = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
SMALL = ActorConfig(cnn_channels=(2,), cnn_strides=(1,), cnn_out=4, vec_hidden=(4,), vec_out=4,
                    gnn_hops=1, gnn_layers=1, gnn_features=4, embed_hidden=(), embed_dim=4,
                    executor_hidden=(4,))
WIDER = dataclasses.replace(SMALL, embed_dim=6)
REPO = Path(__file__).resolve().parents[1]
META = {"env_id": "feudal_es/Coverage-v0", "env_kwargs": {"num_agents": 3, "grid_size": 8},
        "actor_config": dataclasses.asdict(SMALL), "seed": np.int64(7)}


class Runner(NamedTuple):
    """A stand-in for the trainer's state: every kind of leaf a run carries."""

    actor: FeudalActor
    critic: CentralCritic
    opt_state: optax.OptState
    es: ESState
    env_state: CoverageState
    key: jax.Array
    keys: jax.Array
    round: int
    best: float
    done: bool
    extras: dict


def _fill(rng: np.random.Generator, abstract):
    """Random concrete arrays for an abstract tree (numpy + device_put: no XLA compiles)."""
    def draw(s):
        if jnp.issubdtype(s.dtype, jnp.inexact):
            x = rng.standard_normal(s.shape)
        elif s.dtype == jnp.bool_:
            x = rng.random(s.shape) < 0.5
        else:
            x = rng.integers(0, 100, s.shape)
        return jax.device_put(np.asarray(x).astype(s.dtype))

    return jax.tree.map(draw, abstract)


def make_runner(config: ActorConfig = SMALL, seed: int = 0) -> Runner:
    rng = np.random.default_rng(seed)
    actor = FeudalActor(np.random.default_rng(seed), OBS_SPACE, ACTION_SPACE, SKILLS, config)
    critic = CentralCritic(np.random.default_rng(seed + 1), 12, N_AGENTS, SKILLS,
                           CriticConfig(hidden=(4,)))
    params = eqx.filter(actor, eqx.is_inexact_array)
    opt_state = _fill(rng, jax.eval_shape(optax.adam(1e-3).init, params))  # mu, nu, count
    cfg = ESConfig(optimizer="adam", sigma=0.1)
    es_state = _fill(rng, jax.eval_shape(lambda a: es_init(selector_theta(a), cfg), actor))
    # a batch of 2 env states; shapes and dtypes vary by field, whatever the fields are
    # (the env's own field list is the other engineers' to change)
    dtypes = (jnp.float32, jnp.int32, jnp.bool_)
    env_state = _fill(rng, CoverageState(*(
        jax.ShapeDtypeStruct((2, N_AGENTS, GRID)[: 1 + i % 3], dtypes[i % 3])
        for i in range(len(CoverageState._fields)))))
    extras = {"mask": jax.device_put(np.array([True, False, True])),
              "u8": np.arange(4, dtype=np.uint8),
              "bf16": jax.device_put(rng.random(3).astype(jnp.bfloat16)),
              "lr": jnp.asarray(0.1 * (seed + 1)),  # weakly typed
              "np_scalar": np.float32(0.25), "np_f64": np.float64(-0.0),
              "py_nan": float("nan"), "big_int": 2**62, "py_complex": 1 - 2j,
              "nan": jax.device_put(np.array([np.nan, -np.inf, 1.0], np.float32))}
    keys = jax.random.wrap_key_data(jax.device_put(rng.integers(0, 2**32, (4, 2), np.uint32)))
    return Runner(actor, critic, opt_state, es_state, env_state, jax.random.key(seed + 2),
                  keys, 12, 0.5, True, extras)


@pytest.fixture(scope="module")
def runner() -> Runner:
    return make_runner()


def assert_bit_identical(a, b):
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        assert type(x) is type(y), (type(x), type(y))
        if isinstance(x, (jax.Array, np.ndarray, np.generic)):
            assert x.dtype == y.dtype and x.shape == y.shape
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                assert jax.random.key_impl(x) == jax.random.key_impl(y)
                x, y = jax.random.key_data(x), jax.random.key_data(y)
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
            assert getattr(x, "weak_type", False) == getattr(y, "weak_type", False)
        elif isinstance(x, (bool, int, float, complex)):
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes()  # NaN too
        else:
            assert x is y  # non-array leaves (activation functions) come from the template


# --------------------------------------------------------------------------- round trip
def test_round_trip_is_bit_identical(tmp_path, runner):
    path = save(tmp_path / "ckpt.npz", runner, META)
    template = make_runner(seed=1)  # same structure, other values
    restored, meta = load(path, template, expect={"env_id": META["env_id"]})
    assert_bit_identical(restored, runner)
    as_json = json.loads(json.dumps({**META, "seed": 7}))  # tuples come back as lists
    assert meta == as_json and read_metadata(path) == meta
    assert restored.extras["lr"].weak_type and isinstance(restored.round, int)


def test_restored_state_does_not_retrace(tmp_path, runner):
    """Same abstract values (dtype, shape, weak type) as the saved state: a jitted step
    compiled for the original runs the restored state without tracing again (resume).
    (A Python float NaN is left out: filter_jit treats it as static and nan != nan.)"""
    runner = runner._replace(extras={k: v for k, v in runner.extras.items() if k != "py_nan"})
    traces = []

    @eqx.filter_jit
    def step(state):
        traces.append(1)
        return state.extras["lr"] * 2 + state.es.sigma

    step(runner)
    template = make_runner(seed=1)
    template = template._replace(extras={k: template.extras[k] for k in runner.extras})
    restored, _ = load(save(tmp_path / "ckpt.npz", runner), template)
    step(restored)
    assert len(traces) == 1


def test_abstract_template(tmp_path, runner):
    """A template from eqx.filter_eval_shape (no compute) is filled the same way; numpy
    leaves come back as jax arrays. (eval_shape turns float64 into float32 without x64, so
    such a template refuses a float64 leaf, as it should.)"""
    drop_f64 = lambda r: r._replace(extras={k: v for k, v in r.extras.items() if k != "np_f64"})
    path = save(tmp_path / "ckpt.npz", drop_f64(runner))
    abstract = eqx.filter_eval_shape(lambda: drop_f64(make_runner()))
    assert isinstance(abstract.key, jax.ShapeDtypeStruct)
    restored, _ = load(path, abstract)
    as_jax = lambda x: jnp.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x
    assert_bit_identical(restored, jax.tree.map(as_jax, drop_f64(runner)))


def test_file_layout(tmp_path, runner):
    """One zip of .npy members named by leaf path plus a JSON header; no pickle anywhere."""
    path = save(tmp_path / "ckpt.npz", runner, META)
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
    paths = [jax.tree_util.keystr(p) for p, x in jax.tree_util.tree_flatten_with_path(runner)[0]
             if eqx.is_array(x) or isinstance(x, (int, float, complex, np.generic))]
    assert names == {p + ".npy" for p in paths} | {"__feudal_es__.npy"}
    with np.load(path, allow_pickle=False) as npz:  # plain numpy reads every member
        header = npz["__feudal_es__"].tobytes().decode()
        assert np.array_equal(npz[paths[0]], np.asarray(jax.tree.leaves(runner)[0]))
    assert '"format_version": 1' in header and '"sha256"' in header
    assert not list(tmp_path.glob(".*tmp*"))


# ------------------------------------------------------------------------ refusals
def test_mismatched_architecture_names_leaf_and_shapes(tmp_path, runner):
    path = save(tmp_path / "ckpt.npz", runner, META)
    wider = make_runner(WIDER)
    # oracle: the first leaf (template order) whose shape differs, found independently
    saved = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_flatten_with_path(runner)[0]}
    first = next((jax.tree_util.keystr(p), x) for p, x in
                 jax.tree_util.tree_flatten_with_path(wider)[0]
                 if np.shape(saved[jax.tree_util.keystr(p)]) != np.shape(x))
    name, leaf = first
    want = f"{leaf.dtype}[{', '.join(map(str, leaf.shape))}]"
    got = f"{leaf.dtype}[{', '.join(map(str, saved[name].shape))}]"
    with pytest.raises(CheckpointError) as err:
        load(path, wider)
    msg = str(err.value)
    assert f"leaf {name}:" in msg and f"template expects {want}" in msg and f"has {got}" in msg
    assert "0 template leaves are missing" in msg
    # expect names the differing config key and both values, before shapes are compared
    with pytest.raises(CheckpointError, match=r"actor_config\.embed_dim: checkpoint has 4, "
                                              r"expected 6"):
        load(path, wider, expect={"actor_config": dataclasses.asdict(WIDER)})
    with pytest.raises(CheckpointError, match="env_id: checkpoint has 'feudal_es/Coverage-v0', "
                                              "expected 'feudal_es/Discovery-v0'"):
        load(path, runner, expect={"env_id": "feudal_es/Discovery-v0"})
    with pytest.raises(CheckpointError, match="mode: checkpoint has '<absent>'"):
        load(path, runner, expect={"mode": "merl"})
    with pytest.raises(CheckpointError, match="done: checkpoint has 1, expected True"):
        load(save(tmp_path / "flag.npz", {}, {"done": 1, "lr": 1}), {}, expect={"done": True})
    load(tmp_path / "flag.npz", {}, expect={"lr": 1.0, "done": 1})  # numbers compare by value


def test_missing_and_extra_leaves_are_counted(tmp_path):
    path = save(tmp_path / "ckpt.npz", {"a": jnp.zeros(2), "b": 1, "c": jnp.ones((2, 2))})
    with pytest.raises(CheckpointError, match=r"leaf \['d'\]: template expects float32\[3\], "
                                              r"checkpoint has <absent>.*1 template leaves are "
                                              r"missing .* 2 checkpoint leaves are extra"):
        load(path, {"a": jnp.zeros(2), "d": jnp.zeros(3)})
    with pytest.raises(CheckpointError, match=r"leaf \['b'\]: template expects float32\[\], "
                                              r"checkpoint has py_int\[\]"):
        load(path, {"a": jnp.zeros(2), "b": jnp.zeros(()), "c": jnp.ones((2, 2))})


def test_format_version_mismatch_names_both(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "FORMAT_VERSION", 2)
    path = save(tmp_path / "future.npz", {"a": jnp.zeros(2)})
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="format version 2; this feudal-es reads format "
                                              "version 1"):
        load(path, {"a": jnp.zeros(2)})


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match=r"no checkpoint at .* does not exist"):
        load(tmp_path / "nope.npz", {})
    (tmp_path / "cfg.json").write_text("{}")
    with pytest.raises(CheckpointError, match="not a feudal-es checkpoint"):
        load(tmp_path / "cfg.json", {})
    np.savez(tmp_path / "plain.npz", a=np.zeros(2))  # a numpy archive, but not ours
    with pytest.raises(CheckpointError, match="not a feudal-es checkpoint"):
        load(tmp_path / "plain.npz", {"a": jnp.zeros(2)})
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty"):
        load(tmp_path / "empty.npz", {})


# -------------------------------------------------------------------- damaged files
@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_truncated_file(tmp_path, runner, keep):
    path = save(tmp_path / "ckpt.npz", runner)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match=r"truncated|corrupted|empty"):
        load(path, runner)


def test_flipped_array_byte_is_detected(tmp_path):
    tree = {"w": jnp.arange(1000, dtype=jnp.float32)}
    path = save(tmp_path / "ckpt.npz", tree)
    data = bytearray(path.read_bytes())
    at = data.index(np.arange(1000, dtype=np.float32).tobytes()) + 2001
    data[at] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"):
        load(path, tree)


def test_sha256_catches_what_zip_crc_does_not(tmp_path):
    """Rewrite an array member with valid zip CRCs: only the header's sha256 can tell."""
    tree = {"w": jnp.arange(8, dtype=jnp.float32)}
    path = save(tmp_path / "ckpt.npz", tree)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.arange(8, dtype=np.float32) + 1)
    members["['w'].npy"] = buf.getvalue()
    with zipfile.ZipFile(path, "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    with pytest.raises(CheckpointError, match="corrupted: sha256"):
        load(path, tree)


def test_every_flipped_byte_is_refused_or_harmless(tmp_path):
    """Flip each byte of a small checkpoint: the load raises CheckpointError or returns the
    exact saved tree (a flip in e.g. a zip timestamp changes nothing) — never a numpy or
    zipfile traceback, never silently different values."""
    tree = {"w": jnp.arange(6, dtype=jnp.float32), "k": jax.random.key(1), "n": 3}
    path = save(tmp_path / "ckpt.npz", tree, {"seed": 1})
    data = path.read_bytes()
    bad = tmp_path / "bad.npz"
    refused, positions = 0, range(0, len(data), 7)  # every byte: same verdict, 7x slower
    for i in positions:
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        bad.write_bytes(bytes(flipped))
        try:
            out, meta = load(bad, tree)
        except CheckpointError:
            refused += 1
            continue
        assert_bit_identical(out, tree)
        assert meta == {"seed": 1}
    assert refused > 0.5 * len(positions)  # most bytes matter (about 83% with stride 1)


# -------------------------------------------------------------------- hostile files
class _Payload:
    """Unpickling this runs a shell command that creates ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _object_array(marker) -> np.ndarray:
    arr = np.empty(1, dtype=object)
    arr[0] = _Payload(marker)
    return arr


def test_crafted_files_do_not_execute_code(tmp_path):
    marker = tmp_path / "pwned"
    good = save(tmp_path / "good.npz", {"w": jnp.zeros(3)})
    with zipfile.ZipFile(good) as zf:
        header = zf.read("__feudal_es__.npy")

    def npy(arr) -> bytes:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, allow_pickle=True)
        return buf.getvalue()

    crafted = {
        "leaf": {"__feudal_es__.npy": header, "['w'].npy": npy(_object_array(marker))},
        "header": {"__feudal_es__.npy": npy(_object_array(marker))},
    }
    for name, members in crafted.items():
        path = tmp_path / f"{name}.npz"
        with zipfile.ZipFile(path, "w") as zf:
            for n, b in members.items():
                zf.writestr(n, b)
        for attempt in (lambda p: load(p, {"w": jnp.zeros(3)}), lambda p: load_selector(p, 3)):
            with pytest.raises(CheckpointError):
                attempt(path)
            assert not marker.exists(), (name, "executed code")
        try:  # reads the header only: refuses the crafted header, ignores the crafted leaf
            read_metadata(path)
        except CheckpointError:
            assert name == "header"
        assert not marker.exists()
    (tmp_path / "raw.npz").write_bytes(pickle.dumps(_Payload(marker)))
    np.save(tmp_path / "obj.npy", _object_array(marker), allow_pickle=True)
    for path in (tmp_path / "raw.npz", tmp_path / "obj.npy"):
        with pytest.raises(CheckpointError, match="not a feudal-es checkpoint"):
            load(path, {"w": jnp.zeros(3)})
        assert not marker.exists()
    # the payload is live: an unsafe reader would have run it
    with np.load(tmp_path / "leaf.npz", allow_pickle=True) as npz:
        npz["['w']"]
    assert marker.exists()


# --------------------------------------------------------------- atomicity, manager
def test_crash_mid_write_keeps_previous_checkpoint(tmp_path, runner, monkeypatch):
    manager = CheckpointManager(tmp_path / "run", keep=3)
    first = manager.save(1, runner, META)
    real = checkpoint._write_payload

    def crash_halfway(f, items):
        buf = io.BytesIO()
        real(buf, items)
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(checkpoint, "_write_payload", crash_halfway)
    with pytest.raises(RuntimeError, match="simulated crash"):
        manager.save(2, make_runner(seed=3), META)
    with pytest.raises(RuntimeError, match="simulated crash"):  # over an existing file too
        manager.save(1, make_runner(seed=3), META)
    monkeypatch.undo()
    assert manager.all() == [first] and manager.latest() == first
    assert os.listdir(manager.run_dir) == [first.name]  # the temp file was removed
    restored, meta = manager.load_latest(make_runner(seed=1), expect={"step": 1})
    assert_bit_identical(restored, runner)
    assert meta["step"] == 1 and meta["env_id"] == META["env_id"]
    # what a SIGKILL leaves (a temp file) is never listed, and the next save clears it
    stray = manager.run_dir / ".ckpt_00000002.npz.tmp-abc123"
    stray.write_bytes(first.read_bytes()[:100])
    assert manager.all() == [first]
    manager.save(2, runner)
    assert not stray.exists() and [p.name for p in manager.all()] == [
        "ckpt_00000001.npz", "ckpt_00000002.npz"]


def test_keep_prunes_oldest_and_sorts_by_step(tmp_path):
    manager = CheckpointManager(tmp_path, keep=3)
    assert manager.latest() is None and manager.all() == []
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        manager.load_latest({})
    for step in (5, 1, 100, 7, 10**9):
        manager.save(step, {"step": jnp.asarray(step)})
    assert [int(p.stem.split("_")[1]) for p in manager.all()] == [7, 100, 10**9]
    assert manager.latest() == manager.path(10**9)
    tree, meta = manager.load_latest({"step": jnp.asarray(0)})
    assert int(tree["step"]) == 10**9 and meta == {"step": 10**9}
    everything = CheckpointManager(tmp_path / "all", keep=None)
    for step in range(5):
        everything.save(step, {})
    assert len(everything.all()) == 5
    with pytest.raises(ValueError, match="keep"):
        CheckpointManager(tmp_path, keep=0)


def test_damaged_latest_is_reported_with_older_ones(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"a": jnp.zeros(2)})
    manager.save(2, {"a": jnp.ones(2)})
    manager.path(2).write_bytes(manager.path(2).read_bytes()[:50])
    with pytest.raises(CheckpointError, match=r"truncated.*older checkpoints in this run: "
                                              r"ckpt_00000001\.npz"):
        manager.load_latest({"a": jnp.zeros(2)})
    assert np.array_equal(load(manager.path(1), {"a": jnp.zeros(2)})[0]["a"], np.zeros(2))


_WRITER = textwrap.dedent("""
    import io, sys, time
    import numpy as np
    from feudal_es import checkpoint
    stall = sys.argv[2] == "stall"
    if stall:  # from the 3rd save on: write half the bytes, say so, and hang there
        real = checkpoint._write_payload
        def half_then_hang(f, items):
            if int(sys.argv[3]) > 0:
                return real(f, items)
            buf = io.BytesIO()
            real(buf, items)
            f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            f.flush()
            print("mid-write", flush=True)
            time.sleep(60)  # the parent kills it long before
        checkpoint._write_payload = half_then_hang
    manager = checkpoint.CheckpointManager(sys.argv[1], keep=2)
    big = np.zeros(2_000_000, np.float32)
    for step in range(10_000):
        big[:] = step
        manager.save(step, {"big": big, "step": step}, {"step_copy": step})
        print(step, flush=True)
        sys.argv[3] = str(int(sys.argv[3]) - 1)
""")


def _kill_writer(run_dir: Path, how: str) -> None:
    """Start a process saving 8 MB checkpoints back to back; SIGKILL it after two saves,
    either mid-write (``"stall"``) or at a random moment (``"random"``)."""
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(run_dir), how, "2"],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert [proc.stdout.readline() for _ in range(2)] == ["0\n", "1\n"], "writer died"
        if how == "stall":
            assert proc.stdout.readline() == "mid-write\n"
        else:
            time.sleep(np.random.default_rng().uniform(0.0, 0.3))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _check_run_dir(run_dir: Path) -> list[Path]:
    found = CheckpointManager(run_dir, keep=2).all()
    assert found
    template = {"big": np.zeros(2_000_000, np.float32), "step": 0}
    for path in found:
        tree, meta = load(path, template)
        assert tree["step"] == meta["step"] == meta["step_copy"]
        assert np.all(tree["big"] == tree["step"])
    return found


@pytest.mark.timeout(120)
def test_sigkill_mid_write_leaves_previous_checkpoints(tmp_path):
    """A real SIGKILL with half a checkpoint on disk: the two complete ones are listed and
    load; the partial file is a temp file nobody lists."""
    _kill_writer(tmp_path, "stall")
    assert [p.name for p in _check_run_dir(tmp_path)] == ["ckpt_00000000.npz",
                                                          "ckpt_00000001.npz"]
    stray = [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert len(stray) == 1 and stray[0].startswith(".ckpt_00000002.npz.tmp-")


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("trial", range(10))
def test_sigkill_at_random_moments(tmp_path, trial):
    """SIGKILL at random moments (about half land mid-write): all listed checkpoints load."""
    _kill_writer(tmp_path, "random")
    _check_run_dir(tmp_path)


# ----------------------------------------------------------------------- selectors
def test_selector_round_trip_and_wrong_length(tmp_path, runner):
    theta = selector_theta(runner.actor)
    path = save_selector(tmp_path / "best_selector.npz", theta, {"fitness": 0.75, "round": 3})
    loaded, meta = load_selector(path, expected_size=theta.shape[0])
    assert loaded.dtype == theta.dtype
    assert np.asarray(loaded).tobytes() == np.asarray(theta).tobytes()
    assert meta == {"fitness": 0.75, "round": 3}
    with pytest.raises(CheckpointError, match=f"holds {theta.shape[0]} parameters; the actor's "
                                              f"selector has {theta.shape[0] + 1}"):
        load_selector(path, expected_size=theta.shape[0] + 1)
    with pytest.raises(CheckpointError, match="use load_selector"):
        load(path, {"theta": theta})
    with pytest.raises(CheckpointError, match="not a selector file"):
        load_selector(save(tmp_path / "ckpt.npz", {"theta": theta}))
    with pytest.raises(ValueError, match="1-D"):
        save_selector(tmp_path / "bad.npz", jnp.zeros((2, 2)))


def test_unserialisable_metadata_is_refused_before_writing(tmp_path):
    with pytest.raises(TypeError, match=r"metadata\['fn'\] cannot be stored as JSON"):
        save(tmp_path / "ckpt.npz", {}, {"fn": print})
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match=r"leaf \['n'\]: Python int 2\*\*70|does not fit"):
        save(tmp_path / "ckpt.npz", {"n": 2**70})
    assert not list(tmp_path.iterdir())
