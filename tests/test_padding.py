"""Agents with different spaces share one actor through SuperSuit's padding
(``TrainerConfig.pad_agents``, :mod:`feudal_es.padding`), on the host path.

Oracles: the runtime's env is exactly SuperSuit's three wrappers applied by hand to the
raw env (same observations, same spaces, same rewards for the same actions); a padded
run trains, checkpoints and resumes. Without ``pad_agents`` the same env trains in agent
groups (tests/test_groups.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pettingzoo
import pytest
from helpers import TINY_ACTOR
from hetero_envs import SpeakerListener

from feudal_es.config import TrainerConfig
from feudal_es.padding import Padded
from feudal_es.trainer import ESTrainer

supersuit = pytest.importorskip("supersuit")
# SuperSuit's wrappers go through PettingZoo's AEC conversions, which warn that the toy env
# names no render_mode
pytestmark = pytest.mark.filterwarnings("ignore:The base environment:UserWarning")

CONFIG = TrainerConfig(
    env="tests/SpeakerListener", mode="merl", n_outer=2, episodes=2, seed=1, num_skills=2,
    es=dict(pop_size=2, sigma=0.5, lr=0.1), actor={**TINY_ACTOR, "selector_period": 2},
    critic=dict(hidden=[16]), mappo=dict(num_envs=2, num_steps=5, epochs=1, minibatches=1),
    checkpoint_every=1, plot_every=100, gif=False, pad_agents=True)


def test_the_padded_env_is_supersuits_wrappers_applied_by_hand():
    ours = Padded(SpeakerListener)()
    theirs = supersuit.agent_indicator_v0(supersuit.pad_action_space_v0(
        supersuit.pad_observations_v0(SpeakerListener())))
    for a in ours.possible_agents:
        assert ours.observation_space(a) == theirs.observation_space(a)
        assert ours.action_space(a) == theirs.action_space(a) == ours.action_space(
            "listener_0")
    assert ours.observation_space("speaker_0").shape == (4 + 2,)  # widest + indicator
    o1, _ = ours.reset(seed=3)
    o2, _ = theirs.reset(seed=3)
    for t in range(5):
        for a in o1:
            np.testing.assert_array_equal(o1[a], o2[a])
        acts = {"speaker_0": 4 - t % 5, "listener_0": t % 5}  # 3, 4: outside the speaker's
        o1, r1, *_ = ours.step(acts)
        o2, r2, *_ = theirs.step(acts)
        assert r1 == r2
    # a picklable factory stays picklable padded (host_workers build it in processes)
    assert pickle.loads(pickle.dumps(Padded(SpeakerListener))) == Padded(SpeakerListener)


@pytest.mark.heavy
def test_a_padded_run_trains_checkpoints_and_resumes(tmp_path):
    """By id (registered with PettingZoo), as the CLI names it: the run pads, and its
    resume, which reads the env id and ``pad_agents`` back from the checkpoint, too."""
    pettingzoo.register("parallel", "tests/SpeakerListener-v0", entry_point=SpeakerListener)
    cfg = CONFIG.override({"env": "tests/SpeakerListener-v0"})
    t = ESTrainer(cfg, tmp_path / "run")
    assert t.runtime.spec.observation_space.shape == (6,)  # widest (4) + indicator (2)
    assert t.runtime.spec.action_space.n == 5
    assert [h["round"] for h in t.run()] == [0, 1]
    resumed = ESTrainer.resume(tmp_path / "run", n_outer=3)
    assert resumed.round == 2 and resumed.config.pad_agents
    resumed.run()
    assert (tmp_path / "run" / "ckpt_00000003.safetensors").is_file()
