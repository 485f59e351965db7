"""Every group trains on its own team fitness (``TrainerConfig.others="train"``,
:mod:`feudal_es.group_fitness`).

Oracles: ``tell_groups`` against one plain ``tell`` per fitness column, coordinate by
coordinate and optimizer leaf by leaf, bit for bit (a tied column leaves its group where
it was); each group's fitness against a Python loop over members and episodes summing
its agents' mean reward by hand (JAX path: JaxMARL's simple_tag; host path: a toy
PettingZoo env whose groups are paid differently); MAPPO's team reward against each
agent's group's mean of the same steps' local rewards; a short run in which both groups'
selectors move; and the ES kinds and modes that cannot split θ by group, refused by name.
"""

from __future__ import annotations

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pettingzoo
import pytest
from helpers import TINY_ACTOR

from agents import ActorConfig, make_actor
from feudal_es import group_fitness
from feudal_es.config import TrainerConfig
from feudal_es.evolution.config import ESConfig
from feudal_es.evolution.generation import ask_jit, tell_groups, tell_groups_jit, tell_jit
from feudal_es.evolution.state import init
from feudal_es.theta import es_theta, set_es_theta


class Trio(pettingzoo.ParallelEnv):
    """Two ``a`` agents (``Box(4)`` observations, ``Discrete(3)`` actions) and one ``b``
    agent (``Box(5)``, ``Discrete(2)``): everyone sees a target in {0, 1, 2} (one-hot)
    and noise; ``a_0`` is paid a hit plus 0.1 per unit of its action, ``a_1`` half a hit
    less 0.25 (so the ``a`` group's mean is neither's own), ``b_0`` a hit on the target's
    parity less half the ``a`` hits. A new target every step; ``max_cycles`` steps."""

    metadata = {"name": "trio_toy_v0"}  # noqa: RUF012 - PettingZoo convention

    def __init__(self, max_cycles: int = 5):
        self.possible_agents = ["a_0", "a_1", "b_0"]
        self.agents: list[str] = []
        self.max_cycles = max_cycles

    def observation_space(self, agent):
        return gym.spaces.Box(-np.inf, np.inf, (4 if agent[0] == "a" else 5,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(3 if agent[0] == "a" else 2)

    def _obs(self):
        one = np.eye(3, dtype=np.float32)[self.target]
        noise = self.rng.normal(size=4).astype(np.float32)
        return {"a_0": np.append(one, noise[0]), "a_1": np.append(one, noise[1]),
                "b_0": np.concatenate([one, noise[2:]])}

    def reset(self, seed=None, options=None):
        self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.target, self.t = int(self.rng.integers(3)), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        hits = [float(int(actions[a]) == self.target) for a in ("a_0", "a_1")]
        rewards = {"a_0": hits[0] + 0.1 * int(actions["a_0"]), "a_1": 0.5 * hits[1] - 0.25,
                   "b_0": float(int(actions["b_0"]) == self.target % 2) - 0.5 * sum(hits)}
        self.target = int(self.rng.integers(3))
        done = self.t >= self.max_cycles
        obs = self._obs()
        if done:
            self.agents = []
        flags = {a: done for a in self.possible_agents}
        return obs, rewards, flags, dict.fromkeys(self.possible_agents, False), {
            a: {} for a in self.possible_agents}


pettingzoo.register("parallel", "tests/Trio-v0", entry_point=Trio)
# options that change what the executor does (a skill code, one decision per step)
ACTOR = ActorConfig(vec_hidden=(16,), vec_out=8, gnn_hops=1, gnn_layers=1, gnn_features=8,
                    embed_hidden=(), embed_dim=16, executor_hidden=(16,), selector_period=1,
                    skill_embed_dim=16)
TRIO = TrainerConfig(
    env="tests/Trio-v0", mode="merl", n_outer=1, episodes=3, seed=4, num_skills=2,
    team="a", others="train", es=dict(pop_size=8, sigma=1.0, lr=0.1),
    actor={**TINY_ACTOR, "selector_period": 1, "skill_embed_dim": 16},
    critic=dict(hidden=[16]),
    mappo=dict(num_envs=2, num_steps=5, epochs=1, minibatches=1, reward="team"),
    checkpoint_every=1, plot_every=100, gif=False)


def _trio_spec(group_teams: bool = True):
    from feudal_es.pettingzoo_host import HostEnvSpec

    return HostEnvSpec(Trio(), num_skills=2).with_team("a", group_teams)


# --- (a) the ES update over groups -----------------------------------------------------
def _warm(cfg: ESConfig, d: int) -> tuple:
    """An ES state two generations in (Adam's moments and count non-trivial)."""
    state = init(jax.random.normal(jax.random.key(1), (d,)), cfg)
    for g in range(2):
        _, noise = ask_jit(jax.random.key(10 + g), state, cfg)
        fit = jax.random.normal(jax.random.key(20 + g), (cfg.num_candidates,))
        state, _ = tell_jit(state, noise, fit, cfg)
    return state


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_tell_groups_is_one_tell_per_group_on_its_own_coordinates(optimizer):
    """Each group's coordinates of the new mean and of every per-coordinate optimizer
    leaf are a plain tell on its own column (to float rounding); a tied column leaves its group's
    coordinates (mean and moments) unchanged; scalar leaves are the largest of the
    groups' (Adam's count: a step was taken); info is the reported column's."""
    cfg = ESConfig(pop_size=8, sigma=0.2, lr=0.05, optimizer=optimizer, weight_decay=0.01)
    # tell_groups and tell are two compiled programs: equal up to float rounding (their
    # fusions may differ on another CPU); what a group keeps from before is exact
    close = lambda a, b, **kw: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, **kw)
    d = 11
    coord = np.array([0, 2, 1, 1, 0, 2, 2, 0, 1, 0, 2], np.int32)
    state = _warm(cfg, d)
    _, noise = ask_jit(jax.random.key(3), state, cfg)
    fit = np.array(jax.random.normal(jax.random.key(4), (cfg.num_candidates, 3)))
    fit[:, 1] = 2.5  # group 1: every candidate tied, no ranking
    fit[3, 2] = np.nan  # a non-finite value ranks last in its column only
    new, info = tell_groups_jit(state, noise, jnp.asarray(fit), cfg, jnp.asarray(coord), 2)
    refs = [tell_jit(state, noise, jnp.asarray(fit[:, g]), cfg) for g in range(3)]
    for g, (ref, _) in enumerate(refs):
        on = coord == g
        close(np.asarray(new.mean)[on], np.asarray(ref.mean)[on])
        for a, b in zip(jax.tree.leaves(new.opt_state), jax.tree.leaves(ref.opt_state),
                        strict=True):
            if a.shape == (d,):
                close(np.asarray(a)[on], np.asarray(b)[on])
    on = coord == 1
    np.testing.assert_array_equal(np.asarray(new.mean)[on], np.asarray(state.mean)[on])
    assert not np.array_equal(np.asarray(new.mean)[coord != 1],
                              np.asarray(state.mean)[coord != 1])
    old = jax.tree.leaves(state.opt_state)
    for i, a in enumerate(jax.tree.leaves(new.opt_state)):
        if a.shape == (d,):
            np.testing.assert_array_equal(np.asarray(a)[on], np.asarray(old[i])[on])
        else:  # the count: groups 0 and 2 stepped, group 1 did not
            counts = [int(jax.tree.leaves(r.opt_state)[i]) for r, _ in refs]
            assert int(a) == max(counts) == int(old[i]) + 1 and min(counts) == int(old[i])
    for k, v in refs[2][1].items():
        close(np.asarray(info[k]), np.asarray(v), err_msg=k)
    assert int(info["num_invalid"]) == 1 and int(new.generation) == int(state.generation) + 1
    # one group: the plain tell, every leaf
    one, _ = tell_groups_jit(state, noise, jnp.asarray(fit[:, :1]), cfg,
                             jnp.zeros(d, jnp.int32), 0)
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(refs[0][0]), strict=True):
        close(np.asarray(a), np.asarray(b))


