"""Adapters vs the functional core: PettingZoo ParallelEnv, registry, Gymnasium wrappers.

Oracles: PettingZoo's and Gymnasium's own API checkers, and the functional core stepped
by hand with the adapter's documented key derivation (results must be equal).
Sizes are tiny (3 agents, short episodes) to keep this file fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pettingzoo
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test

import envs
import feudal_es
from envs.base import EnvOut, SwarmEnv, check_positive_int
from envs.gym_wrappers import SelectorEnv, SwarmGymEnv, random_executor
from envs.pettingzoo_env import Packer, SwarmParallelEnv, core_fns
from envs.registration import BUNDLED_ENVS, env_id, register_bundled_envs, register_swarm_env
from envs.render import draw_swarm

N = 3
STEPS = 6  # episode length for the API tests
SMALL = {"num_agents": N, "max_steps": STEPS}


def small(name: str) -> dict:
    """SMALL for env id or class ``name`` (Rover's coupling must fit N agents)."""
    return {**SMALL, "coupling": 2} if "Rover" in name else SMALL


class TinyEnv(SwarmEnv):
    """A minimal functional env (agents chase a random goal), for adapter tests only."""

    num_agents: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    skill_names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, num_agents: int = 4, max_steps: int = 10):
        self.num_agents = check_positive_int("num_agents", num_agents)
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.skill_names = ("approach", "spread")

    def reset(self, key):
        k1, k2 = jax.random.split(key)
        state = {
            "pos": jax.random.uniform(k1, (self.num_agents, 2)),
            "goal": jax.random.uniform(k2, (2,)),
            "t": jnp.array(0, jnp.int32),
        }
        return self.observe(state), state

    def step(self, key, state, actions):
        noise = 0.01 * jax.random.normal(key, (self.num_agents, 2))
        pos = jnp.clip(state["pos"] + 0.1 * jnp.clip(actions, -1, 1) + noise, 0.0, 1.0)
        state = {"pos": pos, "goal": state["goal"], "t": state["t"] + 1}
        dist = jnp.linalg.norm(pos - state["goal"], axis=-1)
        spread = jnp.linalg.norm(pos - pos.mean(0), axis=-1)
        skill = jnp.stack([-dist, spread], axis=-1)
        out = EnvOut(
            reward=-dist,
            skill_rewards=skill,
            team_reward=jnp.sum(dist < 0.2).astype(jnp.float32),
            done=state["t"] >= self.max_steps,
            metrics={"mean_dist": dist.mean()},
        )
        return self.observe(state), state, out

    def observe(self, state):
        rel = state["goal"] - state["pos"]
        maps = jnp.broadcast_to(rel[:, :, None, None], (self.num_agents, 2, 4, 4))
        vec = jnp.concatenate([state["pos"], rel], axis=-1)
        return {"maps": maps.astype(jnp.float32), "vec": vec.astype(jnp.float32)}

    def global_state(self, state):
        return jnp.concatenate([state["pos"].ravel(), state["goal"]])

    def comm_graph(self, state):
        d = jnp.linalg.norm(state["pos"][:, None] - state["pos"][None], axis=-1)
        return ((d < 0.5) & ~jnp.eye(self.num_agents, dtype=bool)).astype(jnp.float32)

    def render(self, state):
        return draw_swarm(1.0, np.asarray(state["pos"]), targets=np.asarray(state["goal"])[None],
                          adjacency=np.asarray(self.comm_graph(state)), size=64)


TINY_ID = "feudal_es_test/Tiny-v0"
register_swarm_env(TINY_ID, TinyEnv)
envs.register()  # importing envs registers nothing: the bundled ids, explicitly


def _bundled_present(name: str) -> bool:
    module = BUNDLED_ENVS[name].partition(":")[0]
    return importlib.util.find_spec(module) is not None


# Every id the PettingZoo tests run on: the tiny env plus each bundled env that exists.
ALL_IDS = [TINY_ID] + [
    pytest.param(
        env_id(name),
        marks=pytest.mark.skipif(not _bundled_present(name), reason=f"{name} not there yet"),
    )
    for name in BUNDLED_ENVS
]


def _core_class(eid: str) -> type[SwarmEnv]:
    if eid == TINY_ID:
        return TinyEnv
    return getattr(envs, eid.split("/")[1].split("-")[0])


