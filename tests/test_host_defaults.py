"""The host path's behaviour where a user's env is silent or odd.

- Evaluation episodes stream through one env instance: any number of episodes builds
  one env (plus one per failure), with the same returns as a plain loop that builds a
  fresh env for every episode.
- An env that never ends its episodes is cut at ``max_episode_steps`` in MAPPO
  collection (a truncation: ``done`` set, the copy reset with the next seed) and in
  evaluation, and the first cut is warned once per run, naming the env, the limit and
  the config field.
- A non-finite observation, reward or ``team_reward`` is warned once, naming the value,
  the field, the agent, the step and the episode's seed; the run's "every candidate
  failed" error names it too.
"""

from __future__ import annotations

import dataclasses
import logging

import jax
import numpy as np
import pytest
from helpers import HOST, TINY_ACTOR
from host_envs_extra import EndlessLine, NonFiniteLine
from line_envs import FaultyLine, Line, Plan

from agents import ActorConfig, CentralCritic, CriticConfig, FeudalActor
from feudal_es import mappo
from feudal_es.host import HostCollector, HostEnvSpec, HostEvaluator
from feudal_es.resolve import ResolvedEnv
from feudal_es.theta import es_theta, set_es_theta
from feudal_es.trainer import ESTrainer

SPEC = HostEnvSpec(Line())
CONFIG = ActorConfig(**{k: tuple(v) if isinstance(v, list) else v
                        for k, v in TINY_ACTOR.items()}, selector_period=2)
ACTOR = FeudalActor(jax.random.key(0), SPEC.observation_space, SPEC.action_space, 2, CONFIG)
CRITIC = CentralCritic(jax.random.key(1), SPEC.global_state_size, 3, 2,
                       CriticConfig(hidden=(16,)))
KEY = jax.random.key(4)


def _thetas(count: int) -> np.ndarray:
    theta = np.asarray(es_theta(ACTOR))
    noise = np.random.default_rng(0).normal(size=(count, theta.size)).astype(np.float32)
    return theta[None] + noise


def _warnings(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "feudal_es" and text in r.getMessage()]


# --- 1. evaluation streams its episodes ----------------------------------------------
def test_evaluation_streams_through_one_env_and_equals_fresh_envs():
    built: list[Line] = []
    plan = Plan({4: ("raise", 2)})  # the 5th episode started: member 0's, episode 4

    def make(**kw):
        built.append(FaultyLine(plan, **kw))
        return built[-1]

    thetas, episodes, seed = _thetas(3), 12, 11
    plan.armed = True
    got = HostEvaluator(make, SPEC, 2, True, 100).returns(ACTOR, thetas, seed, KEY,
                                                          episodes=episodes)
    assert len(built) == 2  # one, and one fresh instance after the failure
    oracle = HostEvaluator(Line, SPEC, 1, True, 100)  # a fresh env for every episode
    want = np.array([[oracle.episode(set_es_theta(ACTOR, theta), Line(), seed + e,
                                     jax.random.fold_in(KEY, e)) for e in range(episodes)]
                     for theta in thetas])
    assert np.isnan(got[0]).all()  # member 0 failed in its episode 4: ranks last
    np.testing.assert_array_equal(got[1:], want[1:])


