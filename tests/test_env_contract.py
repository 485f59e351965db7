"""One contract test over every env id: the functional core (``envs.base.SwarmEnv``) and,
for the bundled ids, its PettingZoo and Gymnasium adapters.

Parametrized (in the spirit of JaxMARL's single test over every registered env) over

- every bundled env id (``feudal_es/<Name>-v0`` for ``envs.registration``'s
  ``available_bundled_envs()``), registered explicitly with ``register_bundled_envs()``;
- a listed set of JaxMARL ids that the JaxMARL bridge (``envs.jaxmarl_env.make_jaxmarl``)
  accepts: Discrete actions (3 agents) and Box actions (4 agents); skipped, with the
  reason, when ``jaxmarl`` is not installed.

Checks per id (each can fail; none depends on another test module):

- shapes/dtypes: obs leaves ``[N, *observation_space[k].shape]`` float32 and in the
  per-agent space (finite), actions ``[N, *action_space.shape]`` accepted, ``reward[N]``,
  ``skill_rewards[N, K]`` with ``K == len(skill_names)``, ``team_reward[]``, ``done[]``
  bool, scalar metrics, ``global_state -> [global_state_size]``, ``comm_graph -> [N, N]``
  0/1 symmetric with a zero diagonal, the state's pytree (shapes, dtypes) kept by ``step``
  (a ``lax.scan`` carry), and ``observe(state)`` equal to the obs that reset/step return;
- determinism under a key: the same key twice gives bit-identical obs/state/outs (the
  same program both times, so exact equality is asked), a fresh trace of ``reset`` the
  same program, and different keys different resets (every listed env is random at
  reset);
- auto-reset: ``envs.base.auto_reset_step`` over two episodes: ``done`` exactly at each
  horizon, the returned state a fresh episode (``t == 0``, not the continued state, obs
  = ``observe(state)``), no reset in between;
- jit/vmap: ``jax.jit(jax.vmap(env.step))`` over 2 envs, two steps, against a Python loop
  of eager steps (different programs: float tolerance, see ``RTOL``/``ATOL``/
  ``ATOL_REWARD``);
- bundled ids: ``pettingzoo.make("parallel", id)`` (``SwarmParallelEnv``) against the
  core stepped by hand with the adapter's documented key derivation (obs per agent,
  rewards, ``infos`` ``skill_rewards``/``team_reward``/metrics, ``state()``,
  ``comm_graph()``, truncation at the horizon), PettingZoo's ``parallel_api_test``, and
  ``envs.gym_wrappers.SwarmGymEnv`` against the same reference.

Speed: tiny configurations (3-4 agents, 4-5 step episodes, 4x4 maps). Compile time
dominates on a 2-core CPU, and an eager call is no cheaper: it compiles each primitive
on its own (an eager ``reset`` measured 2-4x one jit compile of it; an eager ``step``
about 100 small compiles). So per env the module compiles what it tests (the vmapped
step, the adapters' own functions, the eager step the vmap test compares with) plus one
jitted ``reset`` shared by every test; the other tests reuse those: ``step`` and the state
views eagerly, ``auto_reset_step`` eagerly over the env with the shared jitted ``reset``
(a jitted ``auto_reset_step`` would compile ``reset`` and ``step`` once more per env).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pettingzoo
import pytest
from gymnasium import spaces
from pettingzoo.test import parallel_api_test

from envs.base import SwarmEnv, auto_reset_step
from envs.gym_wrappers import SwarmGymEnv
from envs.pettingzoo_env import SwarmParallelEnv
from envs.registration import (
    BUNDLED_ENVS,
    available_bundled_envs,
    env_id,
    load_env_class,
    register_bundled_envs,
)

# Tolerance wherever two *different* programs compute the same values (jit vs eager,
# vmap vs loop, the adapters' jitted step vs the eager core): XLA may fuse and reorder
# float ops differently, so results agree to float32 rounding, not bit for bit.
RTOL, ATOL = 1e-5, 1e-6
# ... except the rewards (EnvOut's reward, skill_rewards, team_reward, metrics and the
# adapters' copies): several are a change of O(1) positions divided by max_speed (x33 in
# Discovery/Dispersion), which magnifies float32 rounding. Measured eager vs jit: up to
# 2e-6 after 3 steps; a wrong key, step order or channel differs by O(0.01-1).
ATOL_REWARD = 1e-4
_REWARD_FIELDS = ("reward", "metrics")  # path fragments that name a reward-like leaf

HORIZON = 4  # max_steps of every bundled configuration here
SEED = 7  # the adapters' reset seed

# Constructor kwargs per bundled env: 3 agents, HORIZON-step episodes, 4x4 maps (maps and
# vector obs for Coverage and Discovery, vector obs only elsewhere: compile time). A
# bundled env not listed here gets _COMMON only.
_COMMON = {"num_agents": 3, "max_steps": HORIZON}
_EXTRA: dict[str, dict[str, Any]] = {
    "Coverage": dict(grid_size=8, map_size=4, num_features=2, global_map_size=4),
    "Discovery": dict(map_size=4, obs_mode="both"),
    "Dispersion": dict(map_size=4, obs_mode="vec"),  # its maps are Discovery's code
    "Rover": dict(map_size=4, obs_mode="vec", coupling=2, num_pois=2),
    "RoverMERL": dict(coupling=2, num_pois=2),
}

# JaxMARL ids and make kwargs (``max_steps=4``: 5-step episodes through the bridge).
JAXMARL: dict[str, dict[str, Any]] = {
    "MPE_simple_spread_v3": {"max_steps": 4},  # 3 agents, Discrete(5)
    "MPE_simple_facmac_v1": {"max_steps": 4},  # 4 agents, Box(0, 1, (5,))
}
_JAXMARL_PREFIX = "jaxmarl/"
_HAVE_JAXMARL = importlib.util.find_spec("jaxmarl") is not None
_NO_JAXMARL = 'jaxmarl is not installed (pip install -e ".[jaxmarl]")'

BUNDLED_IDS = [env_id(name) for name in available_bundled_envs()]
JAXMARL_IDS = [
    pytest.param(_JAXMARL_PREFIX + name,
                 marks=pytest.mark.skipif(not _HAVE_JAXMARL, reason=_NO_JAXMARL))
    for name in JAXMARL
]
ALL_IDS = [*BUNDLED_IDS, *JAXMARL_IDS]


def _name(eid: str) -> str:
    """``feudal_es/Coverage-v0`` -> ``Coverage``."""
    return eid.split("/", 1)[1].rsplit("-v", 1)[0]


def bundled_kwargs(eid: str) -> dict[str, Any]:
    return {**_COMMON, **_EXTRA.get(_name(eid), {})}


@functools.cache
def make_core(eid: str) -> SwarmEnv:
    """The functional core of ``eid`` (one instance per id for the whole module)."""
    if eid.startswith(_JAXMARL_PREFIX):
        name = eid.removeprefix(_JAXMARL_PREFIX)
        try:
            from envs.jaxmarl_env import make_jaxmarl
            return make_jaxmarl(name, **JAXMARL[name])
        except ImportError as e:  # installed but broken
            pytest.skip(f"jaxmarl is not importable: {e}")
    return load_env_class(BUNDLED_ENVS[_name(eid)])(**bundled_kwargs(eid))


@functools.cache
def compiled(eid: str, what: str) -> Any:
    """The env's jitted ``reset`` or ``vmap``-ed ``step``, compiled once per module and
    shared by the tests."""
    env = make_core(eid)
    return jax.jit({"reset": env.reset, "vmap_step": jax.vmap(env.step)}[what])


def with_jitted_reset(eid: str) -> Any:
    """The env as ``auto_reset_step`` sees it: its own ``step`` and ``observe`` (the
    latter only where the env defines one, as ``auto_reset_step`` checks the type), its
    ``reset`` the shared jitted one."""
    env = make_core(eid)
    attrs: dict[str, Any] = {"step": staticmethod(env.step),
                             "reset": staticmethod(compiled(eid, "reset"))}
    if overrides_observe(env):
        attrs["observe"] = staticmethod(env.observe)
    return type(f"{type(env).__name__}WithJittedReset", (), attrs)()


def sample_actions(env: SwarmEnv, rng: np.random.Generator, batch: tuple[int, ...] = ()
                   ) -> np.ndarray:
    """Random actions ``[*batch, N, *action_space.shape]`` from the per-agent space."""
    space = env.action_space
    shape = (*batch, env.num_agents)
    if isinstance(space, spaces.Discrete):
        return rng.integers(space.start, space.start + space.n, shape).astype(np.int32)
    assert isinstance(space, spaces.Box), f"unsupported action space {space}"
    low = np.broadcast_to(space.low, space.shape)
    high = np.broadcast_to(space.high, space.shape)
    return rng.uniform(low, high, (*shape, *space.shape)).astype(space.dtype)


def _host(leaf: Any) -> np.ndarray:
    if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    return np.asarray(leaf)


def _flat(tree: Any) -> list[tuple[str, np.ndarray]]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path), _host(leaf)) for path, leaf in leaves]


def assert_identical(a: Any, b: Any, what: str) -> None:
    """Same pytree structure, shapes, dtypes and bits (NaNs equal)."""
    assert jax.tree.structure(a) == jax.tree.structure(b), what
    for (path, x), (_, y) in zip(_flat(a), _flat(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, (what + path, x.dtype, y.dtype)
        np.testing.assert_array_equal(x, y, err_msg=what + path)


def assert_close(a: Any, b: Any, what: str) -> None:
    """Same structure, shapes and dtypes; floats to RTOL and ATOL (ATOL_REWARD for the
    rewards), anything else exactly."""
    assert jax.tree.structure(a) == jax.tree.structure(b), what
    for (path, x), (_, y) in zip(_flat(a), _flat(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, (what + path, x.shape, y.shape,
                                                          x.dtype, y.dtype)
        if np.issubdtype(x.dtype, np.floating):
            atol = ATOL_REWARD if any(f in path for f in _REWARD_FIELDS) else ATOL
            np.testing.assert_allclose(x, y, rtol=RTOL, atol=atol, err_msg=what + path)
        else:
            np.testing.assert_array_equal(x, y, err_msg=what + path)


def differs(a: Any, b: Any) -> bool:
    """Whether two same-structured pytrees differ in any leaf."""
    return any(not np.array_equal(x, y) for (_, x), (_, y) in zip(_flat(a), _flat(b),
                                                                  strict=True))


def overrides_observe(env: SwarmEnv) -> bool:
    return getattr(type(env), "observe", SwarmEnv.observe) is not SwarmEnv.observe


def episode_t(state: Any) -> int | None:
    """The state's step counter within the episode, where the state carries one."""
    t = getattr(state, "t", None)
    return None if t is None else int(t)


