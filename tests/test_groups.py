"""Agents with different spaces in groups, one actor per group (``envs.groups``,
``agents.GroupedActor``), on the host path (a PettingZoo toy env: a speaker and a
listener) and the JAX path (JaxMARL's MPE speaker-listener).

Oracles: each group's actor run on the env's own, unpadded observations (a plain loop
over groups) gives what the grouped actor gives on the stacked ones; the partition
holds leaf by leaf (every group's selector is ES's, MAPPO leaves them bit-identical and
trains every group's executor); the adapters agree with the raw envs stepped by hand;
a grouped run resumes bit for bit."""

from __future__ import annotations

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pettingzoo
import pytest
from helpers import TINY_ACTOR
from hetero_envs import SpeakerListener

from agents import (
    ActorConfig,
    FeudalActor,
    GroupedActor,
    executor_filter,
    make_actor,
    selector_filter,
)
from envs.groups import group_agents, padded_action_space, padded_observation_space
from feudal_es.config import TrainerConfig
from feudal_es.pettingzoo_host import HostEnvSpec, env_actions, stack_agents
from feudal_es.theta import es_theta, set_es_theta
from feudal_es.trainer import ESTrainer

ACTOR = ActorConfig(vec_hidden=(), vec_out=8, gnn_hops=1, gnn_layers=1, gnn_features=8,
                    embed_hidden=(), embed_dim=8, executor_hidden=(8,), selector_period=2)


def test_agents_are_grouped_by_their_spaces_and_what_cannot_be_is_named():
    env = SpeakerListener()
    spec = HostEnvSpec(env, num_skills=2)
    (speaker, listener) = spec.agent_groups
    assert (speaker.name, speaker.agents, speaker.obs_size, speaker.action_size) == \
        ("speaker", (0,), 3, 3)
    assert (listener.name, listener.agents, listener.obs_size, listener.action_size) == \
        ("listener", (1,), 4, 5)
    assert spec.observation_space.shape == (4,) and spec.action_space == gym.spaces.Discrete(5)
    box = lambda n: gym.spaces.Box(-1.0, 1.0, (n,), np.float32)
    same = group_agents(["a_0", "a_1", "b_0"], [box(2), box(2), box(2)],
                        [box(1), box(1), box(1)])
    assert len(same) == 1 and same[0].agents == (0, 1, 2)
    three = group_agents(["a_0", "b_0", "a_1"], [box(2), box(3), box(2)],
                         [box(1), box(2), box(1)])
    assert [(g.name, g.agents) for g in three] == [("a", (0, 2)), ("b", (1,))]
    assert padded_observation_space(three).shape == (3,)
    assert padded_action_space(three).shape == (2,)
    with pytest.raises(ValueError, match=r"others in Box spaces"):
        group_agents(["a_0", "b_0"], [box(2), box(3)], [box(1), gym.spaces.Discrete(2)])
    with pytest.raises(ValueError, match="agent 'b_0' has observation space Dict"):
        group_agents(["a_0", "b_0"], [box(2), gym.spaces.Dict({"x": box(2)})],
                     [box(1), box(1)])


def test_a_users_groups_split_agents_that_share_their_spaces():
    """``TrainerConfig.groups`` (group name -> agent names) places the agents it names,
    the rest by their spaces; both adapters take it; what it cannot do is named."""
    box = lambda n: gym.spaces.Box(-1.0, 1.0, (n,), np.float32)
    agents, obs, act = ["a_0", "a_1", "a_2", "b_0"], [box(2)] * 3 + [box(3)], [box(1)] * 4
    groups = group_agents(agents, obs, act, mapping={"red": ["a_2", "a_0"]})
    assert [(g.name, g.agents) for g in groups] == [("red", (0, 2)), ("a", (1,)),
                                                    ("b", (3,))]
    with pytest.raises(ValueError, match=r"groups\['red'\]: agents 'a_0' and 'b_0' differ"):
        group_agents(agents, obs, act, mapping={"red": ["a_0", "b_0"]})
    with pytest.raises(ValueError, match=r"has no agent 'c_0' \(its agents: \['a_0'"):
        group_agents(agents, obs, act, mapping={"red": ["c_0"]})
    with pytest.raises(ValueError, match=r"'a_0' is in both 'red' and 'blue'"):
        group_agents(agents, obs, act, mapping={"red": ["a_0"], "blue": ["a_0"]})
    spec = HostEnvSpec(SpeakerListener(), num_skills=2, groups={"talker": ["speaker_0"]})
    assert [g.name for g in spec.agent_groups] == ["talker", "listener"]
    with pytest.raises(TypeError, match=r"groups must map group names"):
        TrainerConfig(env="x", groups={"red": []})
    with pytest.raises(ValueError, match=r"choose one"):
        TrainerConfig(env="x", groups={"red": ["a_0"]}, pad_agents=True)
    pytest.importorskip("jaxmarl")
    from envs.jaxmarl_env import make_jaxmarl

    env = make_jaxmarl("MPE_simple_spread_v3").regrouped({"lead": ["agent_0"]})
    assert [(g.name, g.agents) for g in env.agent_groups] == [("lead", (0,)),
                                                              ("agent", (1, 2))]
    assert env.with_team("lead").agent_groups == env.agent_groups
    actor = make_actor(jax.random.key(0), env, ACTOR, team="lead")
    assert isinstance(actor, GroupedActor) and actor.names == ("lead", "agent")


