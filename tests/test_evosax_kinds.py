"""evosax's strategies as ES kinds (``ESConfig(kind="evosax:...")``) through the project's
own ask / tell / generation loop: OpenAI-ES of evosax against the built-in ``nes`` (the
same noise, ranks and Adam), the mask, non-finite fitness, the checkpoint round trip, and
clear errors for names that are not offered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from feudal_es.evolution import ESConfig, ask, generation, host_generation, init, tell

pytest.importorskip("evosax.algorithms", reason="evosax >= 0.3 (the evosax extra)")
TARGET = jnp.asarray([0.5, -1.0, 0.25, 2.0])


def sphere(pop, key):
    return -jnp.sum(jnp.square(pop - TARGET), axis=1)


def run(cfg, gens=4, mask=None, seed=0):
    step = jax.jit(lambda k, s: generation(k, s, sphere, cfg, mask))
    state = init(jnp.zeros(4), cfg)
    for k in jax.random.split(jax.random.key(seed), gens):
        state, info = step(k, state)
    return state, info


def test_evosax_open_es_is_our_nes():
    """Same key: the same antithetic noise (evosax draws [z; -z] as ``ask`` does), the same
    centered ranks (of the negated fitness) and the same Adam step."""
    ours, _ = run(ESConfig(pop_size=8, sigma=0.2, lr=0.05, optimizer="adam"))
    theirs, info = run(ESConfig(pop_size=8, sigma=0.2, lr=0.05, optimizer="adam",
                                kind="evosax:Open_ES"))
    np.testing.assert_allclose(np.asarray(theirs.mean), np.asarray(ours.mean), rtol=1e-5,
                               atol=1e-6)
    assert int(theirs.generation) == 4 and float(info["sigma"]) == pytest.approx(0.2)


@pytest.mark.heavy
def test_cma_es_moves_only_the_unmasked_coordinates_and_ranks_nan_last():
    cfg = ESConfig(pop_size=8, sigma=0.3, kind="evosax:CMA_ES")
    mask = jnp.asarray([1.0, 1.0, 0.0, 1.0])
    state, _ = run(cfg, gens=6, mask=mask)
    mean = np.asarray(state.mean)
    assert mean[2] == 0.0 and np.all(mean[[0, 1, 3]] != 0.0)
    assert np.sum((mean - np.asarray(TARGET))[[0, 1, 3]] ** 2) < np.sum(
        np.asarray(TARGET)[[0, 1, 3]] ** 2)  # closer to the optimum than the start
    # a NaN candidate is treated as the worst: the same update as giving it -1e9
    s0 = init(jnp.zeros(4), cfg)
    pop, noise = ask(jax.random.key(3), s0, cfg)
    fit = sphere(pop, None)
    a, _ = tell(s0, noise, fit.at[0].set(jnp.nan), cfg)
    b, _ = tell(s0, noise, fit.at[0].set(jnp.min(fit) - 1.0), cfg)
    np.testing.assert_array_equal(np.asarray(a.mean), np.asarray(b.mean))
    # all tied: no step (the loop's rule for every kind)
    c, _ = tell(s0, noise, jnp.zeros_like(fit), cfg)
    np.testing.assert_array_equal(np.asarray(c.mean), np.asarray(s0.mean))
    # the host path draws the same candidates and makes the same update
    h, _ = host_generation(jax.random.key(5), s0, lambda p: np.asarray(sphere(p, None)), cfg)
    j, _ = jax.jit(lambda k, s: generation(k, s, sphere, cfg))(jax.random.key(5), s0)
    # two programs (ask_jit + tell_jit vs one fused jit): equal up to float rounding
    np.testing.assert_allclose(np.asarray(h.mean), np.asarray(j.mean), rtol=1e-5, atol=1e-6)


def test_evosax_state_survives_a_checkpoint(tmp_path):
    from feudal_es.checkpoint import load, save

    cfg = ESConfig(pop_size=8, sigma=0.3, kind="evosax:CMA_ES")
    state, _ = run(cfg, gens=2)
    path = save(tmp_path / "es.safetensors", {"es": state})
    back = load(path, {"es": init(jnp.zeros(4), cfg)})[0]["es"]
    for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert type(back.opt_state) is type(state.opt_state)


@pytest.mark.parametrize("kind, match", [
    ("evosax:CMAES", "did you mean evosax:CMA_ES"),
    ("evosax:xNES", "no such evosax strategy here"),
    ("cma", "'evosax:<strategy>'"),
])
def test_unknown_kinds_are_refused_with_the_closest(kind, match):
    with pytest.raises(ValueError, match=match):
        ESConfig(kind=kind)


@pytest.mark.slow  # one compile per strategy (~10 s each on 2 cores)
@pytest.mark.parametrize("name", ["CMA_ES", "Sep_CMA_ES", "SNES", "PGPE", "ARS", "SimpleES"])
def test_every_offered_strategy_descends_the_sphere(name):
    cfg = ESConfig(pop_size=16, sigma=0.3, lr=0.05, optimizer="adam", kind=f"evosax:{name}")
    state, _ = run(cfg, gens=60)
    assert float(jnp.sum(jnp.square(state.mean - TARGET))) < 0.5 * float(
        jnp.sum(jnp.square(TARGET)))


def test_seeds_by_vmap_equal_seeds_one_by_one():
    """Under ``vmap`` (the seeds of a run) evosax's ask and tell run one row at a time: the
    batched program gives each seed what its own run gives (to float32 rounding: the
    fitness and the loop around evosax are vectorized in one and not in the other)."""
    cfg = ESConfig(pop_size=6, sigma=0.3, kind="evosax:CMA_ES")
    starts = jnp.stack([jnp.zeros(4), jnp.ones(4), -jnp.ones(4)])
    keys = [jax.random.split(jax.random.key(g), 3) for g in range(2)]  # [generation][seed]
    step = jax.jit(jax.vmap(lambda k, s: generation(k, s, sphere, cfg)[0]))
    batched = jax.vmap(lambda m: init(m, cfg))(starts)
    for k in keys:
        batched = step(k, batched)
    one = jax.jit(lambda k, s: generation(k, s, sphere, cfg)[0])
    for i in range(3):
        state = init(starts[i], cfg)
        for k in keys:
            state = one(k[i], state)
        mine = jax.tree.map(lambda x, i=i: x[i], batched)
        for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(mine), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.asarray(batched.mean[0]), 0.0)  # it moved


@pytest.mark.slow  # ~31 s: a subprocess with one device per core (splitting is test_sharding's)
def test_cma_es_seeds_split_over_as_many_cpu_devices_as_cores_finish(tmp_path):
    """CMA-ES on 4 seeds over 2 CPU devices, through the CLI. Batched, its ``eigh`` is
    jaxlib's LAPACK kernel splitting the batch over the intra-op pool and waiting; with
    one such kernel on every pool thread (2 devices, 2 cores: CI's machine) the run waited
    forever in round 0 (reproduced here before the fix; the fix runs it in ~40 s)."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "2"}
    argv = [str(Path(sys.executable).parent / "feudal-es"), "train", "--config",
            str(root / "configs" / "rover.json"), "--n-outer", "1", "--num-seeds", "4",
            "--set", "es.kind=evosax:CMA_ES", "--set", "es.pop_size=4", "--set",
            "episodes=2", "--set", "mappo.num_envs=4", "--set", "grad_steps_per_outer=1",
            "--no-progress", "--out", str(tmp_path / "run")]
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("CMA-ES over 2 CPU devices did not finish one round in 300 s (the "
                    "batched-eigh wait is back)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for seed in range(4):
        assert (tmp_path / "run" / f"seed_{seed}" / "metrics.jsonl").read_text().count(
            "\n") == 1