# --- contract checks on single values ---------------------------------------------------
def check_obs(env: SwarmEnv, obs: Any, where: str) -> None:
    space = env.observation_space
    assert isinstance(space, spaces.Dict), f"{where}: observation_space {space}"
    assert isinstance(obs, dict) and set(obs) == set(space.spaces), (
        f"{where}: obs keys {sorted(obs) if isinstance(obs, dict) else type(obs)} "
        f"!= observation_space keys {sorted(space.spaces)}")
    n = env.num_agents
    for name, box in space.spaces.items():
        leaf = np.asarray(obs[name])
        assert leaf.shape == (n, *box.shape), f"{where}: obs[{name!r}] {leaf.shape}"
        assert leaf.dtype == box.dtype == np.float32, f"{where}: obs[{name!r}] {leaf.dtype}"
        for i in range(n):
            assert box.contains(leaf[i]), (
                f"{where}: agent {i}'s obs[{name!r}] is not in {box} (NaN or out of bounds)")


def check_out(env: SwarmEnv, out: Any, where: str) -> None:
    n, k = env.num_agents, len(env.skill_names)
    assert k >= 1 and env.num_skills == k, f"{where}: skill_names {env.skill_names}"
    expect = {"reward": ((n,), np.float32), "skill_rewards": ((n, k), np.float32),
              "team_reward": ((), np.float32), "done": ((), np.bool_)}
    for field, (shape, dtype) in expect.items():
        value = np.asarray(getattr(out, field))
        assert value.shape == shape and value.dtype == dtype, (
            f"{where}: {field} {value.shape} {value.dtype}, expected {shape} {dtype.__name__}")
        if dtype is np.float32:
            assert np.isfinite(value).all(), f"{where}: {field} not finite: {value}"
    assert isinstance(out.metrics, dict), f"{where}: metrics {type(out.metrics)}"
    for name, value in out.metrics.items():
        value = np.asarray(value)
        assert value.shape == () and np.issubdtype(value.dtype, np.floating), (
            f"{where}: metrics[{name!r}] {value.shape} {value.dtype}")
        assert np.isfinite(value), f"{where}: metrics[{name!r}] = {value}"


