"""Checkpoints: exact round trips, refusals with named causes, damaged, hostile and
oversized files (bounded time and memory), crash atomicity, format-1 conversion. Tiny
networks and hand-built env states keep XLA compiles out."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zipfile
import zlib
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import safetensors
import safetensors.numpy
from gymnasium import spaces
from helpers import read_st, write_st

from agents import ActorConfig, CentralCritic, CriticConfig, FeudalActor
from envs.coverage import CoverageState
from feudal_es import _ckpt_reader, _ckpt_writer
from feudal_es.atomic import atomic_write, atomic_write_text
from feudal_es.checkpoint import (
    SUFFIX,
    CheckpointError,
    CheckpointManager,
    convert_v1,
    load,
    load_selector,
    read_metadata,
    save,
    save_selector,
)
from feudal_es.es import ESConfig, ESState
from feudal_es.es import init as es_init
from feudal_es.theta import selector_theta

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


def document(header: dict) -> dict:
    return json.loads(header["__metadata__"]["feudal_es"])


def with_document(header: dict, doc: dict) -> dict:
    return {**header, "__metadata__": {"feudal_es": json.dumps(doc)}}


def document_sha256(doc: dict) -> str:
    """The documented ``document_sha256``: canonical JSON of the document sans checksums."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
                          ).hexdigest()


# --------------------------------------------------------------------------- round trip
def test_round_trip_is_bit_identical(tmp_path, runner):
    path = save(tmp_path / f"ckpt{SUFFIX}", runner, META)
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
    restored, _ = load(save(tmp_path / f"ckpt{SUFFIX}", runner), template)
    step(restored)
    assert len(traces) == 1


def test_abstract_template(tmp_path, runner):
    """A template from eqx.filter_eval_shape (no compute) is filled the same way; numpy
    leaves come back as jax arrays. (eval_shape turns float64 into float32 without x64, so
    such a template refuses a float64 leaf, as it should.)"""
    drop_f64 = lambda r: r._replace(extras={k: v for k, v in r.extras.items() if k != "np_f64"})
    path = save(tmp_path / f"ckpt{SUFFIX}", drop_f64(runner))
    abstract = eqx.filter_eval_shape(lambda: drop_f64(make_runner()))
    assert isinstance(abstract.key, jax.ShapeDtypeStruct)
    restored, _ = load(path, abstract)
    as_jax = lambda x: jnp.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x
    assert_bit_identical(restored, jax.tree.map(as_jax, drop_f64(runner)))


def test_file_layout(tmp_path, runner):
    """One safetensors file: a tensor per stored leaf, named by its path (raw bits for
    dtypes safetensors cannot name), and the JSON document in ``__metadata__``; plain
    safetensors reads every tensor."""
    path = save(tmp_path / f"ckpt{SUFFIX}", runner, META)
    header, _ = read_st(path)
    assert set(header["__metadata__"]) == {"feudal_es"}
    doc = document(header)
    assert doc["format"] == "feudal-es" and doc["format_version"] == 2 and doc["kind"] == "tree"
    assert doc["checksum"]["document_sha256"] == document_sha256(doc)
    assert set(doc["checksum"]) == {"document_sha256", "sha256"}
    assert doc["metadata"] == json.loads(json.dumps({**META, "seed": 7}))
    flat = jax.tree_util.tree_flatten_with_path(runner)[0]
    stored = {jax.tree_util.keystr(p): x for p, x in flat
              if eqx.is_array(x) or isinstance(x, (int, float, complex, np.generic))}
    assert set(header) - {"__metadata__"} == set(stored)
    assert [e["path"] for e in doc["leaves"]] == [jax.tree_util.keystr(p) for p, _ in flat]
    table = {e["path"]: e for e in doc["leaves"]}
    expected = {".extras['bf16']": ("U16", [3], "bfloat16"),  # raw bits
                ".extras['py_complex']": ("U64", [2], "py_complex"),  # complex128 bits
                ".extras['big_int']": ("I64", [], "py_int"),
                ".done": ("BOOL", [], "py_bool"),
                ".key": ("U32", [2], "key<fry>"),  # key data
                ".keys": ("U32", [4, 2], "key<fry>")}
    for name, (code, shape, dtype) in expected.items():
        assert (header[name]["dtype"], header[name]["shape"], table[name]["dtype"]) == (
            code, shape, dtype)
    assert table[".key"]["key_impl"] == "threefry2x32" and table[".extras['lr']"]["weak_type"]
    with safetensors.safe_open(path, framework="numpy") as f:
        assert set(f.keys()) == set(stored)
        for name in (".extras['mask']", ".extras['u8']", ".extras['nan']", ".round"):
            assert f.get_tensor(name).tobytes() == np.asarray(stored[name]).tobytes()
        bits = f.get_tensor(".extras['bf16']")
    assert bits.tobytes() == np.asarray(runner.extras["bf16"]).tobytes()
    assert not list(tmp_path.glob(".*tmp*"))