# --- (d) what cannot be split by group -------------------------------------------------
@pytest.mark.parametrize("kind", ["cem", "ga"])
def test_kinds_not_separable_per_coordinate_are_refused(kind):
    cfg = ESConfig(pop_size=4, kind=kind)
    state = init(jnp.zeros(3), cfg)
    noise = jnp.zeros((4, 3))
    with pytest.raises(ValueError, match=rf"separable per coordinate.*es.kind='{kind}'"):
        tell_groups(state, noise, jnp.zeros((4, 2)), cfg, jnp.zeros(3, jnp.int32))
    with pytest.raises(ValueError, match=rf"others='train'.*es.kind='{kind}'"):
        group_fitness.check_config(TRIO.override({"es": {"kind": kind}}))
    group_fitness.check_config(TRIO.override({"es": {"kind": kind}, "others": "random"}))
    group_fitness.check_config(TRIO.override({"es": {"optimizer": "adam"}}))


def test_evosax_kinds_and_migrating_modes_are_refused():
    with pytest.raises(ValueError, match=r"mode 'merl-actor' migrates"):
        group_fitness.check_config(TRIO.override({"mode": "merl-actor"}))
    pytest.importorskip("evosax")
    with pytest.raises(ValueError, match=r"separable per coordinate.*evosax:SNES"):
        group_fitness.check_config(TRIO.override({"es": {"kind": "evosax:SNES"}}))


