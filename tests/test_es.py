"""Oracles for the ES core: hand computations, the loop path vs the batched path, the
reference API's contract, and convergence on classic test functions."""

from __future__ import annotations

import inspect

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from feudal_es import es
from feudal_es.es import ESConfig, es_step, flatten, merl_coexist, module_theta, set_module_theta
from feudal_es.objectives import batched, rosenbrock_fitness, sphere_fitness

KEY = jax.random.key(42)


def hand_ranks(fitness: np.ndarray) -> np.ndarray:
    """Centered ranks by hand: the i-th smallest gets i/(P-1) - 0.5, tied values the mean
    of their ranks; non-finite values are the smallest (and tie with each other)."""
    f = np.where(np.isfinite(fitness), fitness, -np.inf)
    order = sorted(range(len(f)), key=lambda i: f[i])
    ranks = np.empty(len(f))
    for r, i in enumerate(order):
        ranks[i] = r
    for v in set(f.tolist()):  # ties: every member of a tied group gets the group's mean
        ranks[f == v] = ranks[f == v].mean()
    return ranks / (len(f) - 1) - 0.5


def index_tiebreak_rank(fitness: jax.Array) -> jax.Array:
    """The centered rank before ties were averaged (ties by index): the oracle that the
    tie-aware rank equals bit for bit on distinct values."""
    num = fitness.shape[0]
    fitness = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
    _, ascending = jax.lax.top_k(-fitness, num)
    ranks = jnp.arange(num, dtype=jnp.float32) / (num - 1) - 0.5
    return jnp.zeros(num, jnp.float32).at[ascending].set(ranks, unique_indices=True)


# --- the reference API's shape --------------------------------------------------------
def test_reference_signatures():
    assert [p.name for p in inspect.signature(es_step).parameters.values()] == [
        "theta", "eval_fn", "es_cfg", "key"]
    params = inspect.signature(merl_coexist).parameters
    required = ["theta0", "eval_fn", "gradient_step_fn", "sync_in", "sync_out", "n_outer",
                "grad_steps_per_outer", "es_cfg", "key", "gstate0"]
    assert list(params)[: len(required)] == required
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert params["gstate0"].default is None
    cfg = ESConfig()
    assert (cfg.pop_size, cfg.sigma, cfg.lr, cfg.kind, cfg.elite_frac, cfg.weight_decay) == (
        16, 0.05, 0.05, "nes", 0.25, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"pop_size": 1}, "pop_size"),
        ({"pop_size": 8.0}, "pop_size"),
        ({"pop_size": True}, "pop_size"),
        ({"sigma": 0.0}, "sigma"),
        ({"sigma": -1.0}, "sigma"),
        ({"sigma": float("nan")}, "sigma"),
        ({"lr": 0.0}, "lr"),
        ({"kind": "cmaes"}, "kind"),
        ({"elite_frac": 0.0}, "elite_frac"),
        ({"elite_frac": 1.5}, "elite_frac"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"optimizer": "rmsprop"}, "optimizer"),
        ({"sigma": "0.1"}, "sigma"),
    ],
)
def test_bad_config_raises_naming_the_field(kwargs, field):
    with pytest.raises((ValueError, TypeError), match=field):
        ESConfig(**kwargs)


# --- ask / rank shaping ----------------------------------------------------------------
def test_antithetic_pairs_are_exact_negatives():
    cfg = ESConfig(pop_size=11, sigma=0.3)  # odd: P = 10
    state = es.init(jnp.arange(5.0), cfg)
    pop, noise = es.ask(KEY, state, cfg)
    assert pop.shape == noise.shape == (10, 5)
    np.testing.assert_array_equal(np.asarray(noise[:5]), -np.asarray(noise[5:]))
    np.testing.assert_array_equal(np.asarray(pop), np.asarray(state.mean + 0.3 * noise))


def test_centered_ranks_span_and_order():
    f = np.array([3.0, -1.0, 10.0, 0.5, 2.0, 7.0], np.float32)
    r = np.asarray(es.centered_rank(jnp.asarray(f)))
    assert r.min() == -0.5 and r.max() == 0.5
    np.testing.assert_allclose(r, hand_ranks(f), atol=1e-7)
    np.testing.assert_allclose(np.sort(r), np.linspace(-0.5, 0.5, len(f)), atol=1e-7)


