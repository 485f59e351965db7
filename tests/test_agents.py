"""Backbone, selector partition and FeudalActor, checked against plain numpy / loops.

Small configs and a handful of shared jitted functions keep compilations few.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium import spaces

from agents import (
    ActorConfig,
    FeudalActor,
    GoalOption,
    GraphFilter,
    LPACBackbone,
    count_params,
    executor_filter,
    normalize_adjacency,
    selector_filter,
)
from feudal_es.theta import selector_theta, set_selector_theta

N = 6
SMALL = ActorConfig(
    cnn_channels=(4, 4),
    cnn_strides=(1, 2),
    cnn_out=8,
    vec_hidden=(8,),
    vec_out=8,
    gnn_hops=3,
    gnn_layers=2,
    gnn_features=16,
    embed_hidden=(16,),
    embed_dim=8,
    executor_hidden=(16,),
    selector_period=4,
)
BOX = lambda shape: spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)
DICT_SPACE = spaces.Dict({"maps": BOX((3, 8, 8)), "vec": BOX((4,))})
ACTION = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)


def random_obs(seed: int, n: int, space: spaces.Space):
    """Gaussian observations for n agents (numpy: no per-shape compiles)."""
    rng = np.random.default_rng(seed)
    draw = lambda shape: jnp.asarray(rng.standard_normal((n, *shape)), jnp.float32)
    if isinstance(space, spaces.Dict):
        return {k: draw(s.shape) for k, s in space.items()}
    return draw(space.shape)


def random_graph(seed: int, n: int, p: float = 0.4, isolated: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.triu((rng.random((n, n)) < p).astype(np.float32), 1)
    a = a + a.T
    if isolated is not None:
        a[isolated, :] = a[:, isolated] = 0.0
    return a


OBS = random_obs(1, N, DICT_SPACE)
ADJ = jnp.asarray(random_graph(0, N, isolated=2))
embed = eqx.filter_jit(lambda m, obs, adj: m(obs, adj))


# ----------------------------------------------------------------------------- backbone
def test_graph_filter_equals_numpy():
    """sum_k S^k X W_k + b with S = D^-1/2 A D^-1/2 (isolated node -> zero row), using
    matrix powers in numpy against the repeated-product implementation."""
    layer = GraphFilter(jax.random.key(0), 5, 7, hops=3)
    x = np.random.default_rng(1).standard_normal((N, 5)).astype(np.float32)
    a = np.asarray(ADJ, np.float64)
    deg = a.sum(1)
    inv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    s = inv[:, None] * a * inv[None, :]
    w, b = np.asarray(layer.weight, np.float64), np.asarray(layer.bias, np.float64)
    want = sum(np.linalg.matrix_power(s, k) @ x @ w[k] for k in range(4)) + b
    np.testing.assert_allclose(np.asarray(normalize_adjacency(ADJ)), s, rtol=1e-6, atol=1e-7)
    got = layer(jnp.asarray(x), normalize_adjacency(ADJ))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


def test_graph_filter_never_forms_adjacency_powers():
    """The only [N, N] operand of any matmul is S itself: no S @ S (cost O(K N^2 F))."""
    n = 11  # distinct from every feature size
    bb = LPACBackbone(jax.random.key(0), DICT_SPACE, SMALL)
    jaxpr = jax.make_jaxpr(lambda o, a: bb(o, a))(random_obs(0, n, DICT_SPACE),
                                                  jnp.zeros((n, n)))  # fmt: skip
    dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "dot_general"]
    assert dots
    for e in dots:
        shapes = [tuple(v.aval.shape) for v in e.invars]
        assert shapes.count((n, n)) <= 1, shapes


@pytest.mark.parametrize(
    "space",
    [BOX((3, 8, 8)), BOX((8, 8)), BOX((5,)), DICT_SPACE],
    ids=["image", "image-2d", "vector", "dict"],
)
def test_backbone_shapes_and_encoders(space):
    bb = LPACBackbone(jax.random.key(0), space, SMALL)
    kinds = sorted(type(e).__name__ for e in bb.encoders.values())
    want = {"image": ["CNNEncoder"], "image-2d": ["CNNEncoder"], "vector": ["VectorEncoder"]}
    name = {(3, 8, 8): "image", (8, 8): "image-2d", (5,): "vector"}.get(space.shape, "dict")
    assert kinds == want.get(name, ["CNNEncoder", "VectorEncoder"])
    h = bb(random_obs(2, N, space), ADJ)
    assert h.shape == (N, SMALL.embed_dim) and h.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(h))) and bool(jnp.all(jnp.abs(h) <= 1.0))


def test_backbone_permutation_equivariance():
    bb = LPACBackbone(jax.random.key(3), DICT_SPACE, SMALL)
    perm = np.random.default_rng(4).permutation(N)
    h = embed(bb, OBS, ADJ)
    obs_p = {k: v[perm] for k, v in OBS.items()}
    adj_p = ADJ[perm][:, perm]
    np.testing.assert_allclose(np.asarray(embed(bb, obs_p, adj_p)), np.asarray(h)[perm],
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    # and the graph matters: a different graph gives a different embedding
    assert not np.allclose(np.asarray(embed(bb, OBS, jnp.ones((N, N)) - jnp.eye(N))), h)


# ----------------------------------------------------------------------------- partition
GOAL_CFG = dataclasses.replace(SMALL, goal_dim=2, skill_embed_dim=4)
GOAL_ACTOR = FeudalActor(jax.random.key(5), DICT_SPACE, ACTION, 3, GOAL_CFG)
ACTOR = FeudalActor(jax.random.key(6), DICT_SPACE, ACTION, 3, SMALL)


@pytest.mark.parametrize("actor", [ACTOR, GOAL_ACTOR], ids=["skill", "skill+goal"])
def test_partition_covers_every_inexact_leaf_once(actor):
    inexact = jax.tree.leaves(jax.tree.map(eqx.is_inexact_array, actor))
    sel = jax.tree.leaves(selector_filter(actor))
    exe = jax.tree.leaves(executor_filter(actor))
    assert len(inexact) == len(sel) == len(exe)
    for i, s, e in zip(inexact, sel, exe, strict=True):
        assert (s + e) == int(i), (i, s, e)  # inexact -> exactly one owner; else none
    # the selector owns exactly the inexact leaves of actor.selector
    assert count_params(eqx.filter(actor, selector_filter(actor))) == count_params(actor.selector)
    n_exec = count_params(eqx.filter(actor, executor_filter(actor)))
    assert n_exec + count_params(actor.selector) == count_params(actor)
    assert n_exec == count_params(actor.backbone) + count_params(actor.executor)


@pytest.mark.parametrize("actor", [ACTOR, GOAL_ACTOR], ids=["skill", "skill+goal"])
def test_selector_theta_round_trip_exact(actor):
    from feudal_es.es import module_theta

    theta = selector_theta(actor)
    assert theta.ndim == 1 and theta.size == count_params(actor.selector)
    # composes with the ES side: same leaves, same order
    np.testing.assert_array_equal(np.asarray(theta), np.asarray(module_theta(actor.selector)))
    same = set_selector_theta(actor, theta)
    for a, b in zip(jax.tree.leaves(actor), jax.tree.leaves(same), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    new = jnp.asarray(np.random.default_rng(7).standard_normal(theta.shape), jnp.float32)
    moved = set_selector_theta(actor, new)
    np.testing.assert_array_equal(np.asarray(selector_theta(moved)), np.asarray(new))
    # executor leaves are untouched (the very same arrays)
    ex_a = jax.tree.leaves(eqx.filter(actor, executor_filter(actor)))
    ex_b = jax.tree.leaves(eqx.filter(moved, executor_filter(moved)))
    assert all(a is b for a, b in zip(ex_a, ex_b, strict=True))
    with pytest.raises(ValueError, match="selector theta must have shape"):
        set_selector_theta(actor, jnp.zeros(theta.size + 1))


# ----------------------------------------------------------------------------- actor
@eqx.filter_jit
def _pop_select(actor, thetas, obs, adj, prev, t):
    def one(theta):
        a = set_selector_theta(actor, theta)
        return a.skill_logits(obs, adj), a.select_option(obs, adj, prev, t)

    return jax.vmap(one)(thetas)


@eqx.filter_jit
def _one_select(actor, theta, obs, adj, prev, t):
    a = set_selector_theta(actor, theta)
    return a.skill_logits(obs, adj), a.select_option(obs, adj, prev, t)


def test_population_vmap_equals_loop():
    actor = GOAL_ACTOR
    theta0 = selector_theta(actor)
    noise = np.random.default_rng(8).standard_normal((64, theta0.size)).astype(np.float32)
    thetas = theta0 + 0.5 * jnp.asarray(noise)
    prev = actor.initial_option(N)
    logits, option = _pop_select(actor, thetas, OBS, ADJ, prev, jnp.int32(0))
    assert logits.shape == (64, N, 3) and option.skill.shape == (64, N)
    assert option.goal.shape == (64, N, 2)
    for p in range(64):
        lg, hp = _one_select(actor, thetas[p], OBS, ADJ, prev, jnp.int32(0))
        np.testing.assert_allclose(np.asarray(logits[p]), np.asarray(lg), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(option.skill[p]), np.asarray(hp.skill))
        np.testing.assert_allclose(np.asarray(option.goal[p]), np.asarray(hp.goal), atol=1e-6)
    # the population really differs, and decisions are the argmax of each member's logits
    assert len({tuple(np.asarray(s)) for s in option.skill}) > 1
    np.testing.assert_array_equal(np.asarray(option.skill), np.asarray(logits.argmax(-1)))


@eqx.filter_jit
def _env_step(actor, keys, obs, adj, prev, t):
    """step vmapped over envs, plus evaluate() of the sampled actions (PPO's re-scoring)."""

    def one(k, o, a, p, tt):
        option, out = actor.step(k, o, a, p, tt)
        return option, out, actor.evaluate(o, a, option, out.action)

    return jax.vmap(one)(keys, obs, adj, prev, t)


def test_select_holds_between_decisions_vmapped_over_envs():
    """Two envs at t = 0 (decide) and t = 3 (hold, period 4) under one vmap."""
    actor = GOAL_ACTOR
    obs = jax.tree.map(lambda x: jnp.stack([x, x[::-1]]), OBS)
    adj = jnp.stack([ADJ, ADJ[::-1, ::-1]])
    prev = GoalOption(jnp.full((2, N), 2, jnp.int32), jnp.full((2, N, 2), 0.5, jnp.float32))
    keys = jax.random.split(jax.random.key(9), 2)
    option, out, (lp, ent) = _env_step(actor, keys, obs, adj, prev, jnp.array([0, 3]))
    assert out.env_action.shape == (2, N, 2) and out.log_prob.shape == (2, N)
    # env 0 decided: argmax of its logits, and the goal selector's output
    o0 = jax.tree.map(lambda x: x[0], obs)
    logits, decided = _one_select(actor, selector_theta(actor), o0, adj[0],
                                  actor.initial_option(N), jnp.int32(0))  # fmt: skip
    np.testing.assert_array_equal(np.asarray(option.skill[0]), np.asarray(logits.argmax(-1)))
    np.testing.assert_allclose(np.asarray(option.goal[0]), np.asarray(decided.goal), atol=1e-6)
    assert np.all(np.abs(np.asarray(decided.goal)) < 1.0)
    # env 1 kept its previous options
    np.testing.assert_array_equal(np.asarray(option.skill[1]), 2)
    np.testing.assert_array_equal(np.asarray(option.goal[1]), 0.5)
    # evaluate() of the stored action reproduces act's log-prob and entropy
    np.testing.assert_allclose(np.asarray(lp), np.asarray(out.log_prob), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent), np.asarray(out.entropy), rtol=1e-6)
    # a bare skill array is refused when the actor also sets sub-goals
    with pytest.raises(TypeError, match="carry a GoalOption"):
        actor.select_option(o0, adj[0], jnp.zeros(N, jnp.int32), 0)
    with pytest.raises(ValueError, match="selector_period"):
        ActorConfig(selector_period=0)


