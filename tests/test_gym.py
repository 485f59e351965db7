"""Oracles for the Gymnasium registration and the vmapped vector env.

- the ids are in ``gymnasium.registry`` with ``max_episode_steps`` = the default env's
  ``max_steps`` (Selector: ceil of it over the made env's ``selector_period``), and
  registering again changes nothing and warns nothing (``import envs`` registers nothing:
  this module calls ``feudal_es.register()``, which also installs the checkpoint loader);
- ``gymnasium.utils.env_checker.check_env`` passes on every id, with no warning other than
  the (by design) unbounded observation boxes: in particular no "not having a spec";
- ``TimeLimit`` truncates at ``max_episode_steps``; the standard wrapper chain
  ``RecordEpisodeStatistics(FlattenObservation(make(id)))`` reports the episode's summed
  reward and length as counted here;
- ``SwarmVectorEnv`` against gymnasium's own ``SyncVectorEnv`` of the single env (an
  independent implementation of the vector conventions: ``seed + i`` per copy, NEXT_STEP
  autoreset, partial resets, info masks), step by step through several autoresets, and copy
  ``i`` against a single ``SwarmGymEnv`` reset with seed ``s + i``;
- a Selector id built from a run checkpoint against a hand-written loop of the saving
  trainer's actor (``actor.act`` with the skills forced) over the core env; a checkpoint of
  another env raises ``ValueError``, and so does ``checkpoint=`` without the loader.

Every env uses one small configuration per env (3 agents, 10-step episodes) so that each
jitted function compiles once for the whole file.
"""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from helpers import TINY_ACTOR

import envs
import feudal_es
from envs.gym_registration import gym_env_id, register_bundled_gym_envs, use_checkpoint_loader

feudal_es.register()  # the Gymnasium ids, and the loader the Selector ids' checkpoint= needs

NAMES = ("Coverage", "Discovery", "Dispersion", "Rover")
SMALL = {name: dict(num_agents=3, max_steps=10) for name in NAMES}
SMALL["Rover"] = dict(num_agents=3, max_steps=10, coupling=2)
INF_BOX = "observation space m"  # "... minimum/maximum value is -infinity/infinity"
ATOL = 1e-5


def ids():
    return [gym_env_id(n, k) for n in NAMES for k in ("Swarm", "Selector")]


def name_of(env_id):
    return env_id.split("/")[1].removesuffix("-v0").removesuffix("Swarm").removesuffix(
        "Selector")


def assert_tree_close(a, b, path="obs"):
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), (path, sorted(a), sorted(b))
        for k in a:
            assert_tree_close(a[k], b[k], f"{path}.{k}")
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (path, a.shape, b.shape, a.dtype, b.dtype)
    if a.dtype == np.bool_:
        np.testing.assert_array_equal(a, b, err_msg=path)
    else:
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=ATOL, err_msg=path)


# --- registry ---------------------------------------------------------------------------
def test_ids_registered_with_episode_lengths():
    for name in NAMES:
        default_steps = getattr(envs, name)().max_steps  # the env's own default episode
        swarm = gym.spec(gym_env_id(name, "Swarm"))
        assert swarm.max_episode_steps == default_steps
        assert swarm.vector_entry_point is not None
        selector = gym.spec(gym_env_id(name, "Selector"))
        made = gym.make(selector.id, **SMALL[name])
        period = made.unwrapped.selector_period
        assert selector.max_episode_steps == math.ceil(default_steps / period)
        assert made.unwrapped.metadata["render_modes"] == ["rgb_array"]
        assert gym.make(swarm.id, **SMALL[name]).spec.max_episode_steps == default_steps
        swarm.to_json()  # plain-data specs (string entry points, JSON kwargs)