def check_state_views(env: SwarmEnv, state: Any, obs: Any, where: str) -> None:
    n = env.num_agents
    gs = np.asarray(env.global_state(state))
    assert gs.shape == (env.global_state_size,) and gs.dtype == np.float32, (
        f"{where}: global_state {gs.shape} {gs.dtype}, size {env.global_state_size}")
    assert np.isfinite(gs).all(), f"{where}: global_state not finite"
    np.testing.assert_allclose(np.asarray(env.global_state_at(state, obs)), gs, rtol=RTOL,
                               atol=ATOL, err_msg=f"{where}: global_state_at != global_state")
    adj = np.asarray(env.comm_graph(state))
    assert adj.shape == (n, n) and adj.dtype == np.float32, (
        f"{where}: comm_graph {adj.shape} {adj.dtype}")
    assert np.isin(adj, (0.0, 1.0)).all(), f"{where}: comm_graph not 0/1:\n{adj}"
    np.testing.assert_array_equal(adj, adj.T, err_msg=f"{where}: comm_graph not symmetric")
    np.testing.assert_array_equal(np.diag(adj), 0.0, err_msg=f"{where}: comm_graph diagonal")
    if overrides_observe(env):  # auto_reset_step relies on obs being a function of state
        assert_close(env.observe(state), obs, f"{where}: observe(state) vs returned obs")