def test_selector_is_a_few_percent_at_default_sizes():
    from envs.coverage import Coverage

    env = Coverage()
    actor = FeudalActor.from_env(jax.random.key(0), env)
    share = count_params(actor.selector) / count_params(actor)
    assert share < 0.03, share


# ----------------------------------------------------------------------------- bundled envs
step_jit = eqx.filter_jit(lambda a, k, o, adj, s, t, det: a.step(k, o, adj, s, t, det))
PERIOD_4 = ActorConfig(selector_period=4)
DEFAULT_ACTORS: dict[int, FeudalActor] = {}


@pytest.mark.parametrize(
    "name",
    ["Coverage", "Discovery", pytest.param("Dispersion", marks=pytest.mark.slow)],
)  # Dispersion's observations have Discovery's shapes: slow-only, to save a compile
def test_actor_runs_on_bundled_envs_default_size(name):
    import envs

    env = getattr(envs, name)()
    obs, state = jax.jit(env.reset)(jax.random.key(0))
    adj = env.comm_graph(state)
    actor = FeudalActor.from_env(jax.random.key(1), env, PERIOD_4)
    n = env.num_agents
    skill, out = step_jit(actor, jax.random.key(2), obs, adj, actor.initial_option(n),
                          jnp.int32(0), jnp.bool_(False))  # fmt: skip
    assert skill.shape == (n,) and skill.dtype == jnp.int32
    assert bool(jnp.all((skill >= 0) & (skill < env.num_skills)))
    assert out.action.shape == (n, *env.action_space.shape) and out.action.dtype == jnp.float32
    assert out.log_prob.shape == (n,) and bool(jnp.all(jnp.isfinite(out.log_prob)))
    assert all(env.action_space.contains(np.asarray(a)) for a in out.env_action)
    if name == "Coverage":
        DEFAULT_ACTORS[n] = actor