def test_atomic_write(tmp_path):
    """The project's one atomic writer: replaces whole files, leaves no temp file on error,
    lets OSError through unchanged."""
    path = atomic_write_text(tmp_path / "sub" / "config.json", "{}\n")
    assert path.read_text() == "{}\n" and path.stat().st_mode & 0o777 == 0o644

    def fail(f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as err:
        atomic_write(path, fail)
    assert type(err.value) is OSError and err.value.errno == errno.ENOSPC
    assert path.read_text() == "{}\n" and os.listdir(path.parent) == ["config.json"]


# ------------------------------------------------------------------------ refusals
def test_mismatched_architecture_names_leaf_and_shapes(tmp_path, runner):
    path = save(tmp_path / f"ckpt{SUFFIX}", runner, META)
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
    flag = save(tmp_path / f"flag{SUFFIX}", {}, {"done": 1, "lr": 1})
    with pytest.raises(CheckpointError, match="done: checkpoint has 1, expected True"):
        load(flag, {}, expect={"done": True})
    load(flag, {}, expect={"lr": 1.0, "done": 1})  # numbers compare by value


def test_missing_and_extra_leaves_are_counted(tmp_path):
    path = save(tmp_path / f"ckpt{SUFFIX}", {"a": jnp.zeros(2), "b": 1, "c": jnp.ones((2, 2))})
    with pytest.raises(CheckpointError, match=r"leaf \['d'\]: template expects float32\[3\], "
                                              r"checkpoint has <absent>.*1 template leaves are "
                                              r"missing .* 2 checkpoint leaves are extra"):
        load(path, {"a": jnp.zeros(2), "d": jnp.zeros(3)})
    with pytest.raises(CheckpointError, match=r"leaf \['b'\]: template expects float32\[\], "
                                              r"checkpoint has py_int\[\]"):
        load(path, {"a": jnp.zeros(2), "b": jnp.zeros(()), "c": jnp.ones((2, 2))})


def test_refusals_come_before_any_tensor_is_read(tmp_path, runner, monkeypatch):
    """Header, kind, expect, template and selector size are all checked on the header."""
    path = save(tmp_path / f"ckpt{SUFFIX}", runner, META)
    sel = save_selector(tmp_path / f"sel{SUFFIX}", jnp.zeros(5))

    def no_reading(*args, **kwargs):
        raise AssertionError("a tensor was read")

    monkeypatch.setattr(_ckpt_reader.safetensors, "safe_open", no_reading)
    assert read_metadata(path)["env_id"] == META["env_id"]
    for refused in (lambda: load(path, make_runner(WIDER)),
                    lambda: load(path, runner, expect={"env_id": "other"}),
                    lambda: load(sel, {"theta": jnp.zeros(5)}),
                    lambda: load_selector(path),
                    lambda: load_selector(sel, expected_size=6)):
        with pytest.raises(CheckpointError):
            refused()


def test_format_version_mismatch_names_both(tmp_path, monkeypatch):
    monkeypatch.setattr(_ckpt_writer, "FORMAT_VERSION", 3)  # a file of a future version
    path = save(tmp_path / f"future{SUFFIX}", {"a": jnp.zeros(2)})
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="format version 3; this feudal-es reads format "
                                              "version 2"):
        load(path, {"a": jnp.zeros(2)})


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match=r"no checkpoint at .* does not exist"):
        load(tmp_path / f"nope{SUFFIX}", {})
    (tmp_path / "cfg.json").write_text("{}")
    with pytest.raises(CheckpointError, match="not a feudal-es checkpoint"):
        load(tmp_path / "cfg.json", {})
    (tmp_path / "cfg2.json").write_text('{"a": [1, 2, 3], "b": "c"}')
    with pytest.raises(CheckpointError, match="not a feudal-es checkpoint"):
        read_metadata(tmp_path / "cfg2.json")
    np.savez(tmp_path / "plain.npz", a=np.zeros(2))  # a numpy archive, but not ours
    with pytest.raises(CheckpointError, match="not a feudal-es checkpoint"):
        load(tmp_path / "plain.npz", {"a": jnp.zeros(2)})
    plain = tmp_path / f"plain{SUFFIX}"  # a safetensors file, but not ours
    safetensors.numpy.save_file({"['a']": np.zeros(2, np.float32)}, plain, {"format": "pt"})
    with pytest.raises(CheckpointError, match="not a feudal-es checkpoint"):
        load(plain, {"a": jnp.zeros(2)})
    (tmp_path / f"empty{SUFFIX}").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty"):
        load(tmp_path / f"empty{SUFFIX}", {})


