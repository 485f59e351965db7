"""Population sharding oracle: the ES generation with the population split over 2 (forced
CPU) devices equals the single-device run — fitness per member, ES state and info, with
the whole population in one vmap and with the members evaluated in chunks
(``population_chunk``, the CPU default's ``lax.map``) inside each device's share — to a
stated float tolerance: the two are different XLA programs (one with a ``shard_map``), so
XLA may fuse and reduce in another order, and how it does so depends on the CPU (seen: 1
ulp in the best fitness on an AVX-512 machine, none on this one). Exact equality is
promised only for the same program on the same machine (resume, same-seed reruns).

``XLA_FLAGS=--xla_force_host_platform_device_count=2`` only works before jax is imported,
so the 2-device side runs in a subprocess; this process (1 device) computes the
reference. Both use the tiny Coverage trainer (``helpers.TINY``) with a randomised executor
(so members differ in fitness), and a population of 5 that does not divide the device
count (padding)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT, TESTS

# shared by both processes: the trainer's jitted generation, a randomised actor, the inputs
SETUP = textwrap.dedent("""
    import dataclasses
    import equinox as eqx
    import jax, jax.flatten_util, jax.numpy as jnp, numpy as np
    from agents import FeudalActor, executor_filter
    from feudal_es import es, functions, sharding
    from feudal_es.resolve import resolve_env
    from feudal_es.theta import selector_theta
    from helpers import TINY

    # 8 members 2 at a time: 4 chunks on one device, 2 per device on two
    CHUNKED = TINY.override({"es.pop_size": 8, "population_chunk": 2})

    def generations(config, actor, prefix):
        fns = functions.jax_functions(config, core)  # what ESTrainer runs each round
        state = es.init(selector_theta(actor), config.es)
        fitness = []
        for seed in (3, 4):  # twice: adam moments
            # the members' fitness on the generation's episodes (its key split), unsharded
            k_ask, k_eval = jax.random.split(jax.random.key(seed))
            population, _ = es.ask(k_ask, state, config.es)
            keys = jax.random.split(k_eval, config.episodes)
            fitness.append(fns.rollouts(actor, population, keys)[0].mean(axis=1))
            state, info = fns.generation(jax.random.key(seed), state, actor)
        out = {"mean": state.mean, "sigma": state.sigma, "opt_state": state.opt_state[0].mu,
               "fitness": jnp.concatenate(fitness)}
        out.update({f"info_{k}": v for k, v in info.items()})
        return {prefix + k: v for k, v in out.items()}

    core = resolve_env(TINY.env, TINY.env_kwargs).core

    def results():
        actor = FeudalActor.from_env(jax.random.key(0), core, TINY.actor)
        params, rest = eqx.partition(actor, executor_filter(actor))
        flat, unravel = jax.flatten_util.ravel_pytree(params)
        noisy = unravel(flat + 0.5 * jax.random.normal(jax.random.key(5), flat.shape))
        actor = eqx.combine(noisy, rest)
        out = {**generations(TINY, actor, ""), **generations(CHUNKED, actor, "chunked_")}
        # padding: 5 members on any device count, a cheap member function
        f = lambda th, w: (jnp.tanh(th @ w), th.sum(axis=1))
        th = jax.random.normal(jax.random.key(6), (5, 4))
        w = jnp.arange(8.0).reshape(4, 2)
        mesh = sharding.population_mesh()
        pad = jax.jit(lambda th, w: sharding.shard_population(f, mesh)(th, w))(th, w)
        out.update(pad_a=pad[0], pad_b=pad[1], plain_a=f(th, w)[0], plain_b=f(th, w)[1])
        return {k: np.asarray(v) for k, v in out.items()}
""")

CHILD = SETUP + textwrap.dedent("""
    import sys
    assert len(jax.devices()) == 2, jax.devices()
    wrapped = []  # the trainer must build its generation through shard_population
    plain = sharding.shard_population
    sharding.shard_population = lambda fn, mesh: wrapped.append(mesh.size) or plain(fn, mesh)
    out = results()
    assert wrapped[:2] == [2, 2], wrapped  # both trainer configs, then the padding check
    np.savez(sys.argv[1], **out)