def test_actor_at_256_agents_is_local():
    """256 Coverage agents on the env's comm graph; then, with a block-diagonal graph of 32
    groups of 8, each group's skills and mode actions equal those computed on that group
    alone (the K-hop filter only mixes neighbours)."""
    from envs.coverage import Coverage

    env = Coverage(num_agents=256)
    obs, state = jax.jit(env.reset)(jax.random.key(0))
    actor = DEFAULT_ACTORS.get(8) or FeudalActor.from_env(jax.random.key(1), Coverage(), PERIOD_4)
    key, t0, det = jax.random.key(2), jnp.int32(0), jnp.bool_(True)
    _, out = step_jit(actor, key, obs, env.comm_graph(state), actor.initial_option(256), t0,
                      jnp.bool_(False))  # fmt: skip
    assert out.action.shape == (256, 2) and bool(jnp.all(jnp.isfinite(out.log_prob)))
    blocks = jnp.asarray(np.kron(np.eye(32), random_graph(1, 8, p=0.6)), jnp.float32)
    skill, out = step_jit(actor, key, obs, blocks, actor.initial_option(256), t0, det)
    for g in (0, 17):
        sl = slice(8 * g, 8 * g + 8)
        obs_g = {k: v[sl] for k, v in obs.items()}
        skill_g, out_g = step_jit(actor, key, obs_g, blocks[sl, sl], actor.initial_option(8),
                                  t0, det)  # fmt: skip
        np.testing.assert_array_equal(np.asarray(skill[sl]), np.asarray(skill_g))
        np.testing.assert_allclose(np.asarray(out.action[sl]), np.asarray(out_g.action),
                                   rtol=1e-4, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("in_ch,out_ch,kernel,stride,h,w", [
    (3, 8, 3, 1, 9, 9), (2, 3, 5, 2, 11, 7),
])
def test_conv2d_and_its_custom_gradient_match_a_channel_first_xla_conv(in_ch, out_ch, kernel,
                                                                        stride, h, w):
    """``Conv2d`` (channel-last conv, im2col kernel gradient) == ``lax.conv`` in NCHW,
    values and gradients w.r.t. kernel, bias and input."""
    from agents.layers import Conv2d

    conv = Conv2d(jax.random.key(0), in_ch, out_ch, kernel, stride, 1.0)
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((3, in_ch, h, w)), jnp.float32)
    pad = kernel // 2

    def ref(weight, bias, x):
        y = jax.lax.conv_general_dilated(x, weight, (stride, stride), [(pad, pad)] * 2)
        return y + bias[:, None, None]

    def ours(weight, bias, x):
        m = eqx.tree_at(lambda c: (c.weight, c.bias), conv, (weight, bias))
        return jax.vmap(m)(x)

    y_ref = ref(conv.weight, conv.bias, x)
    np.testing.assert_allclose(ours(conv.weight, conv.bias, x), y_ref, rtol=1e-5, atol=1e-5)
    cot = jnp.asarray(rng.standard_normal(y_ref.shape), jnp.float32)
    grads = [jax.grad(lambda *a, f=f: (f(*a) * cot).sum(), argnums=(0, 1, 2))(
        conv.weight, conv.bias, x) for f in (ref, ours)]
    for g_ref, g_ours in zip(*grads, strict=True):
        np.testing.assert_allclose(g_ours, g_ref, rtol=1e-4, atol=1e-4)