def same_layout(a: Any, b: Any) -> bool:
    """Same pytree structure, leaf shapes and dtypes (what a scan carry must keep)."""
    spec = lambda t: jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), t)
    return (jax.tree.structure(a) == jax.tree.structure(b)
            and jax.tree.leaves(spec(a)) == jax.tree.leaves(spec(b)))


# --- the core -----------------------------------------------------------------------------
def test_parametrization_covers_every_bundled_env():
    """The ids above are exactly what ``register_bundled_envs`` registers (every bundled
    env whose module exists), all made by PettingZoo's registry; the JaxMARL ids are ones
    the bridge lists."""
    registered = register_bundled_envs()
    assert registered == BUNDLED_IDS and registered, registered
    assert all(i in pettingzoo.parallel_registry for i in registered)
    stale = set(_EXTRA) - set(BUNDLED_ENVS)
    assert not stale, f"_EXTRA names envs that are not bundled: {stale}"
    if _HAVE_JAXMARL:
        from envs.jaxmarl_env import jaxmarl_ids

        missing = set(JAXMARL) - set(jaxmarl_ids())
        assert not missing, f"not offered by envs.jaxmarl_env.jaxmarl_ids(): {missing}"


@pytest.mark.parametrize("eid", ALL_IDS)
def test_shapes_and_dtypes(eid):
    env = make_core(eid)
    rng = np.random.default_rng(0)
    obs, state = compiled(eid, "reset")(jax.random.key(0))
    check_obs(env, obs, "reset")
    check_state_views(env, state, obs, "reset")
    for t in range(2):
        actions = sample_actions(env, rng)
        assert env.action_space.contains(actions[0]), (env.action_space, actions[0])
        obs, next_state, out = env.step(jax.random.key(100 + t), state, jnp.asarray(actions))
        where = f"step {t + 1}"
        check_obs(env, obs, where)
        check_out(env, out, where)
        check_state_views(env, next_state, obs, where)
        assert same_layout(state, next_state), f"{where}: step changed the state's layout"
        state = next_state


@pytest.mark.parametrize("eid", ALL_IDS)
def test_deterministic_under_a_key(eid):
    env = make_core(eid)
    actions = jnp.asarray(sample_actions(env, np.random.default_rng(1)))
    key, step_key = jax.random.key(11), jax.random.key(12)
    reset = compiled(eid, "reset")
    first, second = reset(key), reset(key)
    # the same program on the same key: bit-identical (so are the eager steps below)
    assert_identical(first, second, "reset(key) twice")
    assert_identical(env.step(step_key, first[1], actions),
                     env.step(step_key, second[1], actions), "step(key, state, a) twice")
    # and tracing reset afresh gives the same program (no host-side randomness or state
    # baked into it at trace time; the eager steps above re-run their Python each call)
    def fresh(k):
        return env.reset(k)

    fresh.__name__ = "reset"  # the HLO module's name, as the shared jit's
    assert jax.jit(fresh).lower(key).as_text() == reset.lower(key).as_text(), (
        "reset traces to a different program each time")
    other = reset(jax.random.key(13))
    assert differs(first[1], other[1]), "reset with a different key gave the same state"
    assert differs(first[0], other[0]), "reset with a different key gave the same obs"