def test_the_config_refuses_them_when_it_is_built():
    """The config itself refuses (before any trainer, env or compilation), on either
    path's env; the runtimes check again (a config built around ``__post_init__``)."""
    with pytest.raises(ValueError, match=r"TrainerConfig: .*es.kind='cem'"):
        TRIO.override({"es": {"kind": "cem"}})
    jax_cfg = TRIO.override({"env": "jaxmarl/MPE_simple_adversary_v3", "team": "agent",
                             "num_skills": 1})
    with pytest.raises(ValueError, match=r"es.kind='ga'"):
        jax_cfg.override({"es": {"kind": "ga"}})
    with pytest.raises(ValueError, match=r"mode 'merl-actor' migrates"):
        jax_cfg.override({"mode": "merl-actor"})


# --- (b) each group's fitness ----------------------------------------------------------
def test_coord_groups_follow_the_es_theta_of_each_group():
    spec = _trio_spec()
    actor = make_actor(jax.random.key(0), spec, ACTOR, "a", "train")
    for params in ("selector", "actor"):
        coord = group_fitness.coord_groups(actor, params)
        theta = es_theta(actor, params)
        assert coord.shape == theta.shape and set(coord.tolist()) == {0, 1}
        marked = set_es_theta(actor, jnp.asarray(coord, jnp.float32) + 1.0, params)
        for g, a in enumerate(marked.actors):  # each group's leaves hold its index + 1
            part = es_theta(a, params)
            np.testing.assert_array_equal(np.asarray(part), g + 1.0)


def test_host_group_fitness_is_each_groups_summed_mean_reward():
    """The evaluator's per-group returns against the same episodes replayed through a
    recording env, each group's mean reward summed by hand; the team's column is the
    team return exactly."""
    from feudal_es.host_eval import HostEvaluator

    spec = _trio_spec()
    actor = make_actor(jax.random.key(0), spec, ACTOR, "a", "train")
    theta = es_theta(actor)
    thetas = np.asarray(theta + 0.8 * jax.random.normal(jax.random.key(5), (3, theta.size)))
    ev = HostEvaluator(Trio, spec, 2, True, 100)
    key = jax.random.key(6)
    got = ev.returns(actor, thetas, 40, key, groups=True)
    team = ev.returns(actor, thetas, 40, key)
    assert got.shape == (3, 2, 2)
    np.testing.assert_array_equal(got[..., 0], team)
    hand = np.zeros((3, 2, 2))
    for p in range(3):
        for e in range(2):
            steps: list[dict] = []
            env = Trio()

            class Recording:
                def __getattr__(self, name, env=env):
                    return getattr(env, name)

                def step(self, actions, env=env, steps=steps):
                    out = env.step(actions)
                    steps.append(dict(out[1]))
                    return out

            ev.episode(set_es_theta(actor, jnp.asarray(thetas[p])), Recording(), 40 + e,
                       jax.random.fold_in(key, e))
            hand[p, e, 0] = sum((r["a_0"] + r["a_1"]) / 2 for r in steps)
            hand[p, e, 1] = sum(r["b_0"] for r in steps)
    np.testing.assert_allclose(got, hand, rtol=1e-12)
    assert len({tuple(r) for r in got.mean(1).round(6)}) > 1  # the members differ


