"""An own env learns with the defaults (issue 33).

The defaults resolve by the env's observation kind: a vector-observation env (a user's
PettingZoo env, a JaxMARL env, a bundled env with ``obs_mode="vec"``) gets the vector
actor and the MAPPO budget of ``configs/rover.json``, an image one the CNN actor; an env
without ``skill_rewards`` gets one option. Only settings the user did not give are filled
(a ``--config`` file's keys, ``--set``, the constructor's keywords all win), and a resumed
run trains the config it saved. The banner says what was chosen and why; ``feudal-es
envs`` lists what trains and, apart, what does not with the reason.

The slow test trains ``user_envs.Gather`` (a vector-observation env written from the
README's "Your own PettingZoo env" section alone) through ``feudal-es train`` with no
settings but the README's ``--n-outer 3``, five seeds, and compares the team fitness of
the trained runs with that of the untrained actor: disjoint 95% t-intervals.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import gymnasium as gym
import jax
import numpy as np
import pettingzoo
import pytest
import user_envs  # registers tests/Gather-v0 (and tests/CliLine-v0)
from pettingzoo.test import parallel_api_test

from agents import ActorConfig
from envs.jaxmarl_env import available as jaxmarl_available
from feudal_es import cli, cli_train
from feudal_es.config import (
    OBSERVATION_DEFAULTS,
    VEC_ACTOR,
    TrainerConfig,
)
from feudal_es.env_defaults import mappo_steps_per_round
from feudal_es.pettingzoo_host import EnvOutputError, HostEnvSpec, check_step
from feudal_es.resolve import apply_env_defaults, resolve_env, trainable_ids
from feudal_es.trainer import ESTrainer

README = Path(__file__).resolve().parents[1] / "README.md"
GATHER = "tests/Gather-v0"
OLD_STEPS = 1 * 8 * 32  # the class defaults' MAPPO env steps per round (the old default)
VECTOR_STEPS = 4 * 32 * 50  # configs/rover.json's
ARCHITECTURE = ("vec_hidden", "vec_out", "gnn_layers", "embed_hidden", "embed_dim",
                "executor_hidden")


def _defaults(env: str, **kwargs) -> tuple[TrainerConfig, object]:
    """What a run of ``TrainerConfig(env=env, **kwargs)`` trains, and why."""
    cfg = TrainerConfig(env=env, **kwargs)
    return apply_env_defaults(cfg, resolve_env(cfg.env, cfg.env_kwargs))


def _train_args(*argv: str) -> TrainerConfig:
    """The config ``feudal-es train ARGV`` builds (before the env's defaults)."""
    return cli_train.train_config(cli.build_parser().parse_args(["train", *argv]))


# --- the defaults by observation kind --------------------------------------------------
VECTOR_ENVS = [pytest.param(GATHER, {}, id="own-pettingzoo"),
               pytest.param("feudal_es/Discovery-v0", {"obs_mode": "vec"}, id="bundled-vec"),
               pytest.param("jaxmarl/MPE_simple_spread_v3", {}, id="jaxmarl",
                            marks=pytest.mark.skipif(not jaxmarl_available(),
                                                     reason="jaxmarl not installed"))]


@pytest.mark.parametrize(("env", "env_kwargs"), VECTOR_ENVS)
def test_vector_env_gets_the_vector_actor_and_a_budget_that_learns(env, env_kwargs):
    cfg, chosen = _defaults(env, env_kwargs=env_kwargs)
    assert chosen.observation == "vector" and cfg.auto == ()
    for name in ARCHITECTURE:
        assert getattr(cfg.actor, name) == getattr(VEC_ACTOR, name), name
    assert cfg.critic.hidden == (64, 64)
    assert mappo_steps_per_round(cfg) == VECTOR_STEPS == 25 * OLD_STEPS
    rover = json.loads((README.parent / "configs" / "rover.json").read_text())
    assert {k: getattr(cfg.mappo, k) for k in rover["mappo"]} == rover["mappo"]
    assert cfg.grad_steps_per_outer == rover["grad_steps_per_outer"]


def test_image_env_gets_the_cnn_actor():
    cfg, chosen = _defaults("feudal_es/Coverage-v0")
    assert chosen.observation == "image" and "actor.embed_dim" in chosen.filled
    assert cfg.actor == ActorConfig() and cfg.actor.cnn_channels == (32, 32, 32)
    assert mappo_steps_per_round(cfg) == OLD_STEPS
    assert OBSERVATION_DEFAULTS["image"] == {}


class SkillGather(user_envs.Gather):
    """Gather with three named skills, a skill-reward channel each."""

    skill_names = ("closer", "still", "apart")

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        for a in infos:
            infos[a]["skill_rewards"] = [rewards[a], 0.0, -rewards[a]]
        return obs, rewards, terms, truncs, infos


pettingzoo.register("parallel", "tests/SkillGather-v0", entry_point=SkillGather)


def test_an_env_without_skill_rewards_gets_one_option_unless_asked():
    cfg, chosen = _defaults(GATHER)
    assert cfg.num_skills == 1 and chosen.options_from == "default"
    assert _defaults(GATHER, num_skills=2)[0].num_skills == 2  # asked for
    for env in ("tests/SkillGather-v0", "feudal_es/Coverage-v0"):  # its skill_names
        assert _defaults(env)[1].options_from == "env"
    trainer = ESTrainer(TrainerConfig(env="tests/SkillGather-v0", gif=False))
    assert trainer.skill_names == SkillGather.skill_names
    assert TrainerConfig.from_dict({}).num_skills == 1  # the class default, too (was 2)


def test_explicit_settings_always_win(tmp_path):
    """Values equal to the old class defaults, given on purpose, are kept."""
    old = dict(num_steps=32, lr=5e-4)
    given = _train_args("--env", GATHER, "--set", "mappo.num_steps=32", "--set",
                        "mappo.lr=0.0005", "--set", "grad_steps_per_outer=1", "--set",
                        "actor.embed_dim=16")
    cfg = apply_env_defaults(given, resolve_env(GATHER))[0]
    assert (cfg.mappo.num_steps, cfg.mappo.lr) == (old["num_steps"], old["lr"])
    assert cfg.grad_steps_per_outer == 1 and cfg.actor.embed_dim == 16
    assert cfg.mappo.num_envs == 32 and cfg.actor.gnn_layers == 0  # not given: defaults

    path = tmp_path / "mine.json"  # a config file gives exactly its keys
    path.write_text(json.dumps({"env": GATHER, "mappo": {"num_envs": 8},
                                "critic": {"hidden": [256, 256]}}))
    cfg = apply_env_defaults(_train_args("--config", str(path)), resolve_env(GATHER))[0]
    assert cfg.mappo.num_envs == 8 and cfg.critic.hidden == (256, 256)
    assert cfg.mappo.num_steps == 50 and cfg.critic.layer_norm is False
    cfg = apply_env_defaults(_train_args("--config", str(path), "--set", "mappo.num_steps=7"),
                             resolve_env(GATHER))[0]
    assert (cfg.mappo.num_envs, cfg.mappo.num_steps) == (8, 7)  # --set on top of the file

    # Python: keywords, a nested dict's keys, dataclasses.replace, auto=[] (no defaults)
    assert _defaults(GATHER, grad_steps_per_outer=1)[0].grad_steps_per_outer == 1
    assert _defaults(GATHER, mappo=dict(epochs=5))[0].mappo.epochs == 5
    base = TrainerConfig(env=GATHER)
    assert apply_env_defaults(dataclasses.replace(base, grad_steps_per_outer=2),
                              resolve_env(GATHER))[0].grad_steps_per_outer == 2
    literal = apply_env_defaults(_train_args("--env", GATHER, "--set", "auto=[]"),
                                 resolve_env(GATHER))[0]
    assert literal == TrainerConfig(env=GATHER, auto=())
    assert mappo_steps_per_round(literal) == OLD_STEPS


def test_a_resumed_run_trains_the_config_it_saved(tmp_path, monkeypatch):
    trainer = ESTrainer(TrainerConfig(env=GATHER, gif=False), tmp_path / "run")
    trainer.save_checkpoint()
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["mappo"]["num_envs"] == 32 and "auto" not in saved
    # the defaults change (another feudal-es): the saved run keeps what it trained
    monkeypatch.setitem(OBSERVATION_DEFAULTS, "vector", {
        **OBSERVATION_DEFAULTS["vector"], "mappo.num_envs": 8, "actor.embed_dim": 8})
    assert _defaults(GATHER)[0].mappo.num_envs == 8  # a new run would take them
    resumed = ESTrainer.resume(tmp_path / "run")
    assert resumed.config == trainer.config and resumed.config.to_dict() == saved
    assert resumed.defaults.filled == ()


def test_banner_says_what_was_chosen_and_why(tmp_path, capsys):
    trainer = ESTrainer(TrainerConfig(env=GATHER, mode="mappo", gif=False), tmp_path / "m")
    trainer.run = lambda progress=False: None  # the banner, not the rounds
    assert cli_train.run_training(trainer, progress=False) == 0
    banner = capsys.readouterr().out.split("\ndone in")[0]
    assert ("vector observations -> vector actor, 6400 MAPPO env steps/round (the "
            "defaults for vector observations)") in banner
    assert ("one option (the env names no skills (skill_names) to choose from): the "
            "selector is idle") in banner
    assert "MAPPO only (nothing evolved)" in banner and "ES on" not in banner

    trainer = ESTrainer(TrainerConfig(env="feudal_es/Coverage-v0", gif=False,
                                      grad_steps_per_outer=2), tmp_path / "c")
    text = trainer.defaults.describe(trainer.config, trainer.skill_names)
    assert text == ("image observations -> CNN actor, 512 MAPPO env steps/round (the "
                    "defaults for image observations); 2 options (explore, cover)")


# --- the README's env and `feudal-es envs` --------------------------------------------
def test_readme_env_passes_pettingzoos_api_test(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (module,) = [b for b in blocks if b.startswith("# my_envs.py\n")]
    namespace: dict = {"__name__": "readme_my_envs"}
    monkeypatch.setattr(pettingzoo, "register", lambda *a, **k: None)  # run it, no id
    exec(compile(module, "README my_envs.py", "exec"), namespace)
    parallel_api_test(namespace["LineMeet"](), num_cycles=100)
    parallel_api_test(user_envs.Gather(), num_cycles=100)


class Mixed(user_envs.Gather):
    """Gather whose last robot sees a longer vector (agents with different spaces)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._other = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)

    def observation_space(self, agent):
        return self._other if agent == self.possible_agents[-1] else self._obs_space


pettingzoo.register("parallel", "tests/MixedGather-v0", entry_point=Mixed)


class MixedKinds(user_envs.Gather):
    """Gather whose last robot acts in a Discrete space: agents in groups must all act in
    Discrete or all in Box spaces, so it does not train."""

    def action_space(self, agent):
        return gym.spaces.Discrete(3) if agent == self.possible_agents[-1] else \
            self._act_space


pettingzoo.register("parallel", "tests/MixedKinds-v0", entry_point=MixedKinds)


def test_envs_lists_only_what_trains_and_says_why_the_rest_does_not(monkeypatch, capsys):
    ok, refused = trainable_ids([GATHER, "tests/MixedGather-v0", "tests/MixedKinds-v0"])
    assert ok == [GATHER, "tests/MixedGather-v0"]  # agents in groups
    assert "others in Box spaces" in refused["tests/MixedKinds-v0"]
    if jaxmarl_available():
        ok, refused = trainable_ids(["jaxmarl/MPE_simple_spread_v3",
                                     "jaxmarl/MPE_simple_tag_v3"])
        assert ok == ["jaxmarl/MPE_simple_spread_v3", "jaxmarl/MPE_simple_tag_v3"]
        assert not refused

    def fake(ids):  # what the listing does with the answer (making every env is slow)
        bad = {i: "its agents have different observation or action spaces" for i in ids
               if "tag" in i or "Mixed" in i}
        return [i for i in ids if i not in bad], bad

    monkeypatch.setattr("feudal_es.resolve.trainable_ids", fake)
    monkeypatch.setattr("envs.jaxmarl_env.jaxmarl_ids",
                        lambda: ["MPE_simple_spread_v3", "MPE_simple_tag_v3"])
    monkeypatch.setattr("envs.jaxmarl_env.available", lambda: True)
    assert cli.main(["envs"]) == 0
    out = capsys.readouterr().out
    shared, rest = out.split("registered with PettingZoo (host path):")
    assert "jaxmarl/MPE_simple_spread_v3" in shared and "MPE_simple_tag_v3" not in shared
    host, refused_text = rest.split("installed but not trainable by feudal-es")
    assert GATHER in host and "tests/MixedGather-v0" not in host
    assert ("jaxmarl/MPE_simple_tag_v3: its agents have different observation or action "
            "spaces") in refused_text and "tests/MixedGather-v0: " in refused_text


# --- it learns ---------------------------------------------------------------------------
def _t_interval(x: np.ndarray) -> tuple[float, float]:
    """The 95% t-interval of the mean of ``x`` (5 values: t(4) = 2.776)."""
    from scipy import stats

    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean() - half), float(x.mean() + half)


SEEDS = (0, 1, 2, 3, 4)
EPISODES = 16


@pytest.mark.slow  # five host-path runs of 3 rounds (~2-3 min on 2 cores)
def test_an_own_vector_env_learns_with_the_defaults(tmp_path, capsys):
    """``feudal-es train --import user_envs --env tests/Gather-v0 --n-outer 3`` (the
    README's rounds, no other setting) for 5 seeds; each run's final selector and
    executor against the untrained actor of the same seed's defaults, on the same 16
    held-out episodes: the trained 95% t-interval lies above the untrained one."""
    rounds = int(re.search(r"train --import my_envs --env me/LineMeet-v0 --n-outer (\d+)",
                           README.read_text())[1])
    key = jax.random.key(2026)
    trained, untrained = [], []
    for seed in SEEDS:
        run = tmp_path / f"seed_{seed}"
        assert cli.main(["train", "--import", "user_envs", "--env", GATHER, "--n-outer",
                         str(rounds), "--seed", str(seed), "--out", str(run),
                         "--no-progress"]) == 0
        assert "vector observations -> vector actor" in capsys.readouterr().out
        from feudal_es.evaluate import load_trainer

        final, _ = load_trainer(run)
        assert final.round == rounds
        trained.append(final.rollout_stats(final.result_theta()[None], key,
                                           episodes=EPISODES)[0].mean())
        fresh = ESTrainer(TrainerConfig(env=GATHER, seed=seed, gif=False), tmp_path / "x")
        assert fresh.config == final.config.override({  # the same defaults, untrained
            "n_outer": fresh.config.n_outer, "imports": [], "gif": False})
        untrained.append(fresh.rollout_stats(fresh.result_theta()[None], key,
                                             episodes=EPISODES)[0].mean())
    trained_ci, untrained_ci = _t_interval(np.array(trained)), _t_interval(np.array(untrained))
    print(f"team fitness after {rounds} rounds, {len(SEEDS)} seeds x {EPISODES} episodes: "
          f"trained {np.mean(trained):.4f} {trained_ci}, untrained {np.mean(untrained):.4f} "
          f"{untrained_ci}")
    assert trained_ci[0] > untrained_ci[1], (trained, untrained)
    # and visibly: the robots end at least 10x closer together than untrained (0 is all
    # at one point; the old defaults, the CNN-sized actor and 256 MAPPO steps per round,
    # ended ~0.7x as far apart after these 3 rounds)
    assert np.mean(trained) > 0.1 * np.mean(untrained), (trained, untrained)


class UnnamedSkillGather(SkillGather):
    """Sends three skill rewards but names no skills."""

    skill_names = None


def test_skill_rewards_without_skill_names_is_refused_by_name():
    """Three skill rewards and one option would pay option 0 channel 0 silently."""
    env = UnnamedSkillGather()
    spec = HostEnvSpec(env)
    env.reset(seed=0)
    actions = {a: env.action_space(a).sample() for a in env.agents}
    with pytest.raises(EnvOutputError, match=r"has 3 value\(s\), but the selector has 1 "
                                             r"option\(s\) \['skill_0'\].*num_skills=N"):
        check_step(env, actions, env.step(actions), spec)
    spec3 = HostEnvSpec(env, num_skills=3)  # asked for three: accepted
    env.reset(seed=0)
    check_step(env, actions, env.step(actions), spec3)