def test_the_grouped_actor_is_each_groups_actor_on_its_own_observations():
    """Plain loop over groups on the env's raw per-agent dict: each group's FeudalActor on
    its agents' unpadded observations gives the grouped actor's options, actions,
    log-probs and (re-)evaluations on the stacked, padded ones."""
    env = SpeakerListener()
    spec = HostEnvSpec(env, num_skills=2)
    actor = make_actor(jax.random.key(0), spec, ACTOR)
    assert isinstance(actor, GroupedActor) and actor.names == ("speaker", "listener")
    raw, _ = env.reset(seed=4)
    stacked, _ = stack_agents(spec, raw)
    assert stacked.shape == (2, 4) and stacked[0, 3] == 0.0  # the speaker's padding
    adj = jnp.asarray(1.0 - np.eye(2, dtype=np.float32))
    key = jax.random.key(5)
    option, out = actor.step(key, jnp.asarray(stacked), adj, actor.initial_option(2),
                             jnp.asarray(0))
    for g, (group, sub) in enumerate(zip(spec.agent_groups, actor.actors, strict=True)):
        (i,) = group.agents
        obs = jnp.asarray(raw[spec.agents[i]])[None]
        o, mine = sub.step(jax.random.fold_in(key, g), obs, jnp.zeros((1, 1)),
                           sub.initial_option(1), jnp.asarray(0))
        assert int(o[0]) == int(option[i])
        assert int(mine.action[0]) == int(out.action[i])
        assert int(out.action[i]) < group.action_size  # never outside its own space
        np.testing.assert_allclose(float(mine.log_prob[0]), float(out.log_prob[i]),
                                   rtol=1e-6)
        lp, _ = sub.evaluate(obs, jnp.zeros((1, 1)), o, mine.action)
        lp_all, _ = actor.evaluate(jnp.asarray(stacked), adj, option, out.action)
        np.testing.assert_allclose(float(lp[0]), float(lp_all[i]), rtol=1e-6)
    # the env receives each agent's action in its own space
    acts = env_actions(spec, np.asarray(out.env_action), spec.agents)
    assert set(acts) == set(spec.agents) and all(isinstance(a, int) for a in acts.values())