# --- how options are chosen -----------------------------------------------------------
@pytest.mark.slow  # ~20-30 s of sampling; test_select_holds_... covers the plumbing
def test_option_exploration_mixes_uniform_options_as_configured():
    """At decision steps a fraction ``explore`` of the options is uniformly random (so
    about explore * (K - 1) / K differ from the selector's argmax); off decision steps
    the held option stays; explore 0 is exactly the argmax; "uniform" and "fixed"."""
    k, n, trials = 4, 64, 200
    obs_space = spaces.Box(-1, 1, (5,), np.float32)
    act = spaces.Box(-1, 1, (2,), np.float32)
    actor = FeudalActor(jax.random.key(0), obs_space, act, k,
                        ActorConfig(gnn_layers=0, selector_period=4))
    obs = jax.random.normal(jax.random.key(1), (n, 5))
    adj = jnp.zeros((n, n))
    option0 = jnp.zeros(n, jnp.int32)
    greedy = np.asarray(actor.skill_logits(obs, adj).argmax(-1))
    def pick(keys, t, explore):  # explore is static: a Python float
        return jax.vmap(lambda key: actor.step(key, obs, adj, option0, t, True, explore)[0])(
            keys)

    keys = jax.random.split(jax.random.key(2), trials)
    for explore in (0.0, 0.25, 0.6):
        skills = np.asarray(pick(keys, 0, explore))
        differ = (skills != greedy).mean()
        want = explore * (k - 1) / k
        assert abs(differ - want) < 0.02, (explore, differ, want)  # 12800 draws: 5 sigma
        assert np.bincount(skills[skills != greedy], minlength=k).min() > 0 or explore == 0
    np.testing.assert_array_equal(np.asarray(pick(keys, 0, 0.0)), np.tile(greedy, (trials, 1)))
    np.testing.assert_array_equal(np.asarray(pick(keys, 3, 0.6)), 0)  # not a decision step
    uniform = FeudalActor(jax.random.key(0), obs_space, act, k,
                          ActorConfig(gnn_layers=0, options="uniform", selector_period=4))
    counts = np.bincount(np.asarray(jax.vmap(lambda key: uniform.step(
        key, obs, adj, option0, 0, True)[0])(keys)).ravel(), minlength=k)
    assert np.abs(counts / counts.sum() - 1 / k).max() < 0.02
    fixed = FeudalActor(jax.random.key(0), obs_space, act, k,
                        ActorConfig(gnn_layers=0, options="fixed", fixed_option=2,
                                    selector_period=4))
    np.testing.assert_array_equal(np.asarray(fixed.step(keys[0], obs, adj, option0, 0)[0]), 2)
    with pytest.raises(ValueError, match="fixed_option=4"):
        FeudalActor(jax.random.key(0), obs_space, act, k,
                    ActorConfig(options="fixed", fixed_option=4))
    with pytest.raises(ValueError, match="options"):
        ActorConfig(options="random")