def test_non_finite_fitness_ranks_last():
    f = np.array([1.0, np.nan, 3.0, -np.inf, np.inf, 2.0], np.float32)
    r = np.asarray(es.centered_rank(jnp.asarray(f)))
    assert set(np.argsort(r)[:3]) == {1, 3, 4}
    assert r[2] == 0.5 and r[5] < r[2] and r[0] < r[5]
    np.testing.assert_allclose(r, hand_ranks(f), atol=1e-7)
    assert r[1] == r[3] == r[4]  # invalid members tie with each other
    # an update with NaN members equals the one where they are simply the (tied) worst
    cfg = ESConfig(pop_size=6)
    state = es.init(jnp.zeros(4), cfg)
    _, noise = es.ask(KEY, state, cfg)
    worst = np.where(np.isfinite(f), f, -100.0)
    got, info = es.tell(state, noise, jnp.asarray(f), cfg)
    want, _ = es.tell(state, noise, jnp.asarray(worst, np.float32), cfg)
    np.testing.assert_array_equal(np.asarray(got.mean), np.asarray(want.mean))
    assert int(info["num_invalid"]) == 3
    assert float(info["best_fitness"]) == 3.0 and float(info["mean_fitness"]) == 2.0


@pytest.mark.parametrize("num", [2, 5, 8, 64, 257])
def test_distinct_fitness_ranks_bit_identical_to_index_tiebreak(num):
    f = jax.random.normal(jax.random.key(num), (num,))
    f = f.at[num // 2].set(jnp.nan)
    assert np.unique(np.asarray(f)).size == num  # distinct (one NaN)
    for fn in (jax.jit, lambda f: f):  # as tell runs it, and op by op
        got, want = fn(es.centered_rank)(f), fn(index_tiebreak_rank)(f)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_tied_fitness_shares_the_average_rank():
    f = np.array([2.0, 1.0, 2.0, 0.0, 2.0, 1.0, -np.inf, np.nan], np.float32)
    r = np.asarray(es.centered_rank(jnp.asarray(f)))
    np.testing.assert_allclose(r, hand_ranks(f), atol=1e-7)
    assert r[0] == r[2] == r[4] == (6 / 7 - 0.5)  # ranks 5, 6, 7 -> 6
    assert r[1] == r[5] and r[6] == r[7] == -0.5 + 0.5 / 7
    assert abs(r.sum()) < 1e-6  # still centered


@pytest.mark.parametrize("kind, optimizer", [("nes", "sgd"), ("nes", "adam"), ("cem", "sgd")])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_all_tied_generation_leaves_the_state_unchanged(kind, optimizer, weight_decay):
    """Flat fitness ranks nothing: mean, sigma and optimizer moments stay as they were,
    also after an informative generation gave Adam non-zero moments."""
    cfg = ESConfig(pop_size=8, sigma=0.2, lr=0.3, kind=kind, optimizer=optimizer,
                   weight_decay=weight_decay)
    state = es.init(jnp.array([0.5, -1.0, 2.0]), cfg)
    _, noise = es.ask(KEY, state, cfg)
    state, _ = es.tell(state, noise, jnp.arange(8.0), cfg)  # informative: moves it
    _, noise = es.ask(jax.random.key(1), state, cfg)
    for flat in (jnp.full(8, 3.0), jnp.full(8, jnp.nan)):
        new, info = es.tell(state, noise, flat, cfg)
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                     new._replace(generation=state.generation), state)
        assert int(new.generation) == int(state.generation) + 1
    assert float(info["sigma"]) == float(state.sigma)