@pytest.mark.parametrize("eid", ALL_IDS)
def test_auto_reset_starts_a_fresh_episode_at_the_horizon(eid):
    env = make_core(eid)
    horizon = env.max_steps
    rng = np.random.default_rng(2)
    obs, state = compiled(eid, "reset")(jax.random.key(3))
    seen = with_jitted_reset(eid)
    keys = jax.random.split(jax.random.key(4), 2 * horizon)
    for t in range(1, 2 * horizon + 1):
        actions = jnp.asarray(sample_actions(env, rng))
        prev = state
        obs, state, out = auto_reset_step(seen, keys[t - 1], prev, actions)
        at_horizon = t % horizon == 0
        assert bool(out.done) == at_horizon, f"step {t}: done={bool(out.done)}, horizon {horizon}"
        if episode_t(state) is not None:
            assert episode_t(state) == t % horizon, f"step {t}: state.t = {episode_t(state)}"
        if getattr(state, "over", None) is not None:  # the JaxMARL bridge's latch
            assert not bool(state.over), f"step {t}: the returned state is over"
        if at_horizon:
            cont_obs, cont_state, cont_out = env.step(keys[t - 1], prev, actions)
            assert bool(cont_out.done)
            assert differs(state, cont_state) and differs(obs, cont_obs), (
                f"step {t}: auto_reset_step returned the finished episode, not a fresh one")
            assert same_layout(state, cont_state)
            if overrides_observe(env):
                assert_close(env.observe(state), obs, f"step {t}: obs of the fresh episode")


@pytest.mark.parametrize("eid", ALL_IDS)
def test_jit_vmap_step_equals_a_loop_of_eager_steps(eid):
    env = make_core(eid)
    rng = np.random.default_rng(5)
    reset = compiled(eid, "reset")
    loop_states = [reset(k)[1] for k in jax.random.split(jax.random.key(21), 2)]
    batch_state = jax.tree.map(lambda *xs: np.stack([_host(x) for x in xs]), *loop_states)
    vstep = compiled(eid, "vmap_step")  # jax.jit(jax.vmap(env.step))
    for t in range(2):  # two steps: the second reuses the compiled step on its own output
        keys = jax.random.split(jax.random.key(22 + t), 2)
        actions = jnp.asarray(sample_actions(env, rng, (2,)))
        batched = vstep(keys, batch_state, actions)
        for i in range(2):
            looped = env.step(keys[i], loop_states[i], actions[i])
            # jit+vmap and the eager loop are different programs: compared to
            # RTOL/ATOL (rewards ATOL_REWARD), not bit for bit
            assert_close(jax.tree.map(lambda x, i=i: _host(x)[i], batched), looped,
                         f"step {t + 1}, env {i}: jit(vmap(step)) vs eager step")
            loop_states[i] = looped[1]
        batch_state = batched[1]


# --- adapters (bundled ids) ---------------------------------------------------------------
@functools.cache
def reference(eid: str, seed: int = SEED) -> tuple[list[np.ndarray], list[tuple]]:
    """One episode of the core (eager steps) with the adapters' documented key
    derivation (``key(seed)``; ``key, k = split(key)`` before the reset and before each
    step), on fixed random actions: ``(actions, [(obs, out | None, state), ...])``."""
    core = make_core(eid)
    rng = np.random.default_rng(seed)
    actions = [sample_actions(core, rng) for _ in range(core.max_steps)]
    key = jax.random.key(seed)
    key, sub = jax.random.split(key)
    obs, state = compiled(eid, "reset")(sub)
    frames = [(obs, None, state)]
    for a in actions:
        key, sub = jax.random.split(key)
        obs, state, out = core.step(sub, state, jnp.asarray(a))
        frames.append((obs, out, state))
    return actions, frames


def _close(actual: Any, expected: Any, what: str, atol: float = ATOL) -> None:
    # the adapters' jitted step vs the eager core: different programs, to RTOL/atol
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=RTOL, atol=atol,
                               err_msg=what)


def _close_reward(actual: Any, expected: Any, what: str) -> None:
    _close(actual, expected, what, atol=ATOL_REWARD)