# -------------------------------------------------------------------- damaged files
@pytest.mark.parametrize("keep", [0.0, 0.001, 0.1, 0.5, 0.9, 0.999])
def test_truncated_file(tmp_path, runner, keep):
    path = save(tmp_path / f"ckpt{SUFFIX}", runner)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match=r"truncated|corrupted|empty"):
        load(path, runner)


def test_flipped_array_byte_is_detected(tmp_path):
    tree = {"w": jnp.arange(1000, dtype=jnp.float32)}
    path = save(tmp_path / f"ckpt{SUFFIX}", tree)
    data = bytearray(path.read_bytes())
    at = data.index(np.arange(1000, dtype=np.float32).tobytes()) + 2001
    data[at] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted: sha256"):
        load(path, tree)


def test_sha256_catches_a_valid_safetensors_rewrite(tmp_path):
    """Other values in a well-formed safetensors file (safetensors reads it happily): only
    the document's sha256 can tell."""
    tree = {"w": jnp.arange(8, dtype=jnp.float32)}
    path = save(tmp_path / f"ckpt{SUFFIX}", tree)
    header, body = read_st(path)
    write_st(path, header, (np.arange(8, dtype=np.float32) + 1).tobytes())
    assert len(body) == 32
    assert safetensors.numpy.load_file(path)["['w']"][0] == 1.0
    with pytest.raises(CheckpointError, match="corrupted: sha256 of its metadata and arrays"):
        load(path, tree)


def test_rewritten_metadata_is_reported_as_corrupted(tmp_path):
    """Edit the stored config (here: the env id, to name a callable) and re-encode a valid
    safetensors header: every loader, read_metadata included, reports the file corrupted,
    so nothing is built from the edited config."""
    run = CheckpointManager(tmp_path / "run")
    ckpt = run.save(1, {"w": jnp.ones(3)}, META)
    sel = save_selector(tmp_path / f"sel{SUFFIX}", jnp.ones(3), META)
    for path in (ckpt, sel):
        header, body = read_st(path)
        doc = document(header)
        doc["metadata"]["env_id"] = "subprocess:getoutput"
        write_st(path, with_document(header, doc), body)
        with safetensors.safe_open(path, framework="numpy") as f:  # a valid file
            assert "subprocess:getoutput" in f.metadata()["feudal_es"]
    for refused in (lambda: load(ckpt, {"w": jnp.ones(3)}), lambda: read_metadata(ckpt),
                    lambda: read_metadata(sel), lambda: load_selector(sel),
                    lambda: run.load_latest({"w": jnp.ones(3)})):
        with pytest.raises(CheckpointError, match="corrupted: sha256 of its metadata document "
                                                  r".*\(damaged or edited\)"):
            refused()
    # document_sha256 recomputed too: the header check passes, the full sha256 does not
    header, body = read_st(ckpt)
    doc = document(header)
    doc["checksum"]["document_sha256"] = document_sha256(doc)
    write_st(ckpt, with_document(header, doc), body)
    assert read_metadata(ckpt)["env_id"] == "subprocess:getoutput"  # header only: see docs
    with pytest.raises(CheckpointError, match="corrupted: sha256 of its metadata and arrays"):
        load(ckpt, {"w": jnp.ones(3)})


def test_every_flipped_byte_is_refused_or_harmless(tmp_path):
    """Flip each byte of a small checkpoint: the load raises CheckpointError, never a
    library traceback, never silently different values. In this format no flip is
    harmless: the length field is checked against the file, a flipped header byte (the
    padding's spaces included) is invalid UTF-8, and the data is under the sha256."""
    tree = {"w": jnp.arange(6, dtype=jnp.float32), "k": jax.random.key(1), "n": 3}
    path = save(tmp_path / f"ckpt{SUFFIX}", tree, {"seed": 1})
    data = path.read_bytes()
    bad = tmp_path / f"bad{SUFFIX}"
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        bad.write_bytes(bytes(flipped))
        with pytest.raises(CheckpointError):
            load(bad, tree)


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


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=True)
    return buf.getvalue()


