"""The GA kind (``ESConfig(kind="ga")``, MERL's SSNE on a flat vector): the vectorized
generation against a plain per-child loop on the same random draws, elites carried
exactly, the learner migrated into the last slot, the mask, tie and NaN rules, the
checkpoint round trip, and descent on a sphere."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from feudal_es.evolution import ESConfig, ask, generation, host_generation, init, tell
from feudal_es.evolution.ga import TOURNAMENT, GAState

TARGET = jnp.asarray([0.5, -1.0, 0.25, 2.0])
CFG = ESConfig(pop_size=8, sigma=0.2, kind="ga", elite_frac=0.25, crossover_prob=0.5)


def sphere(pop, key):
    return -jnp.sum(jnp.square(pop - TARGET), axis=1)


def evaluated(seed: int = 0):
    """A state whose population is 8 random members with their sphere fitness."""
    pop = jax.random.normal(jax.random.key(seed), (8, 4))
    fit = sphere(pop, None)
    best = int(jnp.argmax(fit))
    s0 = init(jnp.zeros(4), CFG)
    return s0._replace(mean=pop[best], opt_state=GAState(pop, fit))


def test_ask_is_elites_then_children_as_a_plain_loop_makes_them():
    state = evaluated()
    key = jax.random.key(7)
    cand, noise = jax.jit(lambda k, s: ask(k, s, CFG))(key, state)
    assert cand is not None and np.array_equal(np.asarray(cand), np.asarray(noise))
    # the plain loop, on the same draws as ga.ask (its key split, in its order)
    pop, fit = np.asarray(state.opt_state.population), np.asarray(state.opt_state.fitness)
    p, d, e = 8, 4, CFG.num_elites
    k_a, k_b, k_cross, k_coin, k_mut = jax.random.split(key, 5)
    draws_a = np.asarray(jax.random.randint(k_a, (p - e, TOURNAMENT), 0, p))
    draws_b = np.asarray(jax.random.randint(k_b, (p - e, TOURNAMENT), 0, p))
    swap = np.asarray(jax.random.bernoulli(k_cross, 0.5, (p - e, d)))
    coin = np.asarray(jax.random.bernoulli(k_coin, CFG.crossover_prob, (p - e, 1)))
    mut = np.asarray(jax.random.normal(k_mut, (p - e, d), jnp.float32))
    rank = sorted(range(p), key=lambda i: (-fit[i], i))  # best first, ties by index
    want = [pop[rank[i]] for i in range(e)]
    for c in range(p - e):
        a = pop[rank[min(draws_a[c])]]  # the tournament's best-ranked draw
        b = pop[rank[min(draws_b[c])]]
        child = np.where(coin[c, 0] & swap[c], b, a)
        want.append(child + np.float32(CFG.sigma) * mut[c])
    np.testing.assert_allclose(np.asarray(cand), np.stack(want), rtol=1e-6, atol=1e-7)
    # the elites are carried bit for bit
    np.testing.assert_array_equal(np.asarray(cand[:e]), np.stack(want[:e]))


def test_a_migrated_mean_takes_the_last_slot_and_the_mask_holds_the_rest():
    state = evaluated()
    plain, _ = ask(jax.random.key(1), state, CFG)
    learner = jnp.asarray([9.0, 9.0, 9.0, 9.0])
    moved, _ = ask(jax.random.key(1), state._replace(mean=learner), CFG)
    np.testing.assert_array_equal(np.asarray(moved[-1]), np.asarray(learner))
    np.testing.assert_array_equal(np.asarray(moved[:-1]), np.asarray(plain[:-1]))
    assert not np.array_equal(np.asarray(plain[-1]), np.asarray(learner))
    mask = jnp.asarray([1.0, 0.0, 1.0, 0.0])
    masked, _ = ask(jax.random.key(1), state, CFG, mask)
    np.testing.assert_array_equal(np.asarray(masked[:, [1, 3]]),
                                  np.broadcast_to(np.asarray(state.mean)[[1, 3]], (8, 2)))
    np.testing.assert_array_equal(np.asarray(masked[:, [0, 2]]),
                                  np.asarray(plain[:, [0, 2]]))


def test_tell_keeps_the_best_ranks_nan_last_and_ties_still_evolve():
    state = evaluated()
    cand, noise = ask(jax.random.key(2), state, CFG)
    fit = sphere(cand, None)
    new, info = tell(state, noise, fit, CFG)
    best = int(jnp.argmax(fit))
    np.testing.assert_array_equal(np.asarray(new.mean), np.asarray(cand[best]))
    np.testing.assert_array_equal(np.asarray(new.opt_state.population), np.asarray(cand))
    assert float(info["best_fitness"]) == float(fit[best]) and int(new.generation) == 1
    nan, _ = tell(state, noise, fit.at[best].set(jnp.nan), CFG)  # the best is now NaN
    second = int(jnp.argsort(-fit)[1])
    np.testing.assert_array_equal(np.asarray(nan.mean), np.asarray(cand[second]))
    tied, _ = tell(state, noise, jnp.zeros(8), CFG)  # all equal: the first (an elite)
    np.testing.assert_array_equal(np.asarray(tied.mean), np.asarray(cand[0]))
    np.testing.assert_array_equal(np.asarray(tied.opt_state.population), np.asarray(cand))
    void, _ = tell(state, noise, jnp.full(8, jnp.nan), CFG)  # nothing finite: no change
    for x, y in zip(jax.tree.leaves(void._replace(generation=state.generation)),
                    jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # the host path draws the same candidates and makes the same update
    h, _ = host_generation(jax.random.key(5), state, lambda p: np.asarray(sphere(p, None)),
                           CFG)
    j, _ = jax.jit(lambda k, s: generation(k, s, sphere, CFG))(jax.random.key(5), state)
    np.testing.assert_allclose(np.asarray(h.mean), np.asarray(j.mean), rtol=1e-6, atol=1e-7)


def test_ga_state_survives_a_checkpoint_and_the_config_is_checked(tmp_path):
    from feudal_es.checkpoint import load, save

    state = evaluated()
    cand, noise = ask(jax.random.key(3), state, CFG)
    state, _ = tell(state, noise, sphere(cand, None), CFG)
    path = save(tmp_path / "es.safetensors", {"es": state})
    back = load(path, {"es": init(jnp.zeros(4), CFG)})[0]["es"]
    for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert type(back.opt_state) is GAState
    with pytest.raises(ValueError, match="crossover_prob must be in"):
        ESConfig(kind="ga", crossover_prob=1.5)
    with pytest.raises(ValueError, match="one of \\('nes', 'cem', 'ga'\\)"):
        ESConfig(kind="gaa")


def test_ga_descends_the_sphere():
    cfg = ESConfig(pop_size=16, sigma=0.1, kind="ga", elite_frac=0.2)
    step = jax.jit(lambda k, s: generation(k, s, sphere, cfg))
    state = init(jnp.zeros(4), cfg)
    start = float(-sphere(state.mean[None], None)[0])
    for k in jax.random.split(jax.random.key(0), 60):
        state, _ = step(k, state)
    assert float(-sphere(state.mean[None], None)[0]) < 0.1 * start
