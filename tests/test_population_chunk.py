"""Population chunking oracle (``TrainerConfig.population_chunk``): the population rollout
evaluated a few members at a time (``lax.map(batch_size=chunk)``, a remainder chunk
included) equals the full-width ``vmap``, member by member; the trainer's generation
picks the chunk up (and caches per chunk); a bad chunk is refused by name."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.flatten_util
import numpy as np
import pytest
from helpers import TINY

from agents import FeudalActor, executor_filter
from feudal_es import es, rollout
from feudal_es.config import TrainerConfig
from feudal_es.functions import jax_functions
from feudal_es.resolve import resolve_env
from feudal_es.theta import selector_theta


@pytest.fixture(scope="module")
def setup():
    """The tiny Coverage core and an actor with a randomised executor (so members differ)."""
    core = resolve_env(TINY.env, TINY.env_kwargs).core
    actor = FeudalActor.from_env(jax.random.key(0), core, TINY.actor)
    params, rest = eqx.partition(actor, executor_filter(actor))
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    actor = eqx.combine(unravel(flat + 0.5 * jax.random.normal(jax.random.key(5), flat.shape)),
                        rest)
    return core, actor


# XLA:CPU compiles the batched rollout once per batch width, and the width changes how
# some float32 reductions are tiled and vectorised (seen: the env's grid means, the
# network's small dots), so a member's team return and metrics can differ from the
# full-width vmap's in the last bits: up to 5e-7 relative (4 ulps) over these 12-step
# episodes for chunks of 1-3, 0-1 ulp for chunks of 4 and 8. The per-member program is
# otherwise the same, so the tightest tolerance that holds at every chunk size is used.
RTOL = 1e-6


def test_chunked_rollouts_equal_full_width_vmap(setup):
    """7 members, chunks of 3: two scanned chunks plus a remainder of 1, against the
    trainer's full-width rollouts of TINY (population 4: members 0-3 and 3-6 in two calls
    of the one compiled vmap other tests share); every team return and final metric to
    ``RTOL`` (a few float32 ulps)."""
    core, actor = setup
    full = jax_functions(TINY, core).rollouts  # population 4 < the automatic chunk: a vmap
    theta0 = selector_theta(actor)
    thetas = theta0 + jax.random.normal(jax.random.key(1), (7, theta0.size))
    keys = jax.random.split(jax.random.key(2), TINY.episodes)
    fn = rollout.make_population_rollouts(core, True, chunk=3)
    chunked = jax.device_get(eqx.filter_jit(fn)(actor, thetas, keys))
    a, b = (jax.device_get(full(actor, th, keys)) for th in (thetas[:4], thetas[3:]))
    ref = jax.tree.map(lambda x, y: np.concatenate([x, y[1:]]), a, b)
    assert np.unique(np.asarray(ref[0]).round(4)).size > 2  # members differ
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=RTOL, atol=0),
                 chunked, ref)
    jaxpr = str(jax.make_jaxpr(fn)(actor, thetas, keys))
    assert jaxpr.count("scan[") == 1 + 2  # the chunk loop + each path's episode scan


@pytest.mark.slow  # ~20 s; test_chunked_rollouts_equal_full_width_vmap is the oracle
def test_trainer_generation_uses_the_chunk(setup):
    """The trainer's ES generation with chunks of 3 (population 4: one chunk + remainder 1)
    equals the full-width one of TINY to ``RTOL``, ES state and logged fitness alike: two
    programs, so XLA may round in another order (the members' fitness gaps are far wider
    than that, so the rank-based update sees the same order). The chunk is part of the
    compile-cache key; the automatic chunk is 8 on CPU."""
    core, actor = setup
    if jax.default_backend() == "cpu":
        assert rollout.population_chunk(TINY) == rollout.CPU_POPULATION_CHUNK
    assert rollout.population_chunk(TINY) in (0, rollout.CPU_POPULATION_CHUNK)  # >= 4: full width
    chunk_cfg = dataclasses.replace(TINY, population_chunk=3)
    full, chunked = jax_functions(TINY, core), jax_functions(chunk_cfg, core)
    assert full is not chunked and jax_functions(chunk_cfg, core) is chunked
    state = es.init(selector_theta(actor), TINY.es)
    a_state, a_info = jax.device_get(full.generation(jax.random.key(3), state, actor))
    b_state, b_info = jax.device_get(chunked.generation(jax.random.key(3), state, actor))
    assert a_info["best_fitness"] > a_info["mean_fitness"]  # members differ
    jax.tree.map(lambda b, a: np.testing.assert_allclose(b, a, rtol=RTOL, atol=1e-7),
                 b_state, a_state)
    assert a_info.keys() == b_info.keys()
    for k in a_info:
        np.testing.assert_allclose(b_info[k], a_info[k], rtol=RTOL, atol=0, err_msg=k)


@pytest.mark.parametrize("value, exc", [(-1, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_population_chunk_is_refused_by_name(value, exc):
    with pytest.raises(exc, match="population_chunk"):
        dataclasses.replace(TINY, population_chunk=value)
    with pytest.raises(exc, match="population_chunk"):
        TrainerConfig.from_dict({**TINY.to_dict(), "population_chunk": value})