@pytest.mark.parametrize("eid", BUNDLED_IDS)
def test_pettingzoo_adapter_equals_the_core(eid):
    register_bundled_envs()
    env = pettingzoo.make("parallel", eid, **bundled_kwargs(eid))
    core = make_core(eid)
    assert isinstance(env, SwarmParallelEnv) and eqx.tree_equal(env.env, core) is True
    assert env.possible_agents == [f"agent_{i}" for i in range(core.num_agents)]
    actions, frames = reference(eid)
    obs, infos = env.reset(seed=SEED)
    rewards: dict = {}
    terms: dict = {}
    truncs: dict = {}
    for t, (ref_obs, ref_out, ref_state) in enumerate(frames):
        where = f"{eid} t={t}"
        for i, agent in enumerate(env.possible_agents):
            assert set(obs[agent]) == set(ref_obs), where
            for name, leaf in ref_obs.items():
                _close(obs[agent][name], leaf[i], f"{where} obs[{agent}][{name}]")
        _close(env.state(), core.global_state(ref_state), f"{where} state()")
        np.testing.assert_array_equal(env.comm_graph(), np.asarray(core.comm_graph(ref_state)),
                                      err_msg=f"{where} comm_graph()")
        if ref_out is not None:
            for i, agent in enumerate(env.possible_agents):
                _close_reward(rewards[agent], ref_out.reward[i], f"{where} rewards[{agent}]")
                _close_reward(infos[agent]["skill_rewards"], ref_out.skill_rewards[i],
                              f"{where} infos[{agent}]['skill_rewards']")
                _close_reward(infos[agent]["team_reward"], ref_out.team_reward,
                              f"{where} infos[{agent}]['team_reward']")
                assert set(infos[agent]["metrics"]) == set(ref_out.metrics), where
                for name, value in ref_out.metrics.items():
                    _close_reward(infos[agent]["metrics"][name], value,
                                  f"{where} infos[{agent}]['metrics'][{name!r}]")
            assert not any(terms.values()), f"{where}: terminated"
            assert all(truncs.values()) == bool(ref_out.done), f"{where}: truncations {truncs}"
        if t < len(actions):
            obs, rewards, terms, truncs, infos = env.step(
                {a: actions[t][i] for i, a in enumerate(env.possible_agents)})
    assert env.agents == [], "agents left after the last step of the episode"


@pytest.mark.parametrize("eid", BUNDLED_IDS)
def test_pettingzoo_parallel_api(eid):
    register_bundled_envs()
    env = pettingzoo.make("parallel", eid, **bundled_kwargs(eid))
    parallel_api_test(env, num_cycles=HORIZON + 2)


@pytest.mark.parametrize("eid", BUNDLED_IDS)
def test_gym_swarm_wrapper_equals_the_core(eid):
    core = make_core(eid)
    env = SwarmGymEnv(core)
    actions, frames = reference(eid)
    obs, info = env.reset(seed=SEED)
    reward, terminated, truncated = None, None, None
    for t, (ref_obs, ref_out, ref_state) in enumerate(frames):
        where = f"{eid} t={t}"
        assert env.observation_space.contains(obs), f"{where}: obs not in observation_space"
        assert set(obs) == {*ref_obs, "adj"}, where
        for name, leaf in ref_obs.items():
            _close(obs[name], leaf, f"{where} obs[{name}]")
        np.testing.assert_array_equal(obs["adj"], np.asarray(core.comm_graph(ref_state)),
                                      err_msg=f"{where} obs['adj']")
        if ref_out is not None:
            _close_reward(reward, np.mean(np.asarray(ref_out.reward)), f"{where} reward (mean)")
            _close_reward(info["reward"], ref_out.reward, f"{where} info['reward']")
            _close_reward(info["skill_rewards"], ref_out.skill_rewards,
                          f"{where} info['skill_rewards']")
            _close_reward(info["team_reward"], ref_out.team_reward, f"{where} info['team_reward']")
            assert not terminated and truncated == bool(ref_out.done), (
                f"{where}: terminated={terminated} truncated={truncated}")
        if t < len(actions):
            obs, reward, terminated, truncated, info = env.step(actions[t])
    # reward="team": the sparse team reward (same compiled functions: same env config)
    team = SwarmGymEnv(core, reward="team")
    team.reset(seed=SEED)
    _, reward, *_ = team.step(actions[0])
    _close_reward(reward, frames[1][1].team_reward, f"{eid} reward='team'")