# --- PettingZoo ---------------------------------------------------------------------
@pytest.mark.parametrize("eid", ALL_IDS)
def test_parallel_api_through_registry(eid):
    """PettingZoo's API test through pettingzoo.make; episodes end by truncation."""
    env = pettingzoo.make("parallel", eid, render_mode="rgb_array", **small(eid))
    assert isinstance(env, SwarmParallelEnv) and env.unwrapped is env
    parallel_api_test(env, num_cycles=STEPS + 5)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    # the episode has exactly STEPS steps, then agents is empty
    env.reset(seed=1)
    for t in range(STEPS):
        acts = {a: env.action_space(a).sample() for a in env.agents}
        _, _, term, trunc, _ = env.step(acts)
        assert not any(term.values())
        assert all(trunc.values()) == (t == STEPS - 1)
    assert env.agents == []
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})


@pytest.mark.parametrize("eid", ALL_IDS)
def test_parallel_seed_through_registry(eid):
    parallel_seed_test(lambda: pettingzoo.make("parallel", eid, **small(eid)),
                       num_cycles=STEPS)


def _core_reference(core: SwarmEnv, seed: int, actions: list[np.ndarray]):
    """The functional core stepped by hand with the adapter's documented key derivation.

    ``reset``/``step`` are jitted (as in the adapter) so that XLA's fusion choices match;
    compared to float tolerance anyway, since the adapter's jit also holds the key split.
    """
    reset, step = jax.jit(core.reset), jax.jit(core.step)
    key = jax.random.key(seed)
    key, sub = jax.random.split(key)
    obs, state = reset(sub)
    frames = [(obs, None, state)]
    for a in actions:
        key, sub = jax.random.split(key)
        obs, state, out = step(sub, state, jnp.asarray(a))
        frames.append((obs, out, state))
    return frames


