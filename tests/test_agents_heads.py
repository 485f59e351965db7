"""Executor distributions, centralized critic and configs, against numpy hand computations."""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium import spaces

from agents import (
    ActorConfig,
    CategoricalHead,
    CentralCritic,
    CriticConfig,
    FeudalActor,
    GaussianHead,
)

CFG = ActorConfig(executor_hidden=(8,))
N, IN = 5, 4
X = jnp.asarray(np.random.default_rng(0).standard_normal((N, IN)), jnp.float32)


@eqx.filter_jit
def run(head, key, x, deterministic, action):
    """One compile per head: sample, evaluate the sample, evaluate a given action."""
    out = head.sample(key, x, deterministic)
    return out, head.evaluate(x, out.action), head.evaluate(x, action)


def _set_mean(head: GaussianHead, mu: np.ndarray) -> GaussianHead:
    """Make the canonical mean independent of the input: zero last weight, bias = mu."""
    last = head.mean.layers[-1]
    new_last = eqx.tree_at(lambda m: (m.weight, m.bias), last,
                           (jnp.zeros_like(last.weight), jnp.asarray(mu, jnp.float32)))  # fmt: skip
    return eqx.tree_at(lambda h: h.mean.layers[-1], head, new_last)


def _normal_logpdf(x, mean, std):
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std) - 0.5 * math.log(2 * math.pi)


def test_gaussian_clip_log_prob_and_rescaling():
    """One Box mixing [-1, 1]^2, [0, 1]^5 and uneven bounds: mode rescaling, the sample, its
    log-prob and entropy by hand, and clipping for the env."""
    low = np.array([-1, -1, 0, 0, 0, 0, 0, -2, 0, 10], np.float32)
    high = np.array([1, 1, 1, 1, 1, 1, 1, 2, 1, 20], np.float32)
    space = spaces.Box(low, high, dtype=np.float32)
    a = low.size
    mu = np.array([-1, 1, -1, -0.5, 0, 0.5, 1, 0.25, -0.9, 0.6], np.float32)  # canonical
    head = _set_mean(GaussianHead(jax.random.key(1), IN, space, CFG), mu)
    center, half = (high + low) / 2, (high - low) / 2
    # deterministic mode: low + (mu + 1) / 2 * (high - low), e.g. [0, .25, .5, .75, 1] on [0,1]
    det, _, _ = run(head, jax.random.key(2), X, True, jnp.zeros((N, a)))
    want_mode = low + (mu + 1.0) / 2.0 * (high - low)
    np.testing.assert_allclose(np.asarray(det.action), np.broadcast_to(want_mode, (N, a)),
                               rtol=1e-6, atol=1e-6)  # fmt: skip
    # stochastic: same normal draw by hand, log-prob / entropy by formula, clip for the env
    key = jax.random.key(3)
    out, (lp_own, _), (lp_mode, _) = run(head, key, X, False, det.action)
    eps = np.asarray(jax.random.normal(key, (N, a)))
    std = half * np.exp(CFG.log_std_init)
    x = center + half * mu + std * eps
    np.testing.assert_allclose(np.asarray(out.action), x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out.env_action), np.clip(x, low, high), atol=1e-5)
    assert np.any(x < low) or np.any(x > high)  # the clip is exercised
    want_lp = _normal_logpdf(x, center + half * mu, std).sum(-1)
    np.testing.assert_allclose(np.asarray(out.log_prob), want_lp, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(lp_own), want_lp, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(lp_mode), np.full(N, -np.log(std).sum()
                               - 0.5 * a * math.log(2 * math.pi)), rtol=1e-5)  # fmt: skip
    want_ent = np.sum(0.5 + 0.5 * math.log(2 * math.pi) + np.log(std))
    np.testing.assert_allclose(np.asarray(out.entropy), np.full(N, want_ent), rtol=1e-5)


