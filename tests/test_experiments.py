"""Smoke tests of the result studies (experiments/): the statistics against hand
computations, the equal env-step budget accounting, and one tiny mode comparison that
writes its JSON / CSV / PNG / markdown."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from experiments import common
from feudal_es.stats import t_critical
from feudal_es.trainer import TrainerConfig


def test_mean_ci_matches_hand_computation():
    x = [1.0, 2.0, 4.0, 5.0, 8.0]  # mean 4, sample var = (9+4+0+1+16)/4 = 7.5
    m, hw = common.mean_ci(x)
    assert m == pytest.approx(4.0)
    assert hw == pytest.approx(2.776 * math.sqrt(7.5) / math.sqrt(5))
    assert common.mean_ci([3.0])[0] == 3.0 and math.isnan(common.mean_ci([3.0])[1])
    assert t_critical(4) == 2.776 and t_critical(22) == 2.074 and t_critical(500) == 1.96
    assert t_critical(35) == t_critical(30) == 2.042  # between entries: the smaller df
    assert math.isnan(t_critical(0))


def test_curve_band_grid_and_overlap():
    curves = np.array([[0.0, 1.0], [2.0, 3.0]])
    mean, hw = common.curve_band(curves)
    np.testing.assert_allclose(mean, [1.0, 2.0])
    np.testing.assert_allclose(hw, 12.706 * math.sqrt(2.0) / math.sqrt(2))
    np.testing.assert_allclose(common.on_grid([0, 10], [0.0, 1.0], np.array([0, 5, 10])),
                               [0.0, 0.5, 1.0])
    assert common.overlap((1.0, 0.5), (2.0, 0.5)) and not common.overlap((1.0, 0.4),
                                                                         (2.0, 0.5))


def test_equal_budget_counts_mappo_and_es_steps():
    base = dict(env="feudal_es/Discovery-v0", grad_steps_per_outer=2, episodes=3,
                es=dict(pop_size=4), mappo=dict(num_envs=2, num_steps=5, minibatches=1))
    cfg = TrainerConfig.from_dict({**base, "mode": "merl"})
    assert common.steps_per_round(cfg, 7) == 2 * 10 + 4 * 3 * 7
    budget, rounds = common.equal_budget(base, 7, 100)
    sizes = {"merl": 104, "es": 84, "mappo": 20}
    assert budget == math.lcm(*sizes.values())
    assert all(rounds[m] * sizes[m] == budget for m in sizes)


TINY = dict(
    env="feudal_es/Dispersion-v0",
    env_kwargs=dict(num_agents=2, max_steps=6, map_size=4),
    grad_steps_per_outer=1, episodes=1,
    es=dict(pop_size=2, sigma=0.1, lr=0.05),
    mappo=dict(num_envs=2, num_steps=6, epochs=1, minibatches=1, selector_period=3),
    actor=dict(cnn_channels=[2], cnn_strides=[2], cnn_out=4, vec_hidden=[8], vec_out=4,
               gnn_hops=1, gnn_layers=1, gnn_features=8, embed_hidden=[], embed_dim=8,
               executor_hidden=[8]),
    critic=dict(hidden=[8]),
)


def test_compare_modes_writes_outputs(tmp_path):
    report = common.compare_modes(
        "tiny", {"v": TINY}, {"v": 6}, budget=1, seeds=(0, 1), eval_episodes=1,
        metric="reached_frac", metric_label="reached", fitness_label="fitness",
        out_dir=tmp_path / "out", run_root=tmp_path / "runs", goal="none")
    for ext in ("json", "csv", "png", "md"):
        assert (tmp_path / "out" / f"tiny.{ext}").stat().st_size > 0
    data = json.loads((tmp_path / "out" / "tiny.json").read_text())
    v = data["variants"]["v"]
    assert {r["mode"] for r in v["runs"]} == set(common.MODES)
    assert all(r["env_steps"] == v["budget_env_steps"] for r in v["runs"])  # equal budget
    # the table's mean is the mean over seeds of each seed's held-out mean
    merl = [np.mean(r["heldout_team_return"]) for r in v["runs"] if r["mode"] == "merl"]
    assert v["team_return"]["merl"]["mean"] == pytest.approx(np.mean(merl))
    assert "| v |" in (tmp_path / "out" / "tiny.md").read_text()
    assert report["variants"]["v"]["rounds"]["merl"] >= 1