def write_v1(path: Path, leaves: dict, metadata: dict | None = None, kind: str = "tree",
             swap: dict | None = None) -> Path:
    """A format-1 file as older feudal-es wrote it: a stored zip of ``.npy`` members, one
    per leaf (``leaves``: path -> (stored array or None, leaf-table entry)), plus the
    JSON member ``__feudal_es__.npy`` with the sha256 of the arrays. ``swap`` replaces
    member bytes after the checksum is taken (hostile files)."""
    table, members, h = [], {}, hashlib.sha256()
    for p, (arr, entry) in leaves.items():
        table.append({"path": p, **entry})
        if arr is not None:
            members[f"{p}.npy"] = npy(arr)
            h.update(json.dumps([f"{p}.npy", arr.dtype.str, list(arr.shape)]).encode())
            h.update(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
    header = {"format": "feudal-es", "format_version": 1, "kind": kind,
              "created": "2026-01-30T02:15:00+00:00", "jax_version": "0.4.38",
              "checksum": {"sha256": h.hexdigest()}, "leaves": table, "metadata": metadata or {}}
    members = {"__feudal_es__.npy": npy(np.frombuffer(json.dumps(header).encode(), np.uint8)),
               **members, **(swap or {})}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


V1_W = {"['w']": (np.zeros(3, np.float32), {"dtype": "float32", "shape": [3],
                                            "weak_type": False})}


def test_crafted_files_do_not_execute_code(tmp_path):
    """Pickled payloads in every place a reader might look: loaders and the format-1
    converter refuse them, and never run them."""
    marker = tmp_path / "pwned"
    crafted = {  # format 1 with a pickled leaf (header and checksum kept) / header
        "leaf.npz": write_v1(tmp_path / "leaf.npz", V1_W,
                             swap={"['w'].npy": npy(_object_array(marker))}),
        "header.npz": write_v1(tmp_path / "header.npz", V1_W,
                               swap={"__feudal_es__.npy": npy(_object_array(marker))}),
    }
    good = save(tmp_path / f"good{SUFFIX}", {"w": jnp.zeros(3)})
    header, body = read_st(good)  # safetensors names no object dtype; try one anyway
    header["['w']"]["dtype"] = "O"
    crafted["object_dtype"] = write_st(tmp_path / f"object{SUFFIX}", header, body)
    (tmp_path / f"raw{SUFFIX}").write_bytes(pickle.dumps(_Payload(marker)))
    crafted["raw"] = tmp_path / f"raw{SUFFIX}"
    np.save(tmp_path / "obj.npy", _object_array(marker), allow_pickle=True)
    crafted["obj.npy"] = tmp_path / "obj.npy"
    for name, path in crafted.items():
        for attempt in (lambda p: load(p, {"w": jnp.zeros(3)}), lambda p: load_selector(p, 3),
                        read_metadata, lambda p: convert_v1(p, tmp_path / f"out{SUFFIX}")):
            with pytest.raises(CheckpointError):
                attempt(path)
            assert not marker.exists(), (name, "executed code")
    assert not (tmp_path / f"out{SUFFIX}").exists()
    with pytest.raises(CheckpointError, match=r"holds object, not numbers \(pickled objects"):
        convert_v1(crafted["leaf.npz"], tmp_path / f"out{SUFFIX}")
    with pytest.raises(CheckpointError, match="not a feudal-es checkpoint"):
        load(crafted["raw"], {})
    # the payload is live: an unsafe reader would have run it
    with np.load(crafted["leaf.npz"], allow_pickle=True) as npz:
        npz["['w']"]
    assert marker.exists()


# ----------------------------------------------------------- oversized ("bomb") files
_ZEROS = 64 * 2**20  # bytes per repeated deflate chunk
BOMB_BYTES = 24 * _ZEROS  # 1.5 GiB once inflated


def deflated_zeros(head: bytes, zeros: int) -> tuple[bytes, int]:
    """Raw deflate stream and CRC-32 of ``head`` + ``zeros`` zero bytes (a multiple of 64
    MiB), built without compressing them all: after a full flush the compressor's state
    is reset, so each 64 MiB chunk compresses to the same bytes, computed once."""
    chunk = bytes(_ZEROS)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(head)
    for _ in range(zeros // _ZEROS):
        crc = zlib.crc32(chunk, crc)
    return start + block * (zeros // _ZEROS) + c.flush(), crc


def write_zip(path: Path, members: dict[str, tuple[bytes, int, int, int]]) -> Path:
    """A zip written byte by byte: name -> (data as stored, method, crc32, size)."""
    local, central = bytearray(), bytearray()
    for name, (data, method, crc, size) in members.items():
        n = name.encode()
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21,
                               crc, len(data), size, len(n), 0, 0, 0, 0, 0, len(local)) + n
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc,
                             len(data), size, len(n), 0) + n + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central),
                      len(local), 0)
    path.write_bytes(bytes(local + central + end))
    return path