def test_registration_is_idempotent_and_silent():
    before = {i: gym.registry[i] for i in ids()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register_bundled_gym_envs()
        envs.register()
        feudal_es.register()
    assert all(gym.registry[i] is before[i] for i in ids())


def test_kwargs_conventions():
    env = gym.make(gym_env_id("Coverage", "Swarm"), num_agents=3, max_cycles=10)
    assert env.unwrapped.env.max_steps == 10 and env.unwrapped.num_agents == 3
    with pytest.raises(TypeError, match=r"unknown keyword argument\(s\) \['bogus'\].*reward"):
        gym.make(gym_env_id("Coverage", "Swarm"), bogus=1)
    with pytest.raises(TypeError, match=r"\['bogus'\].*checkpoint"):
        gym.make(gym_env_id("Coverage", "Selector"), bogus=1)


# --- Gymnasium's env checker ----------------------------------------------------------------
@pytest.mark.parametrize("env_id", ids())
def test_check_env(env_id):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id, **SMALL[name_of(env_id)])
        check_env(env.unwrapped)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "spec" in m], messages
    gymnasium_warnings = [m for m in messages if "WARN:" in m]  # gymnasium.logger.warn's
    assert all(INF_BOX in m for m in gymnasium_warnings), gymnasium_warnings


# --- TimeLimit and the standard wrapper chain -------------------------------------------------
def test_time_limit_truncates():
    env = gym.make(gym_env_id("Coverage", "Swarm"), max_episode_steps=4, **SMALL["Coverage"])
    limits = []
    e = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, gym.wrappers.TimeLimit):
            limits.append(e._max_episode_steps)
        e = e.env
    assert limits == [4]
    env.reset(seed=0)
    zero = np.zeros(env.action_space.shape, np.float32)
    truncs = [env.step(zero)[3] for _ in range(4)]
    assert truncs == [False, False, False, True]  # 4 < the env's own max_steps=10
    # without the override the spec's TimeLimit (100) is there; the env ends itself at 10
    env = gym.make(gym_env_id("Coverage", "Swarm"), **SMALL["Coverage"])
    assert env._max_episode_steps == 100
    env.reset(seed=0)
    assert [env.step(zero)[3] for _ in range(10)] == [False] * 9 + [True]


@pytest.mark.parametrize("kind", ["Swarm", "Selector"])
def test_standard_wrapper_chain(kind):
    made = gym.make(gym_env_id("Coverage", kind), **SMALL["Coverage"])
    env = gym.wrappers.RecordEpisodeStatistics(gym.wrappers.FlattenObservation(made))
    size = sum(int(np.prod(s.shape)) for s in made.observation_space.spaces.values())
    obs, _ = env.reset(seed=1)
    assert obs.shape == (size,) and env.observation_space.contains(obs)
    env.action_space.seed(0)
    total, steps, done = 0.0, 0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs.shape == (size,)
        total, steps, done = total + reward, steps + 1, terminated or truncated
    assert steps == (10 if kind == "Swarm" else 2)  # Selector: 8 + 2 env steps
    assert info["episode"]["l"] == steps
    assert info["episode"]["r"] == pytest.approx(total, abs=1e-6)


# --- the vector env -------------------------------------------------------------------------
def make_pair(num_envs, **kw):
    kwargs = {**SMALL["Coverage"], **kw}
    vec = gym.make_vec(gym_env_id("Coverage", "Swarm"), num_envs=num_envs,
                       vectorization_mode="vector_entry_point", **kwargs)
    sync = gym.make_vec(gym_env_id("Coverage", "Swarm"), num_envs=num_envs,
                        vectorization_mode="sync", **kwargs)
    return vec, sync


def test_make_vec_spaces_and_metadata():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vec = gym.make_vec(gym_env_id("Coverage", "Swarm"), num_envs=1024,
                           vectorization_mode="vector_entry_point")
    single = gym.make(gym_env_id("Coverage", "Swarm")).unwrapped
    assert type(vec).__name__ == "SwarmVectorEnv" and vec.num_envs == 1024
    assert vec.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert vec.single_observation_space == single.observation_space
    assert vec.single_action_space == single.action_space
    assert vec.observation_space == batch_space(single.observation_space, 1024)
    assert vec.action_space == batch_space(single.action_space, 1024)
    assert vec.action_space.shape == (1024, 8, 2)
    assert vec.spec.id == gym_env_id("Coverage", "Swarm")