# --- 2. a time limit for envs without one --------------------------------------------
def test_endless_env_is_cut_at_max_episode_steps_and_warned_once(caplog):
    spec = HostEnvSpec(EndlessLine())
    cfg = mappo.MAPPOConfig(num_envs=2, num_steps=12, epochs=1, minibatches=1)
    collector = HostCollector([EndlessLine(), EndlessLine()], spec, cfg, seed=0,
                              deterministic=True, max_episode_steps=5)
    ts = mappo.init_learner(KEY, ACTOR, CRITIC, cfg)
    evaluator = HostEvaluator(EndlessLine, spec, 2, True, 7, notices=collector.notices)
    with caplog.at_level(logging.WARNING, logger="feudal_es"):
        ts, batch, stats = collector.collect(ts)
        evaluator.returns(ACTOR, _thetas(2), 3, KEY)
        own = HostEvaluator(EndlessLine, spec, 2, True, 7)  # its own notices: warns once
        own.returns(ACTOR, _thetas(2), 3, KEY)
        own.returns(ACTOR, _thetas(2), 3, KEY)
    done = np.asarray(batch.done)  # [T, E, N]: the 5th and 10th steps end the episodes
    assert done[[4, 9]].all() and done.sum() == done[[4, 9]].sum()
    assert stats["episodes"] == 4 and collector._episodes_started == 6
    assert evaluator.env.t == 7 and own.env.t == 7  # every episode cut after 7 steps
    (first, second) = _warnings(caplog, "max_episode_steps=")
    assert first.startswith("env EndlessLine ran a MAPPO collection episode to "
                            "max_episode_steps=5 steps without terminating or truncating")
    assert "TrainerConfig.max_episode_steps" in first
    assert second.startswith("env EndlessLine ran an evaluation episode to "
                             "max_episode_steps=7 steps")


def test_endless_env_trains_with_the_configs_limit(tmp_path, caplog):
    """A whole round (ES generation, evaluation) on an env without a time limit ends,
    the config's limit named once."""
    cfg = dataclasses.replace(HOST, max_episode_steps=8, n_outer=1)
    t = ESTrainer(cfg, tmp_path, resolved=ResolvedEnv(cfg.env, "host", make=EndlessLine))
    with caplog.at_level(logging.WARNING, logger="feudal_es"):
        t.run()
    (warning,) = _warnings(caplog, "max_episode_steps=")
    assert warning.startswith("env 'tests/Line' (EndlessLine) ran an evaluation episode to "
                              "max_episode_steps=8 steps")
    assert t.history[0]["selector_fitness"] is not None


# --- 3. non-finite env outputs, named ------------------------------------------------
def test_nonfinite_reward_in_collection_is_named_once(caplog):
    envs = [NonFiniteLine("reward", value=np.inf) for _ in range(2)]
    cfg = mappo.MAPPOConfig(num_envs=2, num_steps=12, epochs=1, minibatches=1)
    collector = HostCollector(envs, SPEC, cfg, seed=0, deterministic=True)
    with caplog.at_level(logging.WARNING, logger="feudal_es"):
        collector.collect(mappo.init_learner(KEY, ACTOR, CRITIC, cfg))
    (warning,) = _warnings(caplog, "returned")
    assert warning.startswith("env NonFiniteLine returned inf as the reward of agent 'a1' "
                              "at step 3 of an episode reset with seed 0 (MAPPO collection)")


def test_nonfinite_observation_in_evaluation_is_named_once(caplog):
    make = lambda **kw: NonFiniteLine("obs", agent="a2", at=4, **kw)
    with caplog.at_level(logging.WARNING, logger="feudal_es"):
        HostEvaluator(make, SPEC, 3, True, 100).returns(ACTOR, _thetas(2), 11, KEY)
    (warning,) = _warnings(caplog, "returned")
    assert warning.startswith("env NonFiniteLine returned nan in the observation of agent "
                              "'a2' at step 4 of an episode reset with seed 11 (evaluation)")


def test_every_member_nonfinite_names_the_envs_value(tmp_path, caplog):
    cfg = dataclasses.replace(HOST, n_outer=1)
    make = lambda **kw: NonFiniteLine("team_reward", at=2, **kw)
    t = ESTrainer(cfg, tmp_path, resolved=ResolvedEnv(cfg.env, "host", make=make))
    with caplog.at_level(logging.WARNING, logger="feudal_es"), \
            pytest.raises(FloatingPointError, match=(
                r"all 4 candidates failed or returned non-finite fitness; earlier, env "
                r"'tests/Line' \(NonFiniteLine\) returned nan in infos\['a0'\]\['team_reward'\]"
                r" at step 2 of an episode reset with seed \d+ \(evaluation\)")):
        t.run()
    assert len(_warnings(caplog, "returned nan")) == 1