def stored(data: bytes) -> tuple[bytes, int, int, int]:
    return data, zipfile.ZIP_STORED, zlib.crc32(data), len(data)


def npy_header(descr: str, shape: tuple) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue()


def make_bombs(d: Path) -> dict[str, tuple[Path, str]]:
    """Hostile files, each -> (path, what the refusal must say)."""
    n = BOMB_BYTES // 4
    w = {"dtype": "float32", "shape": [n], "weak_type": False}
    v1_header = {"format": "feudal-es", "format_version": 1, "kind": "tree", "checksum": {},
                 "leaves": [{"path": "['w']", **w}], "metadata": {}}
    blob = json.dumps(v1_header).encode()
    head = stored(npy_header("|u1", (len(blob),)) + blob)
    leaf = deflated_zeros(npy_header("<f4", (n,)), BOMB_BYTES)
    big_header = deflated_zeros(npy_header("|u1", (BOMB_BYTES,)), BOMB_BYTES)
    bombs = {
        # (a) format 1, one deflated member inflating to 1.5 GiB: a leaf / the JSON header
        "npz_leaf": (write_zip(d / "npz_leaf.npz", {
            "__feudal_es__.npy": head,
            "['w'].npy": (leaf[0], zipfile.ZIP_DEFLATED, leaf[1], len(npy_header("<f4", (n,)))
                          + BOMB_BYTES)}), "format-1"),
        "npz_header": (write_zip(d / "npz_header.npz", {
            "__feudal_es__.npy": (big_header[0], zipfile.ZIP_DEFLATED, big_header[1],
                                  len(npy_header("|u1", (BOMB_BYTES,))) + BOMB_BYTES)}),
                       "format-1"),
        # format 1, stored, but a .npy header declaring 2**40 floats over 16 bytes
        "npz_lying": (write_zip(d / "npz_lying.npz", {
            "__feudal_es__.npy": head,
            "['w'].npy": stored(npy_header("<f4", (2**40,)) + bytes(16))}), "format-1"),
    }
    # (b) safetensors declaring 2**40 floats (4 TiB) over a 16-byte body; the document is
    # consistent with it and its document_sha256 valid
    doc = {"format": "feudal-es", "format_version": 2, "kind": "tree", "leaves": [
        {"path": "['w']", "dtype": "float32", "shape": [2**40], "weak_type": False}],
        "metadata": {}}
    doc["checksum"] = {"document_sha256": document_sha256(doc), "sha256": "0" * 64}
    for name, offsets, cause in (("huge_span", [0, 2**42], "do not tile"),
                                 ("huge_shape", [0, 16], "declares F32")):
        header = with_document({"['w']": {"dtype": "F32", "shape": [2**40],
                                          "data_offsets": offsets}}, doc)
        bombs[name] = (write_st(d / f"{name}{SUFFIX}", header, bytes(16)), cause)
    # (c) a header length field claiming 2**60 bytes, 1 GiB, 32 MiB (under the cap)
    for name, claim, cause in (("len_2_60", 2**60, "header claims"),
                               ("len_1gib", 2**30, "header claims"),
                               ("len_32mib", 2**25, "truncated")):
        path = d / f"{name}{SUFFIX}"
        path.write_bytes(claim.to_bytes(8, "little") + b'{"__metadata__": {}}' + bytes(100))
        bombs[name] = (path, cause)
    return bombs