@pytest.mark.slow  # ~14 s: simple_adversary population rollouts (host oracle: default)
def test_jax_group_fitness_is_each_groups_summed_mean_reward():
    """simple_adversary (1 adversary, 2 good agents; the good agents the team): the
    population rollouts' ``[P, E, G]`` against each member's episodes replayed one by
    one in a Python loop, each group's mean reward summed by hand; the team's column is
    the team return of the plain rollouts, bit for bit (same chunked program)."""
    pytest.importorskip("jaxmarl")
    import equinox as eqx

    from envs.jaxmarl_env import make_jaxmarl
    from feudal_es.rollout import episode, make_population_rollouts

    env = make_jaxmarl("MPE_simple_adversary_v3").with_team("agent", group_teams=True)
    actor = make_actor(jax.random.key(0), env, ACTOR, "agent", "train")
    assert actor.trains == (True, True) and actor.names == ("adversary", "agent")
    theta = es_theta(actor, "actor")
    thetas = theta + 0.3 * jax.random.normal(jax.random.key(1), (3, theta.size))
    keys = jax.random.split(jax.random.key(2), 2)
    got, _ = eqx.filter_jit(make_population_rollouts(env, True, 2, "actor", True))(
        actor, thetas, keys)
    team, _ = eqx.filter_jit(make_population_rollouts(env, True, 2, "actor"))(
        actor, thetas, keys)
    assert got.shape == (3, 2, 2)
    np.testing.assert_array_equal(np.asarray(got[..., 1]), np.asarray(team))
    rewards = eqx.filter_jit(lambda a, k: episode(env, a, k, True,
                                                  record=lambda out: out.reward).outs)
    hand = np.zeros((3, 2, 2))
    for p in range(3):
        a = set_es_theta(actor, thetas[p], "actor")
        for e in range(2):
            r = np.asarray(rewards(a, keys[e]), np.float64)  # [T, N]
            hand[p, e] = [r[:, 0].sum(), r[:, 1:].mean(axis=1).sum()]
    np.testing.assert_allclose(np.asarray(got), hand, rtol=1e-5, atol=1e-5)
    assert len({tuple(r) for r in hand.mean(1).round(5)}) == 3  # the members differ


# --- (c) MAPPO's team reward, and a run --------------------------------------------------
def test_host_mappo_team_reward_is_each_agents_own_groups():
    """Same seeds, deterministic actions: with reward "team" each agent's reward is its
    group's mean of the "local" rewards of the same steps ("mixed": their sum); without
    group_teams, the team's mean for everyone."""
    from agents import CentralCritic, CriticConfig
    from feudal_es import mappo
    from feudal_es.host_collect import HostCollector

    spec = _trio_spec()
    actor = make_actor(jax.random.key(0), spec, ACTOR, "a", "train")
    critic = CentralCritic(jax.random.key(1), spec.global_state_size, spec.num_agents,
                           spec.num_skills, CriticConfig(hidden=(8,)))
    batches = {}
    for kind, teams in (("local", True), ("team", True), ("mixed", True), ("team", False)):
        cfg = mappo.MAPPOConfig(num_envs=2, num_steps=6, epochs=1, minibatches=1,
                                reward=kind)
        ts = mappo.init_learner(jax.random.key(7), actor, critic, cfg)
        s = _trio_spec(teams)
        collector = HostCollector([Trio() for _ in range(2)], s, cfg, seed=5,
                                  deterministic=True)
        batches[kind, teams] = np.asarray(collector.collect(ts)[1].reward)
        collector.close()
    local = batches["local", True]  # [T, E, N]
    own = np.stack([local[..., :2].mean(-1)] * 2 + [local[..., 2]], axis=-1)
    np.testing.assert_allclose(batches["team", True], own, rtol=1e-6)
    np.testing.assert_allclose(batches["mixed", True], local + own, rtol=1e-6)
    shared = np.repeat(local[..., :2].mean(-1, keepdims=True), 3, axis=-1)
    np.testing.assert_allclose(batches["team", False], shared, rtol=1e-6)
    assert not np.allclose(own, shared)


