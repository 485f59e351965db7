"""JaxMARL envs on the pure-JAX path (envs.jaxmarl_env): the adapter against the raw
JaxMARL env step by step (observations, rewards, dones, auto-resets; Discrete and Box
actions), heterogeneous envs refused, the reverse wrapper (a bundled env as a JaxMARL
MultiAgentEnv) against the functional core, and one MERL round through the trainer and
the CLI's env listing. Skipped when the ``jaxmarl`` extra is not installed (``make test``
installs it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jaxmarl = pytest.importorskip("jaxmarl")

from envs.base import auto_reset_step  # noqa: E402
from envs.dispersion import Dispersion  # noqa: E402
from envs.jaxmarl_env import AsJaxMARL, JaxMARLSwarm, jaxmarl_ids, make_jaxmarl  # noqa: E402

STEPS = 60  # over two 26-step episodes: the auto-resets are compared too


def run_both(name: str, sample, **kwargs):
    """The raw env's ``step`` (which auto-resets) and the adapter under feudal-es's
    ``auto_reset_step``, on the same keys and actions, ``STEPS`` steps: per-step
    (obs, rewards, done) of each."""
    raw = jaxmarl.make(name, **kwargs)
    ours = JaxMARLSwarm(raw, name)
    agents = raw.agents

    def scan(step, init):
        return jax.lax.scan(step, init, jax.random.split(jax.random.key(2), STEPS))[1]

    def raw_step(state, key):
        k_act, k_env = jax.random.split(key)
        acts = sample(k_act, len(agents))
        obs, state, rew, dones, _ = raw.step(k_env, state, {a: acts[i]
                                                            for i, a in enumerate(agents)})
        stack = lambda d: jnp.stack([d[a] for a in agents])
        return state, (stack(obs), stack(rew), dones["__all__"])

    def our_step(state, key):
        k_act, k_env = jax.random.split(key)
        obs, state, out = auto_reset_step(ours, k_env, state, sample(k_act, len(agents)))
        return state, (obs["obs"], out.reward, out.done)

    raw_obs0, raw_state = raw.reset(jax.random.key(1))
    our_obs0, our_state = ours.reset(jax.random.key(1))
    np.testing.assert_array_equal(np.asarray(our_obs0["obs"]),
                                  np.stack([raw_obs0[a] for a in agents]))
    return (jax.device_get(jax.jit(lambda s: scan(raw_step, s))(raw_state)),
            jax.device_get(jax.jit(lambda s: scan(our_step, s))(our_state)), ours)


def discrete(key, n):
    return jax.random.randint(key, (n,), 0, 5)


def box(key, n):
    return jax.random.uniform(key, (n, 5))


@pytest.mark.parametrize("name, sample, kwargs", [
    ("MPE_simple_spread_v3", discrete, {}),
    ("MPE_simple_spread_v3", box, {"action_type": "Continuous"}),
])
def test_adapter_equals_the_raw_env_step_by_step(name, sample, kwargs):
    raw, ours, env = run_both(name, sample, **kwargs)
    for got, want, what in zip(ours, raw, ("obs", "rewards", "dones"), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6,
                                   err_msg=what)
    done = np.asarray(raw[2])
    assert list(np.flatnonzero(done)) == [25, 51]  # 26-step episodes, reset after each
    assert env.max_steps == 26 and env.global_state_size == 3 * 18
    assert np.unique(np.asarray(raw[1])).size > 10  # the rewards vary: not vacuous


def test_spaces_horizon_and_team_reward():
    env = make_jaxmarl("MPE_simple_spread_v3")
    assert env.num_agents == 3 and env.skill_names == ("reward",)
    assert env.action_space.n == 5 and env.observation_space["obs"].shape == (18,)
    cont = make_jaxmarl("MPE_simple_spread_v3", action_type="Continuous")
    assert cont.action_space.shape == (5,)
    _, state = env.reset(jax.random.key(0))
    _, state, out = env.step(jax.random.key(1), state, jnp.array([1, 2, 3]))
    assert float(out.team_reward) == pytest.approx(float(out.reward.mean()))
    np.testing.assert_array_equal(np.asarray(out.skill_rewards[:, 0]), np.asarray(out.reward))
    np.testing.assert_array_equal(np.asarray(env.comm_graph(state)), 1 - np.eye(3))
    # the global state (MPE has no world state): the stacked observations, from the state
    # (the raw env's get_obs) or from the step's own observation, as the rollout takes it
    obs, state, _ = env.step(jax.random.key(2), state, jnp.array([4, 0, 2]))
    raw = env.env.get_obs(state.inner)
    np.testing.assert_allclose(np.asarray(env.global_state(state)),
                               np.concatenate([raw[a] for a in env.agents]), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(env.global_state_at(state, obs)),
                                  np.asarray(obs["obs"]).reshape(-1))
    np.testing.assert_allclose(np.asarray(env.global_state_at(state, obs)),
                               np.asarray(env.global_state(state)), rtol=1e-6, atol=1e-7)
    assert env.global_state_size == 54


def test_after_the_end_the_state_is_frozen_and_scores_nothing():
    """A fixed-length fitness episode longer than the env's (no auto-reset) counts the
    finished episode once: the state stops and the rewards are 0 after ``done``."""
    env = make_jaxmarl("MPE_simple_spread_v3", max_steps=4)  # 5-step episodes
    _, state = env.reset(jax.random.key(0))
    rewards, dones = [], []
    for t in range(8):
        _, state, out = env.step(jax.random.key(t), state, jnp.array([1, 2, 3]))
        rewards.append(float(out.team_reward))
        dones.append(bool(out.done))
    assert dones == [False] * 4 + [True] * 4
    assert all(r != 0 for r in rewards[:5]) and rewards[5:] == [0.0, 0.0, 0.0]


def test_unknown_envs_are_refused_and_heterogeneous_ones_come_in_groups():
    tag = make_jaxmarl("MPE_simple_tag_v3")
    assert [(g.name, g.agents) for g in tag.agent_groups] == [("adversary", (0, 1, 2)),
                                                              ("agent", (3,))]
    with pytest.raises(ValueError, match=r"did you mean \['MPE_simple_spread_v3'"):
        make_jaxmarl("MPE_simple_spraed_v3")
    assert "MPE_simple_spread_v3" in jaxmarl_ids()


def test_bundled_env_as_a_jaxmarl_env():
    core = Dispersion(num_agents=3, max_steps=5, obs_mode="vec")
    env = AsJaxMARL(core)
    assert isinstance(env, jaxmarl.environments.MultiAgentEnv)
    obs, state = env.reset(jax.random.key(0))
    core_obs, core_state = core.reset(jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(obs["agent_1"]["vec"]),
                                  np.asarray(core_obs["vec"][1]))
    acts = {a: jnp.full(2, 0.5 * i) for i, a in enumerate(env.agents)}
    obs, state, rew, dones, _ = env.step_env(jax.random.key(1), state, acts)
    _, _, out = core.step(jax.random.key(1), core_state, jnp.stack(list(acts.values())))
    assert float(rew["agent_2"]) == float(out.reward[2]) and not bool(dones["__all__"])
    assert env.action_space("agent_0").shape == (2,)


def test_configs_mpe_holds_the_benchs_best_probe():
    """``configs/mpe.json`` (the MPE study, the README's example) is the best probe of
    ``bench/vs_jaxmarl.py``'s sweep, field for field."""
    import json
    from pathlib import Path

    from bench.vs_jaxmarl import BEST_PROBE, probe

    cfg = json.loads((Path(__file__).resolve().parents[1] / "configs/mpe.json").read_text())
    best = probe(BEST_PROBE)
    assert {k: v for k, v in cfg["mappo"].items() if k != "anneal_updates"} == best["mappo"]
    assert cfg["actor"] == best["actor"] and cfg["critic"] == best["critic"]


@pytest.mark.slow  # a MERL round on MPE (~40 s); the adapter tests above stay fast
def test_one_merl_round_through_the_trainer(tmp_path, capsys):
    from feudal_es import cli
    from feudal_es.config import TrainerConfig
    from feudal_es.trainer import ESTrainer

    cfg = TrainerConfig(env="jaxmarl/MPE_simple_spread_v3", n_outer=1, episodes=2,
                        grad_steps_per_outer=1,  # (the vector default is 4)
                        es=dict(pop_size=4), mappo=dict(num_envs=4, num_steps=26, epochs=1,
                                                        minibatches=1),
                        actor=dict(vec_hidden=[], vec_out=16, gnn_layers=0, embed_hidden=[],
                                   embed_dim=16, executor_hidden=[], activation="tanh",
                                   selector_period=13),
                        critic=dict(hidden=[16], layer_norm=False), gif=False)
    t = ESTrainer(cfg, tmp_path / "mpe")
    row = t.run()[0]
    assert t.runtime.kind == "jax" and row["env_steps"] == 4 * 26
    assert row["selector_fitness"] < 0 and row["mappo/policy_loss"] is not None
    assert cli.main(["envs"]) == 0
    assert "jaxmarl/MPE_simple_spread_v3" in capsys.readouterr().out