""")


@pytest.fixture(scope="module")
def two_device_results(tmp_path_factory):
    d = tmp_path_factory.mktemp("shard")
    env = dict(os.environ)
    env.pop("JAX_NUM_CPU_DEVICES", None)  # conftest's pin: the flag below sets the count
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        " --xla_force_host_platform_device_count=2").strip()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", CHILD, str(d / "out.npz")],
                          env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with np.load(d / "out.npz") as z:
        return dict(z)


# float32 reassociation across the two programs: a 12-step episode's team return and the
# ES update built from it agree to a few ulps (seen: 2.4e-7 relative); 1e-5 leaves ample
# room while a wrong member, a dropped pad or another rank order is off by far more
RTOL, ATOL = 1e-5, 1e-6


@pytest.mark.heavy
def test_two_devices_equal_one_device(two_device_results):
    """ES state (mean, sigma, Adam moments), fitness info and every padded output equal
    to ``RTOL``/``ATOL``. The members' fitness gaps are asserted far wider than the
    tolerance first, so float noise cannot reorder the ranks the ES update uses (a
    different rank order would move the mean by ~lr, not by ulps)."""
    ns: dict = {}
    exec(SETUP, ns)
    assert len(jax.devices()) == 1
    ref = ns["results"]()
    two = two_device_results
    assert ref.keys() == two.keys()
    assert ref["info_best_fitness"] > ref["info_mean_fitness"]  # members differ
    assert ref["chunked_info_best_fitness"] > ref["chunked_info_mean_fitness"]
    for k, v in ref.items():
        np.testing.assert_allclose(two[k], v, rtol=RTOL, atol=ATOL, err_msg=k)
    np.testing.assert_allclose(two["pad_a"], two["plain_a"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(two["pad_b"], two["plain_b"], rtol=RTOL, atol=ATOL)


@pytest.mark.heavy
def test_member_fitness_gaps_exceed_the_tolerance(two_device_results):
    """The premise of the ES-state comparison: the members' fitness values are either
    exactly tied (members whose selectors pick the same skills play the same episodes,
    and each program computes every member with one per-member program, so twins stay
    bit-equal within it) or further apart than 100x the tolerance, so float noise cannot
    reorder them."""
    distinct = 0
    for prefix in ("", "chunked_"):
        for gen in np.split(two_device_results[prefix + "fitness"], 2):
            gaps = np.diff(np.sort(gen))
            far = gaps > 100 * (RTOL * np.abs(gen).max() + ATOL)
            assert np.all((gaps == 0) | far), gen
            distinct += int(far.sum())
    assert distinct >= 6  # not vacuous: most members differ


def test_shard_population_single_device_pads_and_cuts():
    from feudal_es import sharding

    mesh = sharding.population_mesh()
    f = lambda th, w, static: (jnp.tanh(th @ w) * static, th.sum(axis=1))
    thetas = jax.random.normal(jax.random.key(0), (3, 4))
    w = jnp.arange(8.0).reshape(4, 2)
    out = jax.jit(lambda th, w: sharding.shard_population(f, mesh)(th, w, 2.0))(thetas, w)
    ref = f(thetas, w, 2.0)
    # two programs (the padded, sharded one and eager ops): XLA may fuse tanh otherwise
    # (1 ulp apart at the tests' O0, tests/conftest.py), so a float32 tolerance
    for a, b in zip(out, ref, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_population_devices_beyond_what_jax_sees_is_refused(tmp_path):
    import dataclasses

    from helpers import TINY

    from feudal_es.trainer import ESTrainer

    with pytest.raises(ValueError, match="population_devices=2 but JAX sees only 1"):
        ESTrainer(dataclasses.replace(TINY, population_devices=2), tmp_path / "r")