_BOMB_RUNNER = textwrap.dedent(r"""
    import contextlib, io, json, re, shutil, sys, time
    from pathlib import Path
    import jax.numpy as jnp
    from feudal_es import checkpoint, cli
    from feudal_es.checkpoint import CheckpointError, CheckpointManager
    from feudal_es.trainer import ESTrainer

    work, bombs = Path(sys.argv[1]), json.loads(sys.argv[2])
    template = {"w": jnp.zeros(3)}

    def command(*argv):  # feudal-es ARGV in this process; its error line as CheckpointError
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
        if code != 0:
            raise CheckpointError(err.getvalue())

    def loaders(path, run):
        out = work / "converted.safetensors"
        return {"load": lambda: checkpoint.load(path, template),
                "read_metadata": lambda: checkpoint.read_metadata(path),
                "load_selector": lambda: checkpoint.load_selector(path),
                "load_latest": lambda: CheckpointManager(run).load_latest(template),
                "from_checkpoint": lambda: ESTrainer.from_checkpoint(path),
                "cli_eval": lambda: command("eval", str(run)),
                "cli_resume": lambda: command("train", "--resume", str(run), "--no-progress"),
                "convert_v1": lambda: checkpoint.convert_v1(path, out)}

    # warm-up: each loader once on a good file (lazy imports, first-call allocations)
    good = CheckpointManager(work / "good").save(1, template)
    checkpoint.load(good, template), checkpoint.read_metadata(good)
    CheckpointManager(work / "good").load_latest(template)
    checkpoint.load_selector(checkpoint.save_selector(work / "sel.safetensors", jnp.zeros(3)))
    for call in (lambda: ESTrainer.from_checkpoint(good), lambda: command("eval", str(good)),
                 lambda: command("train", "--resume", str(work / "good"))):
        try:  # no trainer config in this file: refused after its header was read
            call()
        except CheckpointError:
            pass
    # extra memory = peak resident size from here on (VmHWM) - resident size now (VmRSS).
    # The peak is first reset to the resident size (Linux clear_refs), else the warm-up's
    # peak would hide allocations below it; ru_maxrss cannot be reset (it keeps the peak
    # of exited threads), so VmHWM is read instead
    def status(field):
        with open("/proc/self/status") as f:
            return int(re.search(field + r":\s+(\d+) kB", f.read()).group(1)) * 1024

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base, results = status("VmRSS"), []
    for name, path in bombs.items():
        path = Path(path)
        run = work / ("run_" + name)
        run.mkdir()
        shutil.copy(path, run / "ckpt_00000001.safetensors")
        for loader, call in loaders(path, run).items():
            if loader == "convert_v1" and path.suffix != ".npz":
                continue
            t0 = time.perf_counter()
            try:
                call()
                message = None
            except CheckpointError as e:
                message = str(e)
            results.append([name, loader, time.perf_counter() - t0, message])
    growth = status("VmHWM") - base
    control = bytearray(200 * 2**20)  # the probe sees an allocation of this size
    print(json.dumps({"growth": growth, "control": status("VmHWM") - base,
                      "results": results}))
""")


@pytest.mark.timeout(120)
def test_oversized_files_are_refused_in_bounded_time_and_memory(tmp_path):
    """Files built to make a reader allocate: a format-1 member inflating to 1.5 GiB (as a
    leaf, as the header), .npy / safetensors headers declaring 2**40 floats over a few
    bytes, header lengths of 2**60, 1 GiB, 32 MiB. Every loader — the checkpoint module's,
    ``ESTrainer.from_checkpoint``, ``feudal-es eval`` and ``feudal-es train --resume`` —
    refuses each in < 5 s, naming the file and the cause, with < 100 MB of extra peak
    memory (one subprocess)."""
    bombs = make_bombs(tmp_path)
    with zipfile.ZipFile(bombs["npz_leaf"][0]) as zf:  # the bomb is real: 1.5 GiB inside
        assert zf.getinfo("['w'].npy").file_size > BOMB_BYTES
        with zf.open("['w'].npy") as member:
            assert member.read(4096)[:6] == b"\x93NUMPY"
    assert all(path.stat().st_size < 4 * 2**20 for path, _ in bombs.values())
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", _BOMB_RUNNER, str(work),
         json.dumps({k: str(p) for k, (p, _) in bombs.items()})],
        capture_output=True, text=True, cwd=REPO, timeout=110)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert len(report["results"]) == 3 * 8 + 5 * 7
    for name, loader, seconds, message in report["results"]:
        path, cause = bombs[name]
        assert message is not None, (name, loader, "accepted")
        where = (path.name if loader in ("load", "read_metadata", "load_selector",
                                         "from_checkpoint", "convert_v1")
                 else "ckpt_00000001.safetensors")
        assert where in message, (name, loader, message)
        if loader == "convert_v1":
            assert "cannot convert" in message and (
                "compressed" in message if name != "npz_lying"
                else "declares float32[1099511627776]" in message), message
        else:
            assert cause in message, (name, loader, message)
        assert seconds < 5, (name, loader, seconds)
    assert report["growth"] < 100 * 2**20, report["growth"]
    assert report["control"] > 150 * 2**20, report["control"]