@pytest.mark.parametrize("limit", [None, 7])
def test_vector_env_matches_sync_vector_env(limit):
    """Step by step against SyncVectorEnv (N single envs): same seeds, same actions, a
    partial reset that puts the copies out of phase, autoresets (env end at 10 steps, or
    the TimeLimit at 7)."""
    kw = {} if limit is None else {"max_episode_steps": limit}
    vec, sync = make_pair(3, **kw)
    obs_v, info_v = vec.reset(seed=11)
    obs_s, info_s = sync.reset(seed=11)
    assert_tree_close(obs_v, obs_s)
    assert info_v == info_s == {}
    assert not np.allclose(obs_v["vec"][0], obs_v["vec"][1])  # distinct keys per copy
    rng = np.random.default_rng(0)
    ended, autoresets = np.zeros(3, bool), 0
    for t in range(26):
        if t == 4:  # reset copy 1 only (continuing its key stream): out of phase
            mask = np.array([False, True, False])
            o_v, _ = vec.reset(options={"reset_mask": mask})
            o_s, _ = sync.reset(options={"reset_mask": mask.copy()})
            assert_tree_close({k: v[1] for k, v in o_v.items()},
                              {k: v[1] for k, v in o_s.items()})
            ended[1] = False
        actions = rng.uniform(-1, 1, vec.action_space.shape).astype(np.float32)
        out_v, out_s = vec.step(actions), sync.step(actions)
        for what, a, b in zip(("obs", "reward", "terminated", "truncated", "info"),
                              out_v, out_s, strict=True):
            assert_tree_close(a, b, f"step {t} {what}")
        _, reward, terminated, truncated, info = out_v
        # NEXT_STEP: a copy that ended last step resets now: reward 0, no info entries
        if ended.any():
            autoresets += 1
            assert (reward[ended] == 0).all() and not truncated[ended].any()
            assert not info or not info["_reward"][ended].any()
        ended = terminated | truncated
    assert autoresets >= 4  # copies 0/2 and copy 1 each ended (at least) twice


def test_vector_copy_equals_seeded_single_env():
    """Copy i = a single SwarmGymEnv reset with seed s + i, driven with copy i's actions."""
    vec, _ = make_pair(3)
    singles = [gym.make(gym_env_id("Coverage", "Swarm"), **SMALL["Coverage"]) for _ in range(3)]
    obs_v, _ = vec.reset(seed=2**31 + 5)
    obs_s = [env.reset(seed=2**31 + 5 + i)[0] for i, env in enumerate(singles)]
    rng = np.random.default_rng(1)
    for t in range(4):
        for i in range(3):
            assert_tree_close({k: v[i] for k, v in obs_v.items()}, obs_s[i], f"t={t} copy {i}")
        actions = rng.uniform(-1, 1, vec.action_space.shape).astype(np.float32)
        obs_v, rew_v, _, _, _ = vec.step(actions)
        outs = [env.step(actions[i]) for i, env in enumerate(singles)]
        obs_s = [o[0] for o in outs]
        np.testing.assert_allclose(rew_v, [o[1] for o in outs], atol=ATOL)
    # reseeding is deterministic; a list of seeds gives one per copy
    again, _ = vec.reset(seed=2**31 + 5)
    first, _ = singles[0].reset(seed=2**31 + 5)
    assert_tree_close({k: v[0] for k, v in again.items()}, first)
    listed, _ = vec.reset(seed=[7, 3, 9])
    for i, s in enumerate([7, 3, 9]):
        assert_tree_close({k: v[i] for k, v in listed.items()}, singles[i].reset(seed=s)[0])