@pytest.mark.slow  # ~9 s: a JaxMARL collection (host oracle: default)
def test_jax_mappo_team_reward_is_each_agents_own_groups():
    """simple_adversary on the JAX path: one collection with reward "local" and one
    with "team" from the same state (the same actions): the adversary's team reward is
    its own, each good agent's the good agents' mean (not the team's for everyone)."""
    pytest.importorskip("jaxmarl")
    import equinox as eqx

    from agents import CentralCritic, CriticConfig
    from envs.base import EnvOut
    from envs.jaxmarl_env import make_jaxmarl
    from feudal_es import mappo

    env = make_jaxmarl("MPE_simple_adversary_v3").with_team("agent", group_teams=True)
    actor = make_actor(jax.random.key(0), env, ACTOR, "agent", "train")
    critic = CentralCritic.from_env(jax.random.key(2), env, CriticConfig(hidden=(8,)))
    out = {}
    for kind in ("local", "team"):
        cfg = mappo.MAPPOConfig(num_envs=2, num_steps=8, epochs=1, minibatches=1,
                                reward=kind)
        ts = mappo.init_train_state(jax.random.key(3), env, actor, critic, cfg)
        out[kind] = np.asarray(eqx.filter_jit(
            lambda t, c=cfg: mappo.collect(env, t, c)[1])(ts).reward)
    local = out["local"]  # [T, E, N]
    agents = np.repeat(local[..., 1:].mean(-1, keepdims=True), 2, -1)
    np.testing.assert_allclose(out["team"], np.concatenate([local[..., :1], agents], -1),
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(out["team"][..., 0], agents[..., 0])  # not the team's for all
    eo = EnvOut(reward=jnp.asarray([[-4.0, 2.0, 6.0]]), skill_rewards=None,
                team_reward=jnp.asarray([3.0]), done=None, metrics={})
    np.testing.assert_allclose(group_fitness.agent_team_reward(env, eo), [[-4, 3, 3]])
    assert group_fitness.agent_team_reward(env.with_team("agent"), eo) is None


@pytest.mark.slow  # ~21 s: a host run's MAPPO step, generation and evaluation compiled
def test_an_others_train_run_moves_both_groups_selectors(tmp_path):
    """A one-round merl run with others="train": every group is trained (MAPPO's mask,
    ES's θ), each group's column is informative, and both groups' selectors move from
    where the round started; the run's logged fitness is the team's."""
    from feudal_es.trainer import ESTrainer

    t = ESTrainer(TRIO, tmp_path / "run")
    assert t.ts.actor.trains == (True, True) and t.runtime.spec.group_teams
    np.testing.assert_array_equal(np.asarray(t.ts.actor.agent_mask), [1, 1, 1])
    coord = group_fitness.coord_groups(t.ts.actor)
    before = np.asarray(es_theta(t.ts.actor))
    history = t.run()
    after = np.asarray(es_theta(t.ts.actor))
    for g in (0, 1):
        assert not np.array_equal(before[coord == g], after[coord == g]), g
    np.testing.assert_array_equal(after, np.asarray(t.es_state.mean))
    assert np.isfinite(history[-1]["fitness_best"])


@pytest.mark.slow  # ~19 s: the JAX path's generation and rollouts compiled
def test_a_jax_generation_tells_each_group_its_own_column(tmp_path):
    """The JAX path's jitted generation (mode es, whole actor: JaxMARL's options are one)
    equals its pieces put together by hand: the same candidates, every group's fitness
    column (the team's = the plain team returns), tell_groups; both groups move, and
    a round of the run logs the team's fitness."""
    pytest.importorskip("jaxmarl")
    from feudal_es.evolution.state import ask
    from feudal_es.trainer import ESTrainer

    cfg = TrainerConfig(
        env="jaxmarl/MPE_simple_adversary_v3", mode="es", team="agent", others="train",
        n_outer=1, episodes=2, seed=0, es=dict(pop_size=4, sigma=0.1, lr=0.05),
        actor=dict(vec_hidden=[], vec_out=8, gnn_layers=0, embed_hidden=[], embed_dim=8,
                   executor_hidden=[8]), critic=dict(hidden=[8]),
        mappo=dict(num_envs=2, num_steps=8, epochs=1, minibatches=2), checkpoint_every=1,
        plot_every=100, gif=False)
    t = ESTrainer(cfg, tmp_path / "run")
    actor, state, rt = t.ts.actor, t.es_state, t.runtime
    assert rt.core.group_teams and actor.trains == (True, True)
    key = jax.random.key(9)
    new, info = rt.generation(key, state, actor, None)
    k_ask, k_eval = jax.random.split(key)
    pop, noise = ask(k_ask, state, cfg.es)
    fit = np.asarray(rt.fns.fitness(pop, actor, jax.random.split(k_eval, cfg.episodes)))
    team, _ = rt.returns(actor, pop, k_eval, cfg.episodes)
    assert fit.shape == (4, 2)
    np.testing.assert_allclose(fit[:, 1], team.mean(axis=1), rtol=1e-6)
    coord = group_fitness.coord_groups(actor, "actor")
    ref, ref_info = tell_groups(state, noise, jnp.asarray(fit), cfg.es, coord, 1)
    np.testing.assert_allclose(np.asarray(new.mean), np.asarray(ref.mean), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(float(info["best_fitness"]), fit[:, 1].max(), rtol=1e-6)
    np.testing.assert_allclose(float(info["mean_fitness"]), float(ref_info["mean_fitness"]),
                               rtol=1e-6)
    for g in (0, 1):
        assert not np.array_equal(np.asarray(new.mean)[coord == g],
                                  np.asarray(state.mean)[coord == g]), g
    history = t.run()
    assert np.isfinite(history[-1]["fitness_best"])
    assert np.isfinite(history[-1]["selector_fitness"])


@pytest.mark.slow  # ~13 s: a local Ray instance and two workers
def test_ray_group_returns_equal_the_serial_evaluators(tmp_path):
    """backend="ray": the workers' ``[P, E, G]`` equal the serial evaluator's exactly."""
    ray = pytest.importorskip("ray")
    import functools
    import signal

    from feudal_es.host_eval import HostEvaluator
    from feudal_es.ray_backend import RayEvaluator, init_local

    spec = _trio_spec()
    actor = make_actor(jax.random.key(0), spec, ACTOR, "a", "train")
    theta = es_theta(actor)
    thetas = np.asarray(theta + 0.8 * jax.random.normal(jax.random.key(5), (3, theta.size)))
    key = jax.random.key(6)
    serial = HostEvaluator(Trio, spec, 2, True, 100).returns(actor, thetas, 40, key,
                                                             groups=True)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    started = not ray.is_initialized()
    if started:
        init_local(num_cpus=2)
    try:
        ev = RayEvaluator(functools.partial(HostEvaluator, Trio, spec, 2, True, 100),
                          episodes=2, num_workers=2)
        try:
            np.testing.assert_array_equal(ev.returns(actor, thetas, 40, key, groups=True),
                                          serial)
        finally:
            ev.close()
    finally:
        if started:
            ray.shutdown()
            for s, handler in handlers.items():
                signal.signal(s, handler)