def _close(actual, expected):
    np.testing.assert_allclose(actual, np.asarray(expected), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("eid", ALL_IDS)
def test_adapter_equals_core(eid):
    """Obs, rewards, infos, state() and comm_graph() equal the core's, step by step."""
    seed, n_steps = 7, 4
    env = pettingzoo.make("parallel", eid, **small(eid))
    core = _core_class(eid)(**small(eid))
    rng = np.random.default_rng(0)
    actions = [rng.uniform(-1, 1, (N, 2)).astype(np.float32) for _ in range(n_steps)]
    ref = _core_reference(core, seed, actions)

    obs, infos = env.reset(seed=seed)
    rewards: dict = {}
    assert set(infos) == set(env.possible_agents)
    for t in range(n_steps + 1):
        ref_obs, ref_out, ref_state = ref[t]
        for i, agent in enumerate(env.possible_agents):
            assert set(obs[agent]) == set(ref_obs)
            for name, leaf in ref_obs.items():
                _close(obs[agent][name], leaf[i])
        _close(env.state(), core.global_state(ref_state))
        np.testing.assert_array_equal(env.comm_graph(), np.asarray(core.comm_graph(ref_state)))
        if ref_out is not None:
            for i, agent in enumerate(env.possible_agents):
                _close(rewards[agent], ref_out.reward[i])
                _close(infos[agent]["skill_rewards"], ref_out.skill_rewards[i])
                _close(infos[agent]["team_reward"], ref_out.team_reward)
                assert infos[agent]["metrics"].keys() == ref_out.metrics.keys()
                for name, value in ref_out.metrics.items():
                    _close(infos[agent]["metrics"][name], value)
        if t < n_steps:
            act = {a: actions[t][i] for i, a in enumerate(env.possible_agents)}
            obs, rewards, _, _, infos = env.step(act)
    assert env.state().shape == env.state_space.shape


def test_packer_roundtrip_is_exact():
    """The adapter's one-buffer transfer restores every leaf bit-exactly, dtype included."""
    tree = {
        "f": jnp.array([[0.1, -np.inf], [np.nan, 3e38]], jnp.float32),
        "b": jnp.array([True, False]),
        "i": jnp.array([-5, 2**30 + 1], jnp.int32),
        "u8": jnp.array(255, jnp.uint8),
        "empty": jnp.zeros((0, 3)),
    }
    packer = Packer(jax.eval_shape(lambda: tree))
    buffers = jax.jit(packer.pack)(tree)
    assert len(buffers) == 1
    back = packer.unpack(Packer.to_host(buffers))
    for name, leaf in tree.items():
        assert back[name].dtype == leaf.dtype and back[name].shape == leaf.shape
        np.testing.assert_array_equal(back[name], np.asarray(leaf))


def test_adapter_details():
    """Stacked-array actions, shared compilation, render, missing actions, max_cycles."""
    env1 = pettingzoo.make("parallel", TINY_ID, **SMALL)
    env2 = pettingzoo.make("parallel", TINY_ID, render_mode="rgb_array", **SMALL)
    assert core_fns(env1.env) is core_fns(env2.env)  # compiled once per configuration
    env1.reset(seed=3)
    env2.reset(seed=3)
    acts = np.full((N, 2), 0.5, np.float32)
    out1 = env1.step({a: acts[i] for i, a in enumerate(env1.agents)})
    out2 = env2.step(acts)
    assert gym.utils.env_checker.data_equivalence(out1, out2)
    frame = env2.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    with pytest.raises(KeyError, match="agent_2"):
        env1.step({"agent_0": acts[0], "agent_1": acts[1]})
    env3 = pettingzoo.make("parallel", TINY_ID, num_agents=2, max_cycles=3)
    assert env3.env.max_steps == 3 and env3.max_num_agents == 2
    with pytest.raises(ValueError, match="max_cycles"):
        pettingzoo.make("parallel", TINY_ID, max_cycles=3, max_steps=4)


def test_aec_flavour():
    env = pettingzoo.make("aec", TINY_ID, **SMALL)
    api_test(env, num_cycles=STEPS + 2)


# --- registry -----------------------------------------------------------------------
def test_registry_ids_and_idempotence():
    present = [n for n in BUNDLED_ENVS if _bundled_present(n)]
    for name in present:
        assert env_id(name) in pettingzoo.parallel_registry
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PettingZoo warns when an id is overridden
        assert register_bundled_envs() == [env_id(n) for n in present]
        importlib.reload(importlib.import_module("envs.registration"))
        importlib.reload(envs)  # registers nothing by itself: the calls below do
        envs.register()
        feudal_es.register()
        register_swarm_env(TINY_ID, TinyEnv)
    assert pettingzoo.make("parallel", TINY_ID, num_agents=2).max_num_agents == 2


def test_unknown_kwargs_are_clear():
    with pytest.raises(TypeError, match=r"unknown keyword argument\(s\) \['bogus'\].*num_agents"):
        pettingzoo.make("parallel", TINY_ID, bogus=1)
    with pytest.raises(ValueError, match="num_agents"):
        pettingzoo.make("parallel", TINY_ID, num_agents=0)
    with pytest.raises(pettingzoo.env_registry.exceptions.NameNotFound):
        pettingzoo.make("parallel", "feudal_es/NoSuchEnv-v0")


@pytest.mark.skipif(not _bundled_present("Coverage"), reason="Coverage not there yet")
def test_registry_forwards_kwargs_to_core():
    env = pettingzoo.make("parallel", env_id("Coverage"), num_agents=4)
    assert env.env.num_agents == 4 and len(env.possible_agents) == 4
    with pytest.raises(TypeError, match="unknown keyword"):
        pettingzoo.make("parallel", env_id("Coverage"), num_agnets=4)


# --- Gymnasium ----------------------------------------------------------------------
GYM_CORES = [pytest.param(lambda: TinyEnv(**SMALL), id="tiny")] + [
    pytest.param(
        lambda name=name: getattr(envs, name)(**small(name)),
        id=name,
        marks=pytest.mark.skipif(not _bundled_present(name), reason=f"{name} not there yet"),
    )
    for name in ("Coverage",)
]


@pytest.mark.parametrize("make_core", GYM_CORES)
def test_swarm_gym_env_check_env(make_core):
    check_env(SwarmGymEnv(make_core(), render_mode="rgb_array"), skip_render_check=False)
    check_env(SwarmGymEnv(make_core(), reward="team"))


@pytest.mark.parametrize("make_core", GYM_CORES)
def test_selector_env_check_env(make_core):
    env = SelectorEnv(make_core(), selector_period=2, render_mode="rgb_array")
    check_env(env)


def test_swarm_gym_env_equals_core():
    core = TinyEnv(**SMALL)
    env = SwarmGymEnv(core)
    rng = np.random.default_rng(1)
    actions = [rng.uniform(-1, 1, (N, 2)).astype(np.float32) for _ in range(STEPS)]
    ref = _core_reference(core, 5, actions)
    obs, _ = env.reset(seed=5)
    _close(obs["vec"], ref[0][0]["vec"])
    for t, a in enumerate(actions):
        obs, r, term, trunc, info = env.step(a)
        ref_obs, ref_out, ref_state = ref[t + 1]
        _close(obs["maps"], ref_obs["maps"])
        _close(obs["vec"], ref_obs["vec"])
        np.testing.assert_array_equal(obs["adj"], np.asarray(core.comm_graph(ref_state)))
        _close(r, np.mean(ref_out.reward))
        _close(info["reward"], ref_out.reward)
        _close(info["skill_rewards"], ref_out.skill_rewards)
        _close(info["team_reward"], ref_out.team_reward)
        assert not term and trunc == (t == STEPS - 1)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(actions[0])


def _skill_executor(key, obs, adj, skills):
    """A JAX executor that depends on all its inputs (for the SMDP oracle)."""
    direction = jnp.where(skills[:, None] == 0, obs["vec"][:, 2:4], -obs["vec"][:, 2:4])
    noise = 0.1 * jax.random.normal(key, direction.shape)
    return jnp.clip(direction + noise + 0.01 * adj.sum(1, keepdims=True), -1, 1)


def test_selector_env_equals_hand_loop():
    """One selector step = selector_period core steps under the executor; jit == python."""
    core, period, seed = TinyEnv(**SMALL), 4, 11
    skills = np.array([0, 1, 0])
    # hand loop with the documented key derivation: key, k_exec, k_env = split(key, 3)
    step = jax.jit(lambda ke, kx, s, o: core.step(
        kx, s, _skill_executor(ke, o, core.comm_graph(s), jnp.asarray(skills))))
    key = jax.random.key(seed)
    key, sub = jax.random.split(key)
    obs, state = jax.jit(core.reset)(sub)
    team, done, per_decision = 0.0, False, []
    for t in range(core.max_steps):
        key, k_exec, k_env = jax.random.split(key, 3)
        obs, state, out = step(k_exec, k_env, state, obs)
        team += float(out.team_reward)
        done = bool(out.done)
        if (t + 1) % period == 0 or done:
            per_decision.append((team, np.asarray(obs["vec"]), done, (t % period) + 1))
            team = 0.0
    assert [d[3] for d in per_decision] == [4, 2]  # the last period is cut by the end

    # jit_executor=False calls the executor from Python (here a jitted one, to stay fast)
    for jit, executor in ((True, _skill_executor), (False, jax.jit(_skill_executor))):
        env = SelectorEnv(core, executor, selector_period=period, jit_executor=jit)
        env.reset(seed=seed)
        for ref_team, ref_vec, ref_done, ref_steps in per_decision:
            obs, r, term, trunc, info = env.step(skills)
            assert r == pytest.approx(ref_team, abs=1e-5) and info["team_reward"] == r
            np.testing.assert_allclose(obs["vec"], ref_vec, atol=1e-5)
            assert (trunc, term, info["env_steps"]) == (ref_done, False, ref_steps)
        with pytest.raises(RuntimeError, match="reset"):
            env.step(skills)


def test_selector_env_errors():
    core = TinyEnv(**SMALL)
    with pytest.raises(ValueError, match="selector_period"):
        SelectorEnv(core, selector_period=0)
    with pytest.raises(TypeError, match="executor"):
        SelectorEnv(core, executor="lloyd")
    env = SelectorEnv(core, random_executor, selector_period=3)
    env.reset(seed=0)
    assert env.action_space == gym.spaces.MultiDiscrete([2, 2, 2])
    with pytest.raises(ValueError, match="skill indices"):
        env.step(np.array([0, 1, 2]))


# --- GIF writer ---------------------------------------------------------------------
def test_gif_writer(tmp_path):
    from PIL import Image

    from envs.gif import episode_frames, main
    from envs.render import write_gif

    core = TinyEnv(num_agents=N, max_steps=4)
    policy = lambda key, env, state: jax.random.uniform(key, (env.num_agents, 2), minval=-1)
    frames = episode_frames(core, policy, jax.random.key(0))
    assert len(frames) == core.max_steps + 1 and frames[0].dtype == np.uint8
    path = write_gif(frames, tmp_path / "tiny.gif")
    assert Image.open(path).size == frames[0].shape[1::-1]
    assert main(["--env", "Coverage", "--policy", "bogus", "--out", str(tmp_path)]) == 2


@pytest.mark.slow
def test_gif_command_writes_every_bundled_env(tmp_path):
    from envs.gif import main

    assert main(["--out", str(tmp_path), "--steps", "5", "--num-agents", "4"]) == 0
    present = [n for n in BUNDLED_ENVS if _bundled_present(n)]
    assert sorted(p.name.split("_")[0] for p in tmp_path.glob("*.gif")) == sorted(present)