# --- Selector ids from a run checkpoint -------------------------------------------------------
@pytest.fixture(scope="module")
def run_checkpoint(tmp_path_factory):
    """A run checkpoint of a tiny Coverage trainer (round 0: no training needed: the
    saved actor is what the Selector env must load), and that trainer."""
    from feudal_es.trainer import ESTrainer, TrainerConfig

    config = TrainerConfig(
        env="feudal_es/Coverage-v0",
        env_kwargs=SMALL["Coverage"],  # the other tests' config: shares their compiled reset
        n_outer=1, episodes=2, seed=3, es=dict(pop_size=4),
        mappo=dict(num_envs=4, num_steps=10, epochs=1, minibatches=1),
        actor={**TINY_ACTOR, "selector_period": 4}, critic=dict(hidden=[8]), gif=False)
    trainer = ESTrainer(config, tmp_path_factory.mktemp("run"))
    return trainer.save_checkpoint(), trainer


def test_selector_from_checkpoint_runs_the_trained_executor(run_checkpoint):
    path, trainer = run_checkpoint
    env = gym.make(gym_env_id("Coverage", "Selector"), checkpoint=str(path))
    core = envs.Coverage(**trainer.config.env_kwargs)  # the run's env kwargs by default
    assert env.unwrapped.env == core
    actor, skills = trainer.ts.actor, np.array([0, 1, 1], np.int32)

    # the oracle: SelectorEnv's documented key derivation, by hand, with the saved actor
    # (one jitted function: op-by-op dispatch would compile every primitive on its own)
    period = env.unwrapped.selector_period

    @jax.jit
    def oracle(key):
        key, k = jax.random.split(key)
        obs, state = core.reset(k)
        adj = core.comm_graph(state)
        forced = [actor.act(k, obs, adj, jnp.full(3, s), True).env_action for s in (0, 1)]

        def substep(carry, _):
            key, obs, state, team = carry
            key, k_exec, k_env = jax.random.split(key, 3)
            action = actor.act(k_exec, obs, core.comm_graph(state), skills, True).env_action
            obs, state, out = core.step(k_env, state, action)
            return (key, obs, state, team + out.team_reward), None

        (_, obs, state, team), _ = jax.lax.scan(substep, (key, obs, state, 0.0), None,
                                                length=period)
        return {**obs, "adj": core.comm_graph(state)}, team, forced

    expect, team, forced = jax.device_get(oracle(jax.random.key(5)))
    assert not np.allclose(forced[0], forced[1])  # the forced skill changes the action

    env.reset(seed=5)
    got, reward, _, truncated, info = env.step(skills)
    assert_tree_close(got, expect)
    assert reward == pytest.approx(float(team), abs=ATOL) and not truncated
    assert info["env_steps"] == period


def test_selector_checkpoint_errors(run_checkpoint):
    path, _ = run_checkpoint
    with pytest.raises(ValueError, match=r"run of env 'feudal_es/Coverage-v0'.*CoverageSelector"):
        gym.make(gym_env_id("Discovery", "Selector"), checkpoint=str(path))
    with pytest.raises(ValueError, match="either executor= or checkpoint="):
        gym.make(gym_env_id("Coverage", "Selector"), checkpoint=str(path),
                 executor=envs.random_executor)
    with pytest.raises(ValueError, match="does not fit Coverage"):  # other map size
        gym.make(gym_env_id("Coverage", "Selector"), checkpoint=str(path), map_size=8)


def test_selector_checkpoint_needs_the_feudal_es_loader(run_checkpoint):
    """``envs`` knows no trained actors: without the loader ``feudal_es.register()``
    installs, ``checkpoint=`` is refused, naming the call; registering installs it again."""
    path, _ = run_checkpoint
    use_checkpoint_loader(None)
    try:
        with pytest.raises(ValueError, match=r"call feudal_es\.register\(\)"):
            gym.make(gym_env_id("Coverage", "Selector"), checkpoint=str(path))
    finally:
        feudal_es.register()
    made = gym.make(gym_env_id("Coverage", "Selector"), checkpoint=str(path))
    assert made.unwrapped.env == envs.Coverage(**SMALL["Coverage"])
