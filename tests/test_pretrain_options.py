"""The feudal split in imitation (feudal_es.pretrain with ``experts`` and ``schedule``): an
actor that follows an option schedule (``ActorConfig.options="schedule"``) holds each
option for its selector period, each visited state is labelled by the expert of the
option its agent holds (the jitted collection against a plain Python loop of the same
keys), only executor leaves move, and mismatches are refused with errors that name them."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import ActorConfig, FeudalActor
from envs.coverage import Coverage
from envs.policies import frontier_decentralized, lloyd_clairvoyant
from feudal_es import cli
from feudal_es.checkpoint import read_metadata
from feudal_es.config import COMPACT_ACTOR
from feudal_es.pretrain import PretrainConfig, _episodes, imitate, scheduled_expert
from feudal_es.theta import selector_theta

EXPLORE, COVER = 0, 1  # Coverage's options
PERIOD = 3
SCHEDULED = dataclasses.replace(COMPACT_ACTOR, options="schedule",
                                option_schedule=(EXPLORE, COVER), selector_period=PERIOD)
EXPERTS = (frontier_decentralized, lloyd_clairvoyant)


@pytest.fixture(scope="module")
def env():
    return Coverage(num_agents=3, max_steps=8, grid_size=8, map_size=4, num_features=3)


def test_a_schedule_holds_each_option_for_a_period_then_the_last_to_the_end(env):
    actor = FeudalActor.from_env(jax.random.key(0), env,
                                 dataclasses.replace(SCHEDULED, option_schedule=(1, 0, 1)))
    obs, state = env.reset(jax.random.key(1))
    option, held = actor.initial_option(env.num_agents), []
    for t in range(10):  # the schedule ignores the observation: one state serves
        option = actor.select_option(obs, env.comm_graph(state), option, jnp.int32(t))
        held.append(np.asarray(option).tolist())
    assert held == [[o] * 3 for o in (1, 1, 1, 0, 0, 0, 1, 1, 1, 1)]

    with pytest.raises(ValueError, match="option_schedule is the options of"):
        ActorConfig(options="schedule")
    with pytest.raises(ValueError, match="option_schedule is the options of"):
        ActorConfig(option_schedule=(0, 1))
    with pytest.raises(ValueError, match=r"option_schedule=\(0, 2\) but the env has 2"):
        FeudalActor.from_env(jax.random.key(0), env,
                             dataclasses.replace(SCHEDULED, option_schedule=(0, 2)))


def test_each_state_is_labelled_by_the_expert_of_the_option_held_as_a_loop_replays(env):
    """beta = 1: the experts act, so the episode is the scheduled expert's; a plain loop
    with the collection's own key derivation replays it state by state."""
    actor = FeudalActor.from_env(jax.random.key(0), env, SCHEDULED)
    key = jax.random.key(7)
    data = jax.jit(lambda k: _episodes(env, EXPERTS, actor, k, 2, 1.0))(key)
    policy = scheduled_expert(EXPERTS, (EXPLORE, COVER), PERIOD)
    step = jax.jit(env.step)
    for e, k in enumerate(jax.random.split(key, 2)):
        k_reset, k_run = jax.random.split(k)
        obs, state = env.reset(k_reset)
        for t, kt in enumerate(jax.random.split(k_run, env.max_steps)):
            k_exp, _, k_env = jax.random.split(kt, 3)
            i = e * env.max_steps + t
            held = EXPLORE if t < PERIOD else COVER
            np.testing.assert_array_equal(data["option"][i], [held] * 3)
            want = EXPERTS[held](k_exp, env, state)
            np.testing.assert_allclose(data["label"][i], want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(policy(k_exp, env, state), want, rtol=1e-5,
                                       atol=1e-6)
            np.testing.assert_allclose(data["obs"]["vec"][i], obs["vec"], rtol=1e-5,
                                       atol=1e-6)
            obs, state, _ = step(k_env, state, want)
    # the two experts differ on these states, so the test can tell which one labelled
    explore = np.asarray(data["label"]).reshape(2, env.max_steps, 3, 2)[:, :PERIOD]
    assert not np.allclose(explore, 0.0)


def test_two_option_imitation_moves_only_the_executor_and_refuses_mismatches(env):
    actor = FeudalActor.from_env(jax.random.key(0), env, SCHEDULED)
    cfg = PretrainConfig(experts=("frontier", "lloyd_clairvoyant"), schedule=(0, 1),
                         episodes=4, val_episodes=2, rounds=2, steps_per_round=20,
                         evals_per_round=2)
    result = imitate(env, actor, EXPERTS, cfg)
    assert len(result.losses) == 40 and np.all(np.isfinite(result.losses))
    np.testing.assert_array_equal(selector_theta(result.actor), selector_theta(actor))
    assert result.actor.option_schedule == (0, 1)

    fixed = FeudalActor.from_env(jax.random.key(0), env, dataclasses.replace(
        COMPACT_ACTOR, options="fixed", fixed_option=COVER))
    with pytest.raises(ValueError, match="must be built with options='schedule'"):
        imitate(env, fixed, EXPERTS, cfg)
    with pytest.raises(ValueError, match="one expert per option: give 2"):
        imitate(env, actor, lloyd_clairvoyant, cfg)
    with pytest.raises(ValueError, match=r"holds option\(s\) \[0\], whose expert is None"):
        imitate(env, actor, (None, lloyd_clairvoyant), cfg)
    with pytest.raises(ValueError, match=r"needs PretrainConfig\.schedule"):
        imitate(env, fixed, EXPERTS, PretrainConfig(option=COVER))
    with pytest.raises(ValueError, match=r"experts and PretrainConfig\.schedule go together"):
        PretrainConfig(experts=("frontier", "lloyd_clairvoyant"))
    with pytest.raises(ValueError, match="holds option 0, which"):
        PretrainConfig(experts=("", "lloyd_clairvoyant"), schedule=(0, 1))
    with pytest.raises(TypeError, match="experts must be a list of policy names"):
        PretrainConfig(experts=(1, 2), schedule=(0, 1))


@pytest.mark.heavy
def test_pretrain_command_imitates_a_schedule_recipe_and_refuses_a_single_expert(
        tmp_path, capsys):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"experts": ["frontier", "lloyd_clairvoyant"],
                                  "schedule": [0, 1], "episodes": 2, "val_episodes": 1,
                                  "rounds": 1, "steps_per_round": 2, "evals_per_round": 1}))
    out = tmp_path / "two.safetensors"
    small = dict(cnn_channels=[4], cnn_strides=[2], cnn_out=8, vec_hidden=[8], vec_out=8,
                 gnn_layers=1, gnn_features=8, embed_hidden=[], embed_dim=8,
                 executor_hidden=[8], selector_period=2)
    argv = ["pretrain", "--env", "feudal_es/Coverage-v0", "--recipe", str(recipe),
            "--eval-episodes", "2", "--no-progress", "--out", str(out),
            "--set", "env_kwargs.num_agents=2", "--set", "env_kwargs.max_steps=4",
            "--set", "env_kwargs.grid_size=8", "--set", "env_kwargs.map_size=4",
            *[f"--set=actor.{k}={json.dumps(v)}" for k, v in small.items()]]
    assert cli.main(argv) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "options 'explore' -> 'cover' (the next every 2 steps" in text
    assert "frontier+lloyd_clairvoyant" in text  # the reference row: the scheduled experts
    meta = read_metadata(out)
    assert meta["experts"] == ["frontier", "lloyd_clairvoyant"] and meta["schedule"] == [0, 1]
    assert "option" not in meta

    assert cli.main([*argv, "--expert", "lloyd_clairvoyant"]) == 2
    assert "--expert and --option name a single one" in capsys.readouterr().err