def test_the_selector_partition_holds_for_every_group():
    """ES's theta is every group's selector (and writes both back); the rest is the
    executors'."""
    spec = HostEnvSpec(SpeakerListener(), num_skills=2)
    actor = make_actor(jax.random.key(0), spec, ACTOR)
    # leaf by leaf: the marked leaves are exactly every group's selector leaves, in order
    marked = jax.tree.leaves(eqx.filter(actor, selector_filter(actor)))
    own = [x for a in actor.actors
           for x in jax.tree.leaves(eqx.filter(a.selector, eqx.is_inexact_array))]
    assert len(marked) == len(own) > 0 and len(actor.actors) == 2
    for x, y in zip(marked, own, strict=True):
        assert x is y
    unmarked = jax.tree.leaves(eqx.filter(actor, executor_filter(actor)))
    assert not {id(x) for x in unmarked} & {id(x) for x in own}
    assert len(unmarked) + len(own) == len(jax.tree.leaves(
        eqx.filter(actor, eqx.is_inexact_array)))
    theta = es_theta(actor, "selector")
    assert theta.size == sum(sum(x.size for x in jax.tree.leaves(
        eqx.filter(a.selector, eqx.is_inexact_array))) for a in actor.actors)
    moved = set_es_theta(actor, theta + 1.0, "selector")
    for a, b in zip(actor.actors, moved.actors, strict=True):
        for x, y in zip(jax.tree.leaves(eqx.filter(a.selector, eqx.is_inexact_array)),
                        jax.tree.leaves(eqx.filter(b.selector, eqx.is_inexact_array)),
                        strict=True):
            np.testing.assert_allclose(np.asarray(y), np.asarray(x) + 1.0)
        for x, y in zip(jax.tree.leaves(eqx.filter(a.executor, eqx.is_inexact_array)),
                        jax.tree.leaves(eqx.filter(b.executor, eqx.is_inexact_array)),
                        strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


pettingzoo.register("parallel", "tests/SpeakerListener-v0", entry_point=SpeakerListener)
CONFIG = TrainerConfig(
    env="tests/SpeakerListener-v0", mode="merl", n_outer=2, episodes=2, seed=1, num_skills=2,
    es=dict(pop_size=2, sigma=0.5, lr=0.1), actor={**TINY_ACTOR, "selector_period": 2},
    critic=dict(hidden=[16]), mappo=dict(num_envs=2, num_steps=5, epochs=1, minibatches=1),
    checkpoint_every=1, plot_every=100, gif=False)


def _leaves(tree):
    return [jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
            else x for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


@pytest.mark.slow  # ~11 s: a host run of 2 rounds and its resume
def test_a_grouped_host_run_trains_every_group_and_resumes(tmp_path):
    """Without padding the speaker and the listener train as two groups, by id as the CLI
    names it: MAPPO moves both executors; the run checkpoints and resumes (a host run's
    env copies restart their episodes on resume, so not bit for bit: the JAX path's is,
    below)."""
    t = ESTrainer(CONFIG, tmp_path / "a")
    before = t.ts.actor
    assert [h["round"] for h in t.run()] == [0, 1]
    after = t.ts.actor
    assert isinstance(after, GroupedActor)
    for a, b in zip(before.actors, after.actors, strict=True):
        moved = [not np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(
            jax.tree.leaves(eqx.filter(a.executor, eqx.is_inexact_array)),
            jax.tree.leaves(eqx.filter(b.executor, eqx.is_inexact_array)), strict=True)]
        assert any(moved)
    resumed = ESTrainer.resume(tmp_path / "a", n_outer=3)
    assert resumed.round == 2 and isinstance(resumed.ts.actor, GroupedActor)
    for x, y in zip(_leaves(after), _leaves(resumed.ts.actor), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    resumed.run()
    assert (tmp_path / "a" / "ckpt_00000003.safetensors").is_file()


@pytest.mark.slow  # ~17 s: three trainers' compilations
def test_a_grouped_jax_run_resumes_bit_for_bit(tmp_path):
    """JaxMARL's speaker-listener on the JAX path: 2 rounds straight == 1 round, its
    checkpoint and 1 resumed round, every leaf (one program, one machine)."""
    pytest.importorskip("jaxmarl")
    cfg = TrainerConfig(
        env="jaxmarl/MPE_simple_speaker_listener_v4", mode="merl", n_outer=2, episodes=1,
        seed=3, es=dict(pop_size=2, sigma=0.1, lr=0.05), actor=dict(
            vec_hidden=[], vec_out=8, gnn_layers=0, embed_hidden=[], embed_dim=8,
            executor_hidden=[8]), critic=dict(hidden=[8]),
        mappo=dict(num_envs=2, num_steps=8, epochs=1, minibatches=2), checkpoint_every=1,
        plot_every=100, gif=False)
    straight = ESTrainer(cfg, tmp_path / "a")
    straight.run()
    assert isinstance(straight.ts.actor, GroupedActor)
    ESTrainer(cfg.override({"n_outer": 1}), tmp_path / "b").run()
    resumed = ESTrainer.resume(tmp_path / "b", n_outer=2)
    resumed.run()
    for x, y in zip(_leaves(straight.state), _leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_jaxmarls_speaker_listener_stacks_what_its_agents_see_and_do():
    """The JAX-path adapter against the JaxMARL env stepped by hand: each agent's row is
    its own observation then zeros, each agent gets its own action, same rewards."""
    pytest.importorskip("jaxmarl")
    from envs.jaxmarl_env import make_jaxmarl

    env = make_jaxmarl("MPE_simple_speaker_listener_v4")
    inner = env.env
    assert [g.name for g in env.agent_groups] == ["speaker", "listener"]
    obs, state = env.reset(jax.random.key(0))
    raw, inner_state = inner.reset(jax.random.key(0))
    for i, a in enumerate(inner.agents):
        d = raw[a].shape[0]
        np.testing.assert_array_equal(np.asarray(obs["obs"][i, :d]), np.asarray(raw[a]))
        assert not np.any(np.asarray(obs["obs"][i, d:]))
    actions = jnp.asarray([2, 4], jnp.int32)
    _, _, out = env.step(jax.random.key(1), state, actions)
    _, _, rewards, _, _ = inner.step_env(jax.random.key(1), inner_state,
                                         {a: actions[i] for i, a in enumerate(inner.agents)})
    np.testing.assert_allclose(np.asarray(out.reward),
                               [float(rewards[a]) for a in inner.agents], rtol=1e-6)
    actor = make_actor(jax.random.key(0), env, ACTOR)
    assert isinstance(actor, GroupedActor) and all(isinstance(a, FeudalActor)
                                                   for a in actor.actors)
    assert [a.executor.head.logits.layers[-1].bias.shape[0] for a in actor.actors] == [3, 5]


def test_every_group_trains_on_the_one_team_fitness_by_default():
    """The stated default for mixed cooperative / competitive envs: no group is singled
    out; the team fitness is the env's team reward, else the mean reward over all agents
    (JaxMARL's simple_tag: adversaries and the good agent together)."""
    from feudal_es.pettingzoo_host import team_reward

    assert team_reward({}, {"adversary_0": 1.0, "agent_0": -3.0}) == -1.0
    assert team_reward({"agent_0": {"team_reward": 5.0}}, {"adversary_0": 1.0,
                                                            "agent_0": -3.0}) == 5.0
    pytest.importorskip("jaxmarl")
    from envs.jaxmarl_env import make_jaxmarl

    env = make_jaxmarl("MPE_simple_tag_v3")
    _, state = env.reset(jax.random.key(0))
    for t in range(3):
        _, state, out = env.step(jax.random.key(t), state, jnp.asarray([1, 2, 3, 4]))
        np.testing.assert_allclose(float(out.team_reward), float(out.reward.mean()),
                                   rtol=1e-6)


@pytest.mark.heavy
def test_a_named_team_trains_alone_while_the_other_groups_act_at_random():
    """``team="adversary"`` on JaxMARL's simple_tag: the team reward is the adversaries'
    mean; the good agent acts uniformly at random whatever its network (log-prob 0), is
    masked out of MAPPO (its executor stays bit-identical through a train step while the
    adversaries' moves) and has no selector in ES's theta."""
    from feudal_es import mappo
    from feudal_es.pettingzoo_host import team_reward

    assert team_reward({}, {"adversary_0": 1.0, "agent_0": -3.0}, ("agent_0",)) == -3.0
    pytest.importorskip("jaxmarl")
    from agents import CentralCritic, CriticConfig
    from envs.jaxmarl_env import make_jaxmarl

    env = make_jaxmarl("MPE_simple_tag_v3").with_team("adversary")
    obs, state = env.reset(jax.random.key(0))
    _, _, out = env.step(jax.random.key(1), state, jnp.asarray([1, 2, 3, 4]))
    np.testing.assert_allclose(float(out.team_reward), float(out.reward[:3].mean()),
                               rtol=1e-6)
    with pytest.raises(ValueError, match=r"not one of the env's agent groups"):
        make_jaxmarl("MPE_simple_tag_v3").with_team("prey")
    actor = make_actor(jax.random.key(0), env, ACTOR, team="adversary")
    np.testing.assert_array_equal(np.asarray(actor.agent_mask), [1, 1, 1, 0])
    marked = selector_filter(actor)
    assert not any(jax.tree.leaves(marked.actors[1]))
    assert any(jax.tree.leaves(marked.actors[0]))
    other = eqx.tree_at(lambda a: a.actors[1], actor,
                        make_actor(jax.random.key(9), env, ACTOR).actors[1])
    adj = env.comm_graph(state)
    for t in range(4):
        k = jax.random.key(t)
        _, a1 = actor.step(k, obs, adj, actor.initial_option(4), jnp.asarray(0))
        _, a2 = other.step(k, obs, adj, other.initial_option(4), jnp.asarray(0))
        assert int(a1.action[3]) == int(a2.action[3]) and 0 <= int(a1.action[3]) < 5
        assert float(a1.log_prob[3]) == 0.0
    cfg = mappo.MAPPOConfig(num_envs=2, num_steps=8, epochs=1, minibatches=2)
    critic = CentralCritic.from_env(jax.random.key(2), env, CriticConfig(hidden=(8,)))
    ts = mappo.init_train_state(jax.random.key(3), env, actor, critic, cfg)
    after, _ = mappo.make_train_step(env, cfg)(ts)
    leaves = lambda a: jax.tree.leaves(eqx.filter(a.executor, eqx.is_inexact_array))
    for x, y in zip(leaves(ts.actor.actors[1]), leaves(after.actor.actors[1]), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert any(not np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(
        leaves(ts.actor.actors[0]), leaves(after.actor.actors[0]), strict=True))


def test_padding_and_the_team_shape_the_compiled_programs():
    """They change the env the jitted functions close over, so a second run in the same
    process with another pad_agents, groups or team must not reuse the first's
    programs."""
    from feudal_es.functions import compile_key
    from feudal_es.resolve import resolve_env

    base = CONFIG.override({"env": "feudal_es/Rover-v0"})
    env = resolve_env(base.env).core
    keys = {compile_key(c, env) for c in (base, base.override({"pad_agents": True}),
                                          base.override({"team": "x"}),
                                          base.override({"groups": {"x": ["y"]}}))}
    assert len(keys) == 4