def test_gaussian_any_shape():
    space = spaces.Box(-3.0, 5.0, shape=(2, 3), dtype=np.float32)
    head = GaussianHead(jax.random.key(1), IN, space, CFG)
    out, (lp, _), _ = run(head, jax.random.key(2), X, False, jnp.zeros((N, 2, 3)))
    assert out.action.shape == (N, 2, 3) and out.log_prob.shape == (N,)
    np.testing.assert_allclose(np.asarray(lp), np.asarray(out.log_prob), rtol=1e-5, atol=1e-5)


def test_gaussian_squash_log_prob_is_a_density():
    """tanh-squashed Gaussian on Box([0, 3]): log-prob equals the change-of-variables
    formula, and exp(log_prob) integrates to 1 over the interval."""
    cfg = ActorConfig(executor_hidden=(8,), squash=True, log_std_init=0.0)
    space = spaces.Box(0.0, 3.0, shape=(1,), dtype=np.float32)
    head = _set_mean(GaussianHead(jax.random.key(1), IN, space, cfg), np.array([0.3]))
    grid = np.linspace(0.0, 3.0, 30001)[1:-1]
    xg = jnp.asarray(np.repeat(np.asarray(X[:1]), grid.size, axis=0))
    out, (lp, _), (lp_grid, _) = run(head, jax.random.key(4), xg, False,
                                     jnp.asarray(grid[:, None], jnp.float32))  # fmt: skip
    a = np.asarray(out.action, np.float64)
    assert np.all((a > 0) & (a < 3)) and np.array_equal(a, np.asarray(out.env_action))
    u = np.arctanh((a - 1.5) / 1.5)
    want = (_normal_logpdf(u, 0.3, 1.0) - np.log(1.5 * (1 - np.tanh(u) ** 2))).sum(-1)
    np.testing.assert_allclose(np.asarray(out.log_prob), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(lp), want, rtol=1e-3, atol=1e-3)
    mass = np.trapezoid(np.exp(np.asarray(lp_grid, np.float64)), grid)
    assert abs(mass - 1.0) < 2e-3, mass
    with pytest.raises(ValueError, match="squash"):
        GaussianHead(jax.random.key(1), IN, spaces.Box(-np.inf, np.inf, (2,)), cfg)