def test_tied_antithetic_pair_contributes_nothing():
    """NES step with pair (1, 1 + P/2) tied == the hand step over the other pairs only;
    and moving that pair's shared fitness anywhere between its neighbours changes nothing."""
    cfg = ESConfig(pop_size=8, sigma=0.2, lr=0.3)
    theta = np.array([0.5, -1.0, 2.0], np.float32)
    rng = np.random.default_rng(3)
    eps = rng.standard_normal((4, 3)).astype(np.float32)
    noise = np.concatenate([eps, -eps])
    fitness = np.array([0.1, 5.0, -2.0, 3.0, 1.0, 5.0, 0.7, -1.0], np.float32)  # 1 and 5 tie
    new, _ = es.tell(es.init(theta, cfg), jnp.asarray(noise), jnp.asarray(fitness), cfg)
    shaped = hand_ranks(fitness)
    assert shaped[1] == shaped[5]
    others = [i for i in range(8) if i not in (1, 5)]
    step = 0.3 / (8 * 0.2) * (shaped[others, None] * noise[others]).sum(0)
    np.testing.assert_allclose(np.asarray(new.mean), theta + step, rtol=1e-6, atol=1e-6)
    # with index tie-breaking the -eps member would have won: a step along -eps[1]
    biased = 0.3 / (8 * 0.2) * (np.asarray(index_tiebreak_rank(jnp.asarray(fitness)))[:, None]
                                * noise).sum(0)
    assert not np.allclose(theta + biased, np.asarray(new.mean), atol=1e-4)


def test_all_non_finite_fitness_is_refused():
    cfg = ESConfig(pop_size=4)
    state = es.init(jnp.ones(3), cfg)
    _, noise = es.ask(KEY, state, cfg)
    new, info = es.tell(state, noise, jnp.full(4, jnp.nan), cfg)
    np.testing.assert_array_equal(np.asarray(new.mean), np.asarray(state.mean))
    assert int(info["num_invalid"]) == 4
    with pytest.raises(FloatingPointError, match="non-finite"):
        es_step(jnp.ones(3), lambda th: float("nan"), cfg, KEY)


# --- tell: hand computations ---------------------------------------------------------
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_nes_step_equals_hand_computation(weight_decay):
    cfg = ESConfig(pop_size=8, sigma=0.2, lr=0.3, weight_decay=weight_decay)
    theta = np.array([0.5, -1.0, 2.0], np.float32)
    rng = np.random.default_rng(0)
    eps = rng.standard_normal((4, 3)).astype(np.float32)
    noise = np.concatenate([eps, -eps])
    fitness = rng.standard_normal(8).astype(np.float32)
    new, _ = es.tell(es.init(theta, cfg), jnp.asarray(noise), jnp.asarray(fitness), cfg)
    shaped = hand_ranks(fitness)
    step = 0.3 / (8 * 0.2) * (shaped[:, None] * noise).sum(0) - 0.3 * weight_decay * theta
    np.testing.assert_allclose(np.asarray(new.mean), theta + step, rtol=1e-6, atol=1e-6)


def test_es_step_uses_documented_noise_and_formula():
    cfg = ESConfig(pop_size=6, sigma=0.1, lr=0.05)
    theta = jnp.array([1.0, 2.0, -0.5, 0.0])
    seen = []

    def eval_fn(th):
        seen.append(np.asarray(th))
        return float(-jnp.sum((th - 3.0) ** 2))

    theta_next, info = es_step(theta, eval_fn, cfg, KEY)
    eps = np.asarray(jax.random.normal(jax.random.split(KEY)[0], (3, 4)))
    noise = np.concatenate([eps, -eps])
    np.testing.assert_allclose(np.stack(seen), np.asarray(theta) + 0.1 * noise, rtol=1e-6)
    fit = np.array([-np.sum((s - 3.0) ** 2) for s in seen])
    want = np.asarray(theta) + 0.05 / (6 * 0.1) * (hand_ranks(fit)[:, None] * noise).sum(0)
    np.testing.assert_allclose(np.asarray(theta_next), want, rtol=1e-5, atol=1e-6)
    assert info["best_fitness"] == pytest.approx(fit.max(), rel=1e-5)
    assert info["mean_fitness"] == pytest.approx(fit.mean(), rel=1e-5)
    assert info["sigma"] == pytest.approx(0.1)


def test_nes_step_follows_a_linear_fitness_gradient():
    cfg = ESConfig(pop_size=512, sigma=0.5, lr=0.1)
    w = jnp.array([3.0, -2.0, 0.5, 1.0, 0.0, -1.5, 2.5, 0.7])
    theta = jnp.ones(8)
    theta_next, _ = es_step(theta, lambda th: float(th @ w), cfg, KEY)
    step = np.asarray(theta_next - theta)
    cosine = step @ np.asarray(w) / (np.linalg.norm(step) * np.linalg.norm(w))
    assert cosine > 0.95