# --------------------------------------------------------------------- format 1 (.npz)
def test_format_1_files_are_refused_and_convert(tmp_path):
    """A format-1 file (as older feudal-es wrote it): every loader refuses it with the
    convert command; ``feudal-es convert`` and convert_v1 rewrite it
    as format 2 with the same bits, leaf kinds and metadata."""
    key = jax.random.key(1)
    bf16 = np.array([1.5, -2.25], jnp.bfloat16)
    leaves = {
        "['w']": (np.arange(3, dtype=np.float32),
                  {"dtype": "float32", "shape": [3], "weak_type": False}),
        "['bf']": (bf16.view(np.uint16), {"dtype": "bfloat16", "shape": [2],
                                          "weak_type": False}),
        "['k']": (np.asarray(jax.random.key_data(key)),
                  {"dtype": "key<fry>", "shape": [], "key_impl": "threefry2x32"}),
        "['lr']": (np.asarray(0.5, np.float32), {"dtype": "float32", "shape": [],
                                                  "weak_type": True}),
        "['n']": (np.asarray(2**40, np.int64), {"dtype": "py_int", "shape": []}),
        "['z']": (np.asarray(1 - 2j, np.complex128), {"dtype": "py_complex", "shape": []}),
        "['fn']": (None, {"dtype": None, "shape": None, "type": "PjitFunction"}),
    }
    run = tmp_path / "run"
    run.mkdir()
    old = write_v1(run / "ckpt_00000007.npz", leaves, {"env_id": "feudal_es/Coverage-v0"})
    sel = write_v1(tmp_path / "best_selector.npz", {"['theta']": (
        np.arange(4, dtype=np.float32), {"dtype": "float32", "shape": [4],
                                         "weak_type": False})}, {"round": 3}, kind="selector")
    template = {"w": jnp.zeros(3), "bf": jnp.zeros(2, jnp.bfloat16), "k": jax.random.key(0),
                "lr": jnp.asarray(0.0), "n": 0, "z": 0j, "fn": jax.nn.relu}
    convert = f"feudal-es convert {old} {old.with_suffix(SUFFIX)}"
    for refused in (lambda: load(old, template), lambda: read_metadata(old),
                    lambda: load_selector(sel)):
        with pytest.raises(CheckpointError, match=r"is a format-1 \(\.npz\) file of an older "
                                                  r"feudal-es.*convert it with: feudal-es convert"):
            refused()
    manager = CheckpointManager(run)
    assert manager.all() == [] and manager.legacy() == [old]
    with pytest.raises(CheckpointError) as err:
        manager.load_latest(template)
    assert "only format-1 ones of an older feudal-es (ckpt_00000007.npz)" in str(err.value)
    assert str(err.value).endswith(convert)
    proc = subprocess.run([sys.executable, "-m", "feudal_es.cli", "convert", str(old)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    tree, meta = manager.load_latest(template)
    assert meta == {"env_id": "feudal_es/Coverage-v0"}
    expected = {"w": jnp.arange(3, dtype=jnp.float32), "bf": jnp.asarray(bf16), "k": key,
                "lr": jnp.asarray(0.5), "n": 2**40, "z": 1 - 2j, "fn": jax.nn.relu}
    assert_bit_identical(tree, expected)
    theta, meta = load_selector(convert_v1(sel), expected_size=4)
    assert np.array_equal(theta, np.arange(4)) and meta == {"round": 3}
    with pytest.raises(CheckpointError, match="exists; not overwriting"):
        convert_v1(sel)
    damaged = write_v1(tmp_path / "damaged.npz", leaves, swap={"['w'].npy": npy(
        np.arange(3, dtype=np.float32) + 1)})
    with pytest.raises(CheckpointError, match=r"cannot convert .*damaged\.npz: sha256"):
        convert_v1(damaged)
    proc = subprocess.run([sys.executable, "-m", "feudal_es.cli", "convert", str(damaged)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and "cannot convert" in proc.stderr
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------- atomicity, manager
@pytest.mark.parametrize("failure", [RuntimeError("simulated crash"),
                                     OSError(errno.ENOSPC, "No space left on device")])
def test_crash_mid_write_keeps_previous_checkpoint(tmp_path, runner, monkeypatch, failure):
    """A write failing half-way (an exception, a full disk) leaves the previous checkpoint
    intact and no temp file; the OSError reaches the caller unchanged."""
    manager = CheckpointManager(tmp_path / "run", keep=3)
    first = manager.save(1, runner, META)

    real = _ckpt_writer.atomic_write

    def fail_halfway(path, write):
        def half(f):
            buf = io.BytesIO()
            write(buf)
            f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            raise failure

        return real(path, half)

    monkeypatch.setattr(_ckpt_writer, "atomic_write", fail_halfway)
    with pytest.raises(type(failure)) as err:
        manager.save(2, make_runner(seed=3), META)
    assert err.value is failure
    with pytest.raises(type(failure)):  # over an existing file too
        manager.save(1, make_runner(seed=3), META)
    monkeypatch.undo()
    assert manager.all() == [first] and manager.latest() == first
    assert os.listdir(manager.run_dir) == [first.name]  # the temp file was removed
    restored, meta = manager.load_latest(make_runner(seed=1), expect={"step": 1})
    assert_bit_identical(restored, runner)
    assert meta["step"] == 1 and meta["env_id"] == META["env_id"]
    # what a SIGKILL leaves (a temp file) is never listed, and the next save clears it
    stray = manager.run_dir / f".ckpt_00000002{SUFFIX}.tmp-abc123"
    stray.write_bytes(first.read_bytes()[:100])
    assert manager.all() == [first]
    manager.save(2, runner)
    assert not stray.exists() and [p.name for p in manager.all()] == [
        f"ckpt_00000001{SUFFIX}", f"ckpt_00000002{SUFFIX}"]


def test_keep_prunes_oldest_and_sorts_by_step(tmp_path):
    manager = CheckpointManager(tmp_path, keep=3)
    assert manager.latest() is None and manager.all() == []
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        manager.load_latest({})
    for step in (5, 1, 100, 7, 10**9):
        manager.save(step, {"step": jnp.asarray(step)})
    assert [int(p.name[5:-len(SUFFIX)]) for p in manager.all()] == [7, 100, 10**9]
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
                                              r"ckpt_00000001\.safetensors"):
        manager.load_latest({"a": jnp.zeros(2)})
    assert np.array_equal(load(manager.path(1), {"a": jnp.zeros(2)})[0]["a"], np.zeros(2))


_WRITER = textwrap.dedent("""
    import io, sys, time
    import numpy as np
    from feudal_es import checkpoint
    stall = sys.argv[2] == "stall"
    if stall:  # from the 3rd save on: write half the bytes, say so, and hang there
        from feudal_es import _ckpt_writer
        real = _ckpt_writer.atomic_write
        def half_then_hang(path, write):
            if int(sys.argv[3]) > 0:
                return real(path, write)
            def half(f):
                buf = io.BytesIO()
                write(buf)
                f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
                f.flush()
                print("mid-write", flush=True)
                time.sleep(60)  # the parent kills it long before
            return real(path, half)
        _ckpt_writer.atomic_write = half_then_hang
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
    assert [p.name for p in _check_run_dir(tmp_path)] == [f"ckpt_00000000{SUFFIX}",
                                                          f"ckpt_00000001{SUFFIX}"]
    stray = [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert len(stray) == 1 and stray[0].startswith(f".ckpt_00000002{SUFFIX}.tmp-")


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
    path = save_selector(tmp_path / f"best_selector{SUFFIX}", theta, {"fitness": 0.75,
                                                                      "round": 3})
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
        load_selector(save(tmp_path / f"ckpt{SUFFIX}", {"theta": theta}))
    with pytest.raises(ValueError, match="1-D"):
        save_selector(tmp_path / f"bad{SUFFIX}", jnp.zeros((2, 2)))
    bf16 = jnp.arange(5, dtype=jnp.bfloat16)  # raw bits on disk, bfloat16 back
    loaded, _ = load_selector(save_selector(tmp_path / f"bf16{SUFFIX}", bf16))
    assert loaded.dtype == jnp.bfloat16 and np.array_equal(loaded, bf16)


def test_unserialisable_metadata_is_refused_before_writing(tmp_path):
    with pytest.raises(TypeError, match=r"metadata\['fn'\] cannot be stored as JSON"):
        save(tmp_path / f"ckpt{SUFFIX}", {}, {"fn": print})
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match=r"leaf \['n'\]: Python int 2\*\*70|does not fit"):
        save(tmp_path / f"ckpt{SUFFIX}", {"n": 2**70})
    with pytest.raises(ValueError, match=r"leaf \"\['s'\]\": dtype <U3 is not numeric"):
        save(tmp_path / f"ckpt{SUFFIX}", {"s": np.array(["abc"])})
    assert not list(tmp_path.iterdir())