def test_categorical_for_discrete():
    space = spaces.Discrete(5, start=2)
    head = CategoricalHead(jax.random.key(1), IN, space, CFG)
    logits = np.stack([_np_mlp(head.logits, x, False) for x in np.asarray(X)])
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    out, (lp, _), _ = run(head, jax.random.key(5), X, False, jnp.zeros(N, jnp.int32))
    act = np.asarray(out.action)
    assert out.action.dtype == jnp.int32 and np.all((act >= 0) & (act < 5))
    np.testing.assert_array_equal(np.asarray(out.env_action), act + 2)
    np.testing.assert_allclose(np.asarray(out.log_prob), logp[np.arange(N), act], rtol=1e-4)
    np.testing.assert_allclose(np.asarray(out.entropy), -(np.exp(logp) * logp).sum(-1), rtol=1e-5)
    det, _, _ = run(head, jax.random.key(5), X, True, jnp.zeros(N, jnp.int32))
    np.testing.assert_array_equal(np.asarray(det.action), logits.argmax(-1))
    np.testing.assert_allclose(np.asarray(lp), np.asarray(out.log_prob), rtol=1e-6)
    # evaluate's gradient (a one-hot product) is the indexed log-prob's: onehot - softmax
    def indexed(h, a):
        logp_all = jax.nn.log_softmax(jax.vmap(h.logits)(X))
        return jnp.take_along_axis(logp_all, a[:, None], axis=-1).sum()

    g_ours = eqx.filter_grad(lambda h, a: h.evaluate(X, a)[0].sum())(head, out.action)
    g_ref = eqx.filter_grad(indexed)(head, out.action)
    for a, b in zip(jax.tree.leaves(g_ours), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    # the actor picks the head from the action space
    obs_space = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
    small = ActorConfig(gnn_layers=1, gnn_features=8, embed_hidden=(), embed_dim=4,
                        executor_hidden=(8,), vec_hidden=())  # fmt: skip
    assert isinstance(FeudalActor(jax.random.key(0), obs_space, space, 2, small).executor.head,
                      CategoricalHead)  # fmt: skip
    with pytest.raises(TypeError, match="Box or Discrete"):
        FeudalActor(jax.random.key(0), obs_space, spaces.MultiBinary(3), 2, small)


def _np_mlp(mlp, x, layer_norm):
    for i, layer in enumerate(mlp.layers):
        x = np.asarray(layer.weight, np.float64) @ x + np.asarray(layer.bias, np.float64)
        if i < len(mlp.layers) - 1:
            if layer_norm:
                x = (x - x.mean()) / np.sqrt(x.var() + 1e-5)
                x = x * np.asarray(mlp.norms[i].scale) + np.asarray(mlp.norms[i].shift)
            x = np.tanh(x)
    return x


@pytest.mark.parametrize("layer_norm", [True, False])
def test_central_critic_equals_numpy(layer_norm):
    g, n, k = 7, 4, 3
    critic = CentralCritic(jax.random.key(0), g, n, k, CriticConfig((16, 16), layer_norm))
    gs = np.random.default_rng(0).standard_normal(g).astype(np.float32)
    skill = np.array([2, 0, 1, 2])
    values = critic(jnp.asarray(gs), jnp.asarray(skill))
    assert values.shape == (n,) and values.dtype == jnp.float32
    for i in range(n):
        inp = np.concatenate([gs, np.eye(n)[i], np.eye(k)[skill[i]]])
        np.testing.assert_allclose(float(values[i]), _np_mlp(critic.mlp, inp, layer_norm)[0],
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
    # PPO init gains: value output 1.0 (orthogonal rows have unit norm), hidden sqrt(2)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(critic.mlp.layers[-1].weight)), 1.0,
                               rtol=1e-5)  # fmt: skip
    w0 = np.asarray(critic.mlp.layers[0].weight)  # [16, 14]: orthonormal columns
    np.testing.assert_allclose(w0.T @ w0, 2.0 * np.eye(g + n + k), atol=1e-5)


def test_critic_time_input_appends_the_elapsed_fraction():
    """With ``time_input`` the critic's state is ``[global_state, t / horizon]`` and its
    values are the MLP of that (numpy oracle); without it the state is the global state."""
    g, n, k, horizon = 5, 3, 2, 10
    cfg = CriticConfig((16,), layer_norm=False, time_input=True)
    critic = CentralCritic(jax.random.key(0), g, n, k, cfg, horizon=horizon)
    gs = np.random.default_rng(1).standard_normal(g).astype(np.float32)
    skill = np.array([1, 0, 1])
    state = np.asarray(critic.state(jnp.asarray(gs), jnp.asarray(3, jnp.int32)))
    np.testing.assert_allclose(state, np.append(gs, 0.3), rtol=1e-6, atol=0)
    values = np.asarray(critic(jnp.asarray(state), jnp.asarray(skill)))
    for i in range(n):
        inp = np.concatenate([state, np.eye(n)[i], np.eye(k)[skill[i]]])
        np.testing.assert_allclose(values[i], _np_mlp(critic.mlp, inp, False)[0], rtol=1e-4,
                                   atol=1e-5)
    late = critic(critic.state(jnp.asarray(gs), jnp.asarray(9)), jnp.asarray(skill))
    assert np.all(np.asarray(late) != values)  # the time is an input the values depend on
    with pytest.raises(ValueError, match="horizon"):
        CentralCritic(jax.random.key(0), g, n, k, cfg)
    plain = CentralCritic(jax.random.key(0), g, n, k, CriticConfig((16,)), horizon=horizon)
    assert plain.horizon == 0 and plain.mlp.layers[0].weight.shape[1] == g + n + k
    np.testing.assert_array_equal(np.asarray(plain.state(jnp.asarray(gs), 3)), gs)


@pytest.mark.parametrize(
    "kwargs,err,field",
    [
        (dict(gnn_hops=-1), ValueError, "gnn_hops"),
        (dict(cnn_strides=(1, 2)), ValueError, "cnn_strides"),
        (dict(embed_dim=2.0), TypeError, "embed_dim"),
        (dict(executor_hidden=[64]), TypeError, "executor_hidden"),
        (dict(log_std_init=float("nan")), ValueError, "log_std_init"),
        (dict(squash=1), TypeError, "squash"),
    ],
)
def test_actor_config_errors_name_the_field(kwargs, err, field):
    with pytest.raises(err, match=field):
        ActorConfig(**kwargs)


def test_configs_are_frozen_and_critic_validated():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ActorConfig().embed_dim = 3
    with pytest.raises(ValueError, match="hidden"):
        CriticConfig(hidden=())
    with pytest.raises(TypeError, match="layer_norm"):
        CriticConfig(layer_norm="yes")
    assert ActorConfig.lpac().gnn_layers == 5 and ActorConfig.lpac().gnn_hops == 3


def test_executor_reads_the_row_of_the_option_it_holds():
    """``OPTION_OBS`` [N, K, F]: the executor's input gains row ``option_i`` of agent i (an
    exact copy), the backbone never sees the entry, and the other options' rows do not move
    the action."""
    from envs.base import OPTION_OBS

    k, f = 3, 2
    obs_space = spaces.Dict({"vec": spaces.Box(-1.0, 1.0, (3,), dtype=np.float32),
                             OPTION_OBS: spaces.Box(-1.0, 1.0, (k, f), dtype=np.float32)})
    act_space = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
    small = ActorConfig(gnn_layers=1, gnn_features=8, embed_hidden=(), embed_dim=4,
                        executor_hidden=(8,), vec_hidden=())  # fmt: skip
    actor = FeudalActor(jax.random.key(0), obs_space, act_space, k, small)
    assert actor.executor.option_features == f and set(actor.backbone.encoders) == {"vec"}
    rng = np.random.default_rng(1)
    obs = {"vec": jnp.asarray(rng.standard_normal((N, 3)), jnp.float32),
           OPTION_OBS: jnp.asarray(rng.standard_normal((N, k, f)), jnp.float32)}
    adj = jnp.ones((N, N)) - jnp.eye(N)
    option = jnp.asarray([0, 2, 1, 2, 0], jnp.int32)
    h = actor.embed(obs, adj)
    x = np.asarray(actor.executor.inputs(h, option, jnp.zeros((N, 0)), obs[OPTION_OBS]))
    held = np.asarray(obs[OPTION_OBS])[np.arange(N), np.asarray(option)]
    np.testing.assert_array_equal(x[:, -f:], held)
    np.testing.assert_array_equal(x[:, :4], np.asarray(h))
    np.testing.assert_array_equal(x[:, 4:4 + k], np.eye(k)[np.asarray(option)])

    act = eqx.filter_jit(lambda a, o: a.act(jax.random.key(2), o, adj, option, True).action)
    other = np.asarray(obs[OPTION_OBS]).copy()
    other[np.arange(N), (np.asarray(option) + 1) % k] += 5.0  # rows nobody holds
    moved = dict(obs, **{OPTION_OBS: jnp.asarray(other)})
    np.testing.assert_array_equal(np.asarray(actor.embed(moved, adj)), np.asarray(h))
    np.testing.assert_array_equal(np.asarray(act(actor, moved)), np.asarray(act(actor, obs)))
    other[np.arange(N), np.asarray(option)] += 5.0  # the held rows
    assert not np.allclose(np.asarray(act(actor, dict(obs, **{OPTION_OBS: jnp.asarray(other)}))),
                           np.asarray(act(actor, obs)))
    # misuse: the wrong option count, no per-option features at call time
    bad = spaces.Dict({"vec": obs_space["vec"], OPTION_OBS: spaces.Box(-1, 1, (k + 1, f))})
    with pytest.raises(ValueError, match=rf"'{OPTION_OBS}' must be .*\[{k}, F\]"):
        FeudalActor(jax.random.key(0), bad, act_space, k, small)
    with pytest.raises(ValueError, match="per-option features"):
        actor.executor.inputs(h, option, jnp.zeros((N, 0)))


@pytest.mark.parametrize("mode", ["own", "both"])
def test_selector_reads_its_own_input_and_the_backbone_does_not(mode):
    """``ActorConfig.selector_input``: the selector's logits are its MLP of
    ``SELECTOR_OBS`` ("own") or of ``[h, SELECTOR_OBS]`` ("both"), computed here by hand
    from its weights; the backbone never sees the entry, so the executor's action does not
    move with it; "own" does not move with the embedding. An env without the entry is
    refused."""
    from envs.base import SELECTOR_OBS

    k, s = 3, 4
    obs_space = spaces.Dict({"vec": spaces.Box(-1.0, 1.0, (3,), dtype=np.float32),
                             SELECTOR_OBS: spaces.Box(0.0, 1.0, (s,), dtype=np.float32)})
    act_space = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
    cfg = ActorConfig(gnn_layers=1, gnn_features=8, embed_hidden=(), embed_dim=4,
                      executor_hidden=(8,), vec_hidden=(), selector_input=mode)
    actor = FeudalActor(jax.random.key(0), obs_space, act_space, k, cfg)
    assert set(actor.backbone.encoders) == {"vec"}
    rng = np.random.default_rng(3)
    obs = {"vec": jnp.asarray(rng.standard_normal((N, 3)), jnp.float32),
           SELECTOR_OBS: jnp.asarray(rng.standard_normal((N, s)), jnp.float32)}
    adj = jnp.ones((N, N)) - jnp.eye(N)
    h = np.asarray(actor.embed(obs, adj))
    z = np.asarray(obs[SELECTOR_OBS]) if mode == "own" else np.concatenate(
        [h, np.asarray(obs[SELECTOR_OBS])], -1)
    (layer,) = actor.selector.skill.mlp.layers  # a linear selector
    want = z @ np.asarray(layer.weight).T + np.asarray(layer.bias)
    np.testing.assert_allclose(np.asarray(actor.skill_logits(obs, adj)), want, atol=1e-5)
    prev, t = jnp.zeros((N,), jnp.int32), jnp.asarray(0)
    np.testing.assert_array_equal(np.asarray(actor.select_option(obs, adj, prev, t)),
                                  np.argmax(want, -1))
    option, out = actor.step(jax.random.key(1), obs, adj, prev, t, deterministic=True)
    np.testing.assert_array_equal(np.asarray(option), np.argmax(want, -1))
    np.testing.assert_array_equal(  # step = select_option, then act on the same h
        np.asarray(out.action),
        np.asarray(actor.act(jax.random.key(1), obs, adj, option, True).action))
    # the selector's entry moves neither h nor the action for a held option
    moved = dict(obs, **{SELECTOR_OBS: obs[SELECTOR_OBS] + 3.0})
    np.testing.assert_array_equal(np.asarray(actor.embed(moved, adj)), h)
    np.testing.assert_array_equal(
        np.asarray(actor.act(jax.random.key(2), moved, adj, option, True).action),
        np.asarray(actor.act(jax.random.key(2), obs, adj, option, True).action))
    if mode == "own":  # the embedding's input does not move the selector
        other = dict(obs, vec=obs["vec"] + 1.0)
        np.testing.assert_array_equal(np.asarray(actor.skill_logits(other, adj)),
                                      np.asarray(actor.skill_logits(obs, adj)))
    with pytest.raises(ValueError, match=f"'{SELECTOR_OBS}', which this env does not have"):
        FeudalActor(jax.random.key(0), spaces.Dict({"vec": obs_space["vec"]}), act_space, k,
                    cfg)
    with pytest.raises(ValueError, match="selector_input must be one of"):
        ActorConfig(selector_input="mine")