def test_cem_mean_is_elite_mean_and_sigma_elite_std():
    cfg = ESConfig(pop_size=16, sigma=0.4, kind="cem", elite_frac=0.25)
    state = es.init(jnp.array([0.0, 1.0, -1.0]), cfg)
    pop, noise = es.ask(KEY, state, cfg)
    fitness = np.asarray(jax.vmap(sphere_fitness)(pop))
    new, info = es.tell(state, noise, jnp.asarray(fitness), cfg)
    elites = np.asarray(pop)[np.argsort(fitness)[-4:]]
    np.testing.assert_allclose(np.asarray(new.mean), elites.mean(0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(float(info["sigma"]), elites.std(0).mean(), rtol=1e-5)
    assert float(new.sigma) == pytest.approx(elites.std(0).mean(), rel=1e-5)


# --- module parameter vectors -----------------------------------------------------------
class _Mixed(eqx.Module):
    linear: eqx.nn.Linear
    counts: jax.Array  # int leaf: never part of theta
    mask: jax.Array  # bool leaf
    name: str = eqx.field(static=True)
    act: object = jax.nn.relu  # callable leaf


def test_module_theta_round_trip_and_non_float_leaves_untouched():
    m = _Mixed(eqx.nn.Linear(3, 2, key=KEY), jnp.arange(4), jnp.array([True, False]), "m")
    theta = module_theta(m)
    assert theta.shape == (3 * 2 + 2,)
    same = set_module_theta(m, theta)
    for a, b in zip(jax.tree.leaves(m), jax.tree.leaves(same), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    moved = set_module_theta(m, theta + 1.0)
    np.testing.assert_array_equal(np.asarray(moved.linear.weight), np.asarray(m.linear.weight) + 1)
    assert moved.counts is m.counts and moved.mask is m.mask
    assert moved.name == "m" and moved.act is jax.nn.relu
    with pytest.raises(ValueError, match="inexact parameters"):
        set_module_theta(m, jnp.zeros(3))


def test_flatten_round_trip():
    tree = {"a": jnp.ones((2, 3)), "b": (jnp.arange(3.0), jnp.zeros(1))}
    theta, unflatten = flatten(tree)
    assert theta.ndim == 1 and theta.shape[0] == 10
    back = unflatten(theta)
    for a, b in zip(jax.tree.leaves(tree), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# --- loop path vs batched path ------------------------------------------------------------
@pytest.mark.parametrize("kind", ["nes", "cem"])
def test_batched_generation_equals_reference_loop(kind):
    cfg = ESConfig(pop_size=10, sigma=0.2, lr=0.1, kind=kind, elite_frac=0.3)
    theta = jnp.linspace(-1.0, 1.0, 6)
    member = jax.jit(rosenbrock_fitness)
    loop_theta, loop_info = es_step(theta, member, cfg, KEY)
    state, info = es.make_generation(batched(rosenbrock_fitness), cfg)(KEY, es.init(theta, cfg))
    np.testing.assert_array_equal(np.asarray(state.mean), np.asarray(loop_theta))
    assert float(info["best_fitness"]) == pytest.approx(loop_info["best_fitness"], rel=1e-6)
    assert float(info["sigma"]) == pytest.approx(loop_info["sigma"], rel=1e-6)


def test_generation_traces_once():
    traces = []

    def fitness_fn(thetas, key):
        traces.append(1)
        return jax.vmap(sphere_fitness)(thetas)

    cfg = ESConfig(pop_size=8)
    step = es.make_generation(fitness_fn, cfg)
    state = es.init(jnp.ones(3), cfg)
    for k in jax.random.split(KEY, 4):
        state, _ = step(k, state)
    assert len(traces) == 1 and int(state.generation) == 4


# --- convergence ------------------------------------------------------------------------
def _evolve(fitness, theta0, cfg, generations):
    run = jax.jit(lambda k, s: es.evolve(k, s, batched(fitness), cfg, generations))
    state, info = run(KEY, es.init(theta0, cfg))
    return state, info


def test_nes_converges_on_sphere():
    state, info = _evolve(sphere_fitness, jnp.ones(10), ESConfig(pop_size=32, sigma=0.1), 300)
    assert float(sphere_fitness(state.mean)) > -1e-3  # from -10
    assert info["mean_fitness"].shape == (300,)


def test_nes_adam_converges_on_rosenbrock():
    cfg = ESConfig(pop_size=32, sigma=0.02, lr=0.02, optimizer="adam")
    state, _ = _evolve(rosenbrock_fitness, jnp.array([-1.0, 1.0]), cfg, 3000)
    assert float(rosenbrock_fitness(state.mean)) > -1e-2  # from -4
    np.testing.assert_allclose(np.asarray(state.mean), [1.0, 1.0], atol=0.1)


def test_cem_converges_on_sphere_with_shrinking_sigma():
    cfg = ESConfig(pop_size=64, sigma=0.5, kind="cem", elite_frac=0.5)
    state, info = _evolve(sphere_fitness, jnp.ones(10), cfg, 100)
    assert float(sphere_fitness(state.mean)) > -1e-6
    assert float(info["sigma"][-1]) < 1e-3 < float(info["sigma"][0])


# --- merl_coexist -----------------------------------------------------------------------
def test_merl_coexist_calls_in_documented_order_and_count():
    calls: list[str] = []
    cfg = ESConfig(pop_size=4, sigma=0.1)
    injected = jnp.array([5.0, -5.0])

    def gradient_step_fn(g):
        calls.append("grad")
        return g + 1

    def sync_in(g, theta):
        calls.append("in")
        return injected * g  # the learner's selector, read from the train state

    def eval_fn(theta):
        calls.append("eval")
        return float(-jnp.sum(theta**2))

    out_thetas = []

    def sync_out(g, theta):
        calls.append("out")
        out_thetas.append(np.asarray(theta))
        return g * 10

    theta, gstate, history = merl_coexist(
        theta0=jnp.zeros(2), eval_fn=eval_fn, gradient_step_fn=gradient_step_fn,
        sync_in=sync_in, sync_out=sync_out, n_outer=2, grad_steps_per_outer=3,
        es_cfg=cfg, key=KEY, gstate0=0)
    one_round = ["grad"] * 3 + ["in"] + ["eval"] * 4 + ["out"]
    assert calls == one_round * 2
    assert gstate == ((0 + 3) * 10 + 3) * 10
    assert [h[0] for h in history] == [0, 1]
    assert set(history[0][1]) >= {"best_fitness", "mean_fitness"}
    np.testing.assert_array_equal(np.asarray(theta), out_thetas[-1])
    # ES searched around the injected learner (the mean moved from 3*injected by one step)
    assert np.abs(out_thetas[0] - 3 * np.asarray(injected)).max() < 2.0


def test_merl_coexist_batched_equals_loop_and_threads_cem_sigma():
    cfg = ESConfig(pop_size=16, sigma=0.3, kind="cem", elite_frac=0.25)
    dim = 2000
    candidates: list[np.ndarray] = []

    def eval_fn(theta):
        candidates.append(np.asarray(theta))
        return float(sphere_fitness(theta))

    common = dict(gradient_step_fn=lambda g: g, sync_in=lambda g, th: th,
                  sync_out=lambda g, th: g, n_outer=2, grad_steps_per_outer=1,
                  es_cfg=cfg, key=KEY)
    theta_loop, _, hist_loop = merl_coexist(theta0=jnp.ones(dim), eval_fn=eval_fn, **common)
    theta_b, _, hist_b = merl_coexist(theta0=jnp.ones(dim), eval_fn=None,
                                      population_fn=batched(sphere_fitness), **common)
    np.testing.assert_array_equal(np.asarray(theta_loop), np.asarray(theta_b))
    assert hist_loop[1][1]["sigma"] == pytest.approx(hist_b[1][1]["sigma"], rel=1e-6)
    # round 2 samples with the sigma that round 1 shrank to (pairs: (c_i - c_{i+h})/2 = σ ε_i)
    second = np.stack(candidates[16:])
    spread = ((second[:8] - second[8:]) / 2).std()
    shrunk = hist_loop[0][1]["sigma"]
    assert shrunk < 0.9 * cfg.sigma
    assert spread == pytest.approx(shrunk, rel=0.03)
