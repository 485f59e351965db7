"""The result studies (experiments/): the statistics against hand computations, the
equal env-step budget accounting of every arm, and one tiny study end to end (seeds in
one program against a one-seed run, held-out episodes shared with the reference
policies, every output file)."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from experiments import machine
from experiments.arms import ARMS, arm_config, equal_budget, merge, round_sizes, steps_per_round
from experiments.report import RESULTS, markdown, merge_reports, slug
from experiments.stats import (
    above,
    add_iqm,
    curve_band,
    fmt_iqm,
    mean_ci,
    on_grid,
    overlap,
    summarize,
)
from experiments.training import (
    HELDOUT_SEED,
    SEEDS,
    Variant,
    compare_arms,
    merl_beats,
    reference_returns,
    train_arm,
)
from feudal_es.config import TrainerConfig
from feudal_es.stats import t_critical


def test_mean_ci_matches_hand_computation():
    x = [1.0, 2.0, 4.0, 5.0, 8.0]  # mean 4, sample var = (9+4+0+1+16)/4 = 7.5
    m, hw = mean_ci(x)
    assert m == pytest.approx(4.0)
    assert hw == pytest.approx(2.776 * math.sqrt(7.5) / math.sqrt(5))
    assert mean_ci([3.0])[0] == 3.0 and math.isnan(mean_ci([3.0])[1])
    assert t_critical(4) == 2.776 and t_critical(9) == 2.262 and t_critical(500) == 1.96
    assert t_critical(35) == t_critical(30) == 2.042  # between entries: the smaller df
    assert math.isnan(t_critical(0))
    s = summarize([0.5, 0.7])  # 2 seeds: t(1) = 12.706, sd = 0.1414
    assert s["n"] == 2 and s["ci95"] == pytest.approx(12.706 * 0.1 * math.sqrt(2) / math.sqrt(2))
    # the IQM beside it: the mean of the middle half (8 seeds: drop 2 at each end)
    eight = [0.0, 9.0, 1.0, 2.0, 3.0, 4.0, -9.0, 5.0]
    s = summarize(eight)
    assert s["iqm"][0] == pytest.approx(np.mean([1.0, 2.0, 3.0, 4.0]))
    assert s["iqm"][1] <= s["iqm"][0] <= s["iqm"][2]
    old = {"a": [{"per_seed": eight, "mean": 1.875, "ci95": 1.0}], "b": "x"}
    assert add_iqm(old)["a"][0]["iqm"] == s["iqm"] and fmt_iqm(s).count("[") == 1


def test_curve_band_grid_and_disjoint_intervals():
    mean, hw = curve_band(np.array([[0.0, 1.0], [2.0, 3.0]]))
    np.testing.assert_allclose(mean, [1.0, 2.0])
    np.testing.assert_allclose(hw, 12.706 * math.sqrt(2.0) / math.sqrt(2))
    np.testing.assert_allclose(on_grid([0, 10], [0.0, 1.0], np.array([0, 5, 10])),
                               [0.0, 0.5, 1.0])
    assert overlap((1.0, 0.5), (2.0, 0.5)) and not overlap((1.0, 0.4), (2.0, 0.5))
    assert overlap((1.0, math.nan), (5.0, 0.1))  # one seed: never "disjoint"
    lo, hi = {"mean": 0.2, "ci95": 0.05}, {"mean": 0.4, "ci95": 0.1}
    assert above(hi, lo) and not above(lo, hi)
    assert above(lo, hi, higher=False)  # lower is better (Coverage's J)
    assert not above({"mean": 0.4, "ci95": 0.2}, lo)


def test_arms_share_the_base_and_differ_only_in_their_overrides():
    base = dict(env="feudal_es/Rover-v0", actor=dict(embed_dim=16, options="learned"),
                mappo=dict(lr=1e-3))
    fixed = arm_config(base, "mappo_fixed", {"actor": {"fixed_option": 2}})
    assert fixed == dict(env="feudal_es/Rover-v0", mode="mappo", mappo=dict(lr=1e-3),
                         actor=dict(embed_dim=16, options="fixed", fixed_option=2))
    assert base["actor"] == dict(embed_dim=16, options="learned")  # not mutated
    assert arm_config(base, "es")["mode"] == "es"
    assert arm_config(base, "merl")["actor"] == base["actor"]


def test_equal_budget_counts_mappo_and_es_steps_per_arm():
    base = dict(env="feudal_es/Discovery-v0", grad_steps_per_outer=2, episodes=3,
                es=dict(pop_size=4), mappo=dict(num_envs=2, num_steps=5, minibatches=1))
    cfg = TrainerConfig.from_dict({**base, "mode": "merl"})
    assert steps_per_round(cfg, 7) == 2 * 10 + 4 * 3 * 7  # MAPPO + ES episodes
    budget, rounds = equal_budget(base, 7, 100)
    sizes = {"merl": 104, "mappo_uniform": 20, "mappo_fixed": 20, "es": 84}
    assert budget == math.lcm(*sizes.values())
    assert rounds == {a: budget // s for a, s in sizes.items()}
    assert all(rounds[a] * sizes[a] == budget for a in sizes)
    assert equal_budget(base, 7, 3 * budget + 1)[0] == 4 * budget  # rounded up
    # within one round: the fewest whole rounds past the budget, each arm on its own
    asked, near = equal_budget(base, 7, 1000, within_round=True)
    assert asked == 1000 and near == {"merl": 10, "mappo_uniform": 50, "mappo_fixed": 50,
                                      "es": 12}
    assert all(0 <= near[a] * s - 1000 < s for a, s in sizes.items())
    assert equal_budget(base, 7, 2 * budget, within_round=True) == equal_budget(base, 7,
                                                                               2 * budget)


def test_rover_v0_budget_is_2m_within_one_round():
    """With 2 x 64 ES episodes (a rover_v0_2m probe) the v0 arms' round sizes have a
    common multiple of 832,000 steps: rounded up, 2M would be 2,496,000. The v0 study
    and the confirmation instead give each arm the fewest whole rounds reaching 2M."""
    from experiments import rover_merl

    v = rover_merl.variant("v0", rover_merl.V0_ARMS)
    assert v.within_round
    probe = merge(v.base, {"episodes": 2, "es": {"pop_size": 32 * 2}})
    sizes = round_sizes(probe, v.max_steps, v.arms, v.extra)
    assert sizes == {"merl": 4 * 32 * 50 + 64 * 2 * 50, "es": 64 * 2 * 50,
                     "merl_actor": 4 * 32 * 50 + 64 * 2 * 50 + 2 * 2 * 50,
                     "merl_two_stage": 4 * 32 * 50 + 64 * 2 * 50 + 2 * 2 * 50}
    assert equal_budget(probe, v.max_steps, rover_merl.BUDGET, v.arms, v.extra)[0] \
        == 3 * 832_000
    assert equal_budget(probe, v.max_steps, rover_merl.BUDGET, v.arms, v.extra, True) \
        == (2_000_000, {"merl": 157, "merl_actor": 154, "merl_two_stage": 154, "es": 313})
    budget, rounds = v.rounds(rover_merl.BUDGET)  # the study's own setting
    sizes = round_sizes(v.base, v.max_steps, v.arms, v.extra)
    assert budget == 2_000_000
    assert all(0 <= rounds[a] * sizes[a] - budget < sizes[a] for a in v.arms)


def test_study_budgets_by_hand():
    """Rover's 1M rounds up to 79 MERL rounds of 12,800 steps (MAPPO 4 x 32 x 50 + ES 32
    candidates x 4 episodes x 50); the swarm studies' 40-step rollout makes 256k exact."""
    from experiments import rover, swarm

    budget, rounds = equal_budget(rover.base_config(4), 50, rover.BUDGET)
    assert budget == 79 * (4 * 32 * 50 + 32 * 4 * 50) == 1_011_200
    assert rounds == {"merl": 79, "mappo_uniform": 158, "mappo_fixed": 158, "es": 158}
    for base in (swarm.base_config("feudal_es/Discovery-v0", {"coupling": 2}),
                 swarm.base_config("feudal_es/Dispersion-v0", {})):
        budget, rounds = equal_budget(base, swarm.MAX_STEPS, swarm.BUDGET)
        assert budget == 256_000 == 25 * (4 * 32 * 40 + 32 * 4 * 40)
        assert rounds == {"merl": 25, "mappo_uniform": 50, "mappo_fixed": 50, "es": 50}


def _report(labels: dict[str, dict[str, list[float]]], wall: float) -> dict:
    """A study report with per-seed held-out means per arm (no runs)."""
    return {"study": "rover", "seeds": [0, 1, 2], "eval_episodes": 4, "heldout_seed": 1,
            "metric": "observed_frac", "metric_higher_is_better": True,
            "variants": {lab: {"team_return": {a: summarize(v)
                                               for a, v in arms.items()},
                               "budget_env_steps": 100, "rounds": dict.fromkeys(arms, 5),
                               "references": {},
                               "gifs": {"merl": {"path": f"{lab}.gif", "seed": 0}}}
                         for lab, arms in labels.items()},
            "goals": [], "wall_time_s": wall, "machine": {"cpu": f"cpu{wall}"}}


def test_load_sampler_keeps_every_reading(monkeypatch):
    readings = iter([0.5, 1.5, 4.0] + [2.0] * 1000)
    monkeypatch.setattr(machine.os, "getloadavg", lambda: (next(readings), 0.0, 0.0))
    load = machine.LoadSampler(period=0.01)
    while len(load.samples) < 3:
        time.sleep(0.005)
    got = load.stop()
    s = load.samples
    assert s[:3] == [0.5, 1.5, 4.0] and got["samples"] == len(s)
    assert got["min"] == 0.5 and got["max"] == 4.0
    assert got["mean"] == pytest.approx(sum(s) / len(s), abs=0.005)


def test_smoke_scale_defaults_and_a_failing_study_process(tmp_path):
    """Below SMOKE_SCALE a run trains 2 seeds, 2 studies at a time, unless told otherwise;
    at full scale 10 seeds, one study at a time. A study run in its own process that
    fails stops the run with its log's path."""
    from experiments import all as everything

    assert everything.defaults(0.05, None, None) == ((0, 1), 2)
    assert everything.defaults(1.0, None, None) == (SEEDS, 1)
    assert everything.defaults(0.05, [3, 4, 5], 1) == ((3, 4, 5), 1)
    assert everything.defaults(1.0, None, 3) == (SEEDS, 3)
    with pytest.raises(SystemExit):
        everything.main(["--jobs", "0", "--out", str(tmp_path)])
    with pytest.raises(RuntimeError, match=r"log-nosuch\.txt"):
        everything._subprocess("nosuch", 0.05, (0, 1), tmp_path)
    assert "invalid choice: 'nosuch'" in (tmp_path / "log-nosuch.txt").read_text()


def test_rover_arm_subsets_are_checked_before_any_training(tmp_path):
    """``--arms`` must keep MERL (the goals compare against it) and name Rover's arms;
    a bad set fails before anything is trained or written."""
    from experiments import rover

    for arms in [("es",), ("merl", "mappo")]:
        with pytest.raises(ValueError, match="arms must include 'merl'"):
            rover.run(0.01, (0, 1), tmp_path, run_root=tmp_path / "runs", arms=arms)
    with pytest.raises(SystemExit):
        rover.main(["--arms", "merl", "nosuch", "--out", str(tmp_path)])
    assert list(tmp_path.iterdir()) == []


def test_reports_of_separate_jobs_merge_with_goals_recomputed():
    c4 = _report({"coupling 4": {"merl": [0.6, 0.62, 0.61], "es": [0.1, 0.12, 0.11]}}, 10.0)
    c6 = _report({"coupling 6": {"merl": [0.1, 0.3, 0.2], "es": [0.2, 0.25, 0.22]}}, 5.5)
    from experiments.rover import goals

    merged = merge_reports([c4, c6], goals)
    assert list(merged["variants"]) == ["coupling 4", "coupling 6"]
    assert merged["variants"]["coupling 6"] is c6["variants"]["coupling 6"]
    assert merged["wall_time_s"] == 15.5
    assert [p["wall_time_s"] for p in merged["parts"]] == [10.0, 5.5]
    assert [p["machine"]["cpu"] for p in merged["parts"]] == ["cpu10.0", "cpu5.5"]
    # coupling 4: 0.61 >= 0.55 and disjoint from ES's 0.11; coupling 6: overlapping
    assert [g["met"] for g in merged["goals"]] == [True, False]
    assert merged["goals"] == goals({"variants": merged["variants"]})
    # the summary: one unbroken table (GIFs after it), the jobs' wall times named
    md = markdown(merged, "fraction observed").splitlines()
    rows = [i for i, line in enumerate(md) if line.startswith("| coupling")]
    assert len(rows) == 4 and rows == list(range(rows[0], rows[0] + 4))
    assert all(i > rows[-1] for i, line in enumerate(md) if ".gif)" in line)
    assert "(the sum of separate runs: coupling 4 10 s; coupling 6 6 s)" in md[2]
    iqm = fmt_iqm(c4["variants"]["coupling 4"]["team_return"]["merl"])
    assert "| IQM [95% CI] |" in md[rows[0] - 2] and f"| {iqm} |" in md[rows[0]]
    assert "Performance profiles: ![rover profiles](rover-profiles.png)" in md
    with pytest.raises(ValueError, match="more than one report"):
        merge_reports([c4, c4], goals)
    with pytest.raises(ValueError, match="differ in \\['seeds'\\]"):
        merge_reports([c4, {**c6, "seeds": [0, 1]}], goals)


TINY = dict(
    env="feudal_es/Rover-v0",
    env_kwargs=dict(num_agents=4, num_pois=2, coupling=2, max_steps=6),
    grad_steps_per_outer=1, episodes=1,
    es=dict(pop_size=2, sigma=0.1, lr=0.05),
    mappo=dict(num_envs=2, num_steps=6, epochs=1, minibatches=1),
    actor=dict(vec_hidden=[], vec_out=8, gnn_layers=0, embed_hidden=[], embed_dim=8,
               executor_hidden=[8], selector_period=3),
    critic=dict(hidden=[8]),
)


def test_an_arm_resumes_across_checkpoint_settings_not_across_training_ones():
    """A study's arm run saved with another checkpoint frequency (an older study) is the
    same run; one with another training setting is not."""
    from experiments.training import _same_run
    from feudal_es.config import TrainerConfig

    cfg = TrainerConfig.from_dict(arm_config(TINY, "merl", {}))
    assert _same_run(dataclasses.replace(cfg, checkpoint_every=10**6, keep_checkpoints=3,
                                         plot_every=7, gif=True), cfg)
    assert not _same_run(dataclasses.replace(cfg, n_outer=cfg.n_outer + 1), cfg)
    assert not _same_run(TrainerConfig.from_dict(arm_config(TINY, "merl",
                                                            {"es": {"sigma": 0.2}})), cfg)


@pytest.mark.slow  # four compiled programs (~100 s on 2 cores); the math above is fast
def test_tiny_study_end_to_end(tmp_path):
    from envs.policies import random_policy
    from envs.rover import Rover, team_policy

    def refs(episodes):
        env = Rover(**TINY["env_kwargs"])
        return reference_returns(env, {"team": team_policy, "random": random_policy},
                                 episodes, "observed_frac")

    variant = Variant("v", TINY, 6, arms=("merl", "mappo_fixed"),
                      extra={"mappo_fixed": {"actor": {"fixed_option": 1}}},
                      references=refs)
    report = compare_arms(
        "tiny", [variant], budget=1, seeds=(0, 1), eval_episodes=4, metric="observed_frac",
        metric_label="observed", fitness_label="fitness", out_dir=tmp_path / "out",
        run_root=tmp_path / "runs", goals=lambda r: [merl_beats(r, "v")])
    for ext in ("json", "csv", "png", "md"):
        assert (tmp_path / "out" / f"tiny.{ext}").stat().st_size > 0
    assert (tmp_path / "out" / "tiny-profiles.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((tmp_path / "out" / "tiny.json").read_text())
    v = data["variants"]["v"]
    assert {(r["arm"], r["seed"]) for r in v["runs"]} == {
        (a, s) for a in ("merl", "mappo_fixed") for s in (0, 1)}
    # equal budget: every run spent the same env steps, counted from its rounds
    assert all(r["env_steps"] == v["budget_env_steps"] ==
               r["rounds"] * v["round_env_steps"][r["arm"]] for r in v["runs"])
    assert v["arm_overrides"]["mappo_fixed"]["actor"] == {"options": "fixed",
                                                          "fixed_option": 1}
    # the table's mean is the mean over seeds of each seed's held-out mean
    for arm in ("merl", "mappo_fixed"):
        per_seed = [np.mean(r["heldout_team_return"]) for r in v["runs"] if r["arm"] == arm]
        assert v["team_return"][arm]["mean"] == pytest.approx(np.mean(per_seed))
    assert all(len(r["heldout_team_return"]) == 4 for r in v["runs"])
    # Rover's team return is its observed fraction at the last step, for arms and references
    for r in v["runs"]:
        np.testing.assert_allclose(r["heldout_team_return"], r["heldout_observed_frac"],
                                   atol=1e-6)
    team = v["references_per_episode"]["team"]
    np.testing.assert_allclose(team["team_return"], team["observed_frac"], atol=1e-6)
    # the goal's verdict is the disjoint-CI comparison, recomputed from the per-seed means
    merl = summarize([np.mean(r["heldout_team_return"]) for r in v["runs"]
                      if r["arm"] == "merl"])
    fixed = summarize([np.mean(r["heldout_team_return"]) for r in v["runs"]
                       if r["arm"] == "mappo_fixed"])
    assert report["goals"][0]["met"] == above(merl, fixed)
    assert report["goals"][0]["disjoint_wins"] == {"mappo_fixed": above(merl, fixed)}
    assert "| v | " in (tmp_path / "out" / "tiny.md").read_text()

    # the many-seed program's held-out returns equal a one-seed trainer's on the same
    # held-out key (ESTrainer.rollout_stats) (float tolerance: another program)
    cfg = arm_config(TINY, "mappo_fixed", {"actor": {"fixed_option": 1}})
    one, _ = train_arm(cfg, (1,), v["rounds"]["mappo_fixed"], 6, 4, tmp_path / "one",
                       "observed_frac")
    seed1 = next(r for r in v["runs"] if r["arm"] == "mappo_fixed" and r["seed"] == 1)
    np.testing.assert_allclose(seed1["heldout_team_return"], one[0]["heldout_team_return"],
                               atol=1e-5)
    assert seed1["curve"]["env_steps"] == one[0]["curve"]["env_steps"]
    # an arm stopped part-way resumes from its newest checkpoint: trained 1 round, then
    # resumed to the full count, it equals the uninterrupted arm (one machine: bit-equal)
    assert v["rounds"]["mappo_fixed"] > 1
    train_arm(cfg, (1,), 1, 6, 4, tmp_path / "part", "observed_frac")
    logs = []
    whole, _ = train_arm(cfg, (1,), v["rounds"]["mappo_fixed"], 6, 4, tmp_path / "part",
                         "observed_frac", resume=True, log=logs.append)
    assert any("resuming at round 1" in m for m in logs), logs
    for k in ("heldout_team_return", "heldout_observed_frac", "curve"):
        assert whole[0][k] == one[0][k], k
    assert whole[0]["train_time_s"] > 0

    # --resume: a finished study is evaluated again, not retrained: the same rows (one
    # program, one machine: bit-equal), its checkpoints untouched, its training time kept
    ckpts = sorted((tmp_path / "runs").rglob("ckpt_*.safetensors"))
    stamps = [p.stat().st_mtime_ns for p in ckpts]
    again = compare_arms(
        "tiny", [variant], budget=1, seeds=(0, 1), eval_episodes=4, metric="observed_frac",
        metric_label="observed", fitness_label="fitness", out_dir=tmp_path / "out2",
        run_root=tmp_path / "runs", goals=lambda r: [merl_beats(r, "v")], resume=True)
    rows = again["variants"]["v"]["runs"]
    assert all(r.pop("resumed") for r in rows) and again["resumed"]
    for old, new in zip(v["runs"], rows, strict=True):
        for k in ("arm", "seed", "curve", "heldout_team_return", "heldout_observed_frac",
                  "train_time_s", "env_steps"):
            assert new[k] == old[k], k
    assert sorted((tmp_path / "runs").rglob("ckpt_*.safetensors")) == ckpts
    assert [p.stat().st_mtime_ns for p in ckpts] == stamps
    # a run directory of another config is not resumed: trained afresh, said so
    logs: list[str] = []
    other = arm_config(TINY, "merl", {"es": {"sigma": 0.2}})
    fresh, _ = train_arm(other, (0, 1), v["rounds"]["merl"], 6, 4,
                         tmp_path / "runs" / "tiny" / "v" / "merl", "observed_frac",
                         resume=True, log=logs.append)
    assert "resumed" not in fresh[0] and any("another config" in m for m in logs)


def test_a_study_stopped_part_way_keeps_its_finished_arms_without_run_directories(
        tmp_path, monkeypatch):
    """A study killed in its second arm, resumed on a machine without its run directories
    (a new checkout): the first arm comes from its journal beside the results, row for
    row, and is not trained again; the complete report removes the journals. A journal of
    another setting, or a job without --resume, trains the arm again."""
    from experiments import training

    calls: list[str] = []
    stop_at = {"arm": "mappo_fixed"}

    def fake_train_arm(config, seeds, rounds, max_steps, eval_episodes, run_dir, metric=None,
                       arm="", resume=False, log=print):
        calls.append(arm)
        if arm == stop_at["arm"]:
            raise KeyboardInterrupt  # the job is killed here
        lr = TrainerConfig.from_dict(config).es.lr
        return [{"arm": arm, "seed": s, "rounds": rounds, "env_steps": 1, "train_time_s": 1.0,
                 "curve": {"env_steps": [1], "fitness": [lr]},
                 "heldout_team_return": [lr + 0.1 * s + 0.01 * i for i in range(4)],
                 "heldout_observed_frac": [0.25 * i for i in range(4)]} for s in seeds], None

    monkeypatch.setattr(training, "train_arm", fake_train_arm)
    variant = Variant("v", TINY, 6, arms=("merl", "mappo_fixed"),
                      extra={"mappo_fixed": {"actor": {"fixed_option": 1}}})

    def study(v=variant, resume=True):
        return compare_arms("tiny", [v], budget=1, seeds=(0, 1), eval_episodes=4,
                            metric="observed_frac", metric_label="m", fitness_label="f",
                            out_dir=tmp_path / "out", run_root=tmp_path / "runs",
                            goals=lambda r: [], resume=resume)

    with pytest.raises(KeyboardInterrupt):
        study()
    journal = training.arm_journal(tmp_path / "out", "tiny", "v", "merl")
    first = json.loads(journal.read_text())["rows"]
    assert calls == ["merl", "mappo_fixed"] and len(first) == 2
    assert not (tmp_path / "runs").exists()  # nothing but the journal carries it over
    stop_at["arm"] = None
    calls.clear()
    report = study()
    assert calls == ["mappo_fixed"]  # merl was not trained again
    rows = [r for r in report["variants"]["v"]["runs"] if r["arm"] == "merl"]
    assert all(r.pop("journaled") for r in rows) and rows == first
    assert report["variants"]["v"]["team_return"]["merl"]["mean"] == pytest.approx(
        np.mean([np.mean(r["heldout_team_return"]) for r in first]))
    assert not (tmp_path / "out" / "tiny-arms").exists()  # the report holds them now
    # another setting of the arm, or no --resume: trained again
    stop_at["arm"] = "mappo_fixed"
    with pytest.raises(KeyboardInterrupt):
        study()
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        study(dataclasses.replace(variant, extra={**variant.extra,
                                                  "merl": {"es": {"lr": 0.5}}}))
    assert calls == ["merl", "mappo_fixed"]
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        study(resume=False)
    assert calls == ["merl", "mappo_fixed"]
    journal.write_text("{not json")  # a damaged journal is not trusted: trained again
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        study()
    assert calls == ["merl", "mappo_fixed"]


def test_sweep_trains_every_arm_of_every_probe_alike_and_ranks_by_the_arms_mean(
        tmp_path, monkeypatch):
    """The sweep's contract, with training replaced by a recorder: each probe is the base
    config with only its overrides, every arm of a probe gets that config (plus the arm's
    own overrides) and the same env-step budget, evaluation uses the validation episodes
    and the sweep's seeds, and the score is the hand-computed mean over arms."""
    from experiments import sweep

    a, b = names = ["selector period 10", "selector period 10, MAPPO lr 1e-3"]
    calls, value = [], {a: 0.2, b: 0.4}

    def fake_train_arm(config, seeds, rounds, max_steps, eval_episodes, run_dir, metric=None,
                       arm="", eval_root=HELDOUT_SEED):
        calls.append(dict(config=config, seeds=tuple(seeds), rounds=rounds, arm=arm,
                          eval_root=eval_root, probe=run_dir.parent.name))
        cfg = TrainerConfig.from_dict(config)
        base = value[b if cfg.mappo.lr == 1e-3 else a]
        bump = {"merl": 0.1, "mappo_uniform": 0.0, "mappo_fixed": -0.1, "es": 0.2}[arm]
        return [{"heldout_team_return": [base + bump + 0.01 * i]} for i in range(len(seeds))
                ], None

    monkeypatch.setattr(sweep, "train_arm", fake_train_arm)
    report = sweep.run("rover", seeds=(100, 101), budget=50_000, eval_episodes=4,
                       out_dir=tmp_path, run_root=tmp_path / "runs", probes=names)
    base = sweep.STUDIES["rover"].base(tmp_path)
    assert [p["probe"] for p in report["probes"]] == names and len(calls) == 8
    for c in calls:
        assert c["seeds"] == (100, 101) and c["eval_root"] == sweep.VALIDATION_SEED
        over = dict(sweep.STUDIES["rover"].probes)[b if c["probe"] == slug(b) else a]
        want = arm_config(merge(base, over), c["arm"],
                          sweep.STUDIES["rover"].extra.get(c["arm"]))
        assert c["config"] == want
        size = steps_per_round(TrainerConfig.from_dict(c["config"]), 50)
        assert c["rounds"] * size == report["probes"][0]["env_steps"] >= 50_000
    for p in report["probes"]:  # mean over arms of (mean over seeds): by hand
        v = value[p["probe"]]
        assert p["score"] == pytest.approx(np.mean([v + 0.105, v + 0.005, v - 0.095,
                                                    v + 0.205]))
    assert report["best"] == b
    md = (tmp_path / "sweep-rover.md").read_text()
    assert f"| {b} | 0.505 ± 0.064 |" in md
    assert json.loads((tmp_path / "sweep-rover.json").read_text())["best"] == b
    assert "Machines:" not in md  # one job, one machine
    # a later job of one probe (on another machine) joins the report run alike, and the
    # ranking spans both; each row says where it ran
    value[a] = 0.6
    first_cpu = report["machine"]["cpu"]
    monkeypatch.setattr(sweep, "machine_note", lambda: {**report["machine"], "cpu": "Other"})
    later = sweep.run("rover", seeds=(100, 101), budget=50_000, eval_episodes=4,
                      out_dir=tmp_path, run_root=tmp_path / "runs", probes=[a])
    assert [p["probe"] for p in later["probes"]] == [b, a] and later["best"] == a
    assert later["probes"][0] == report["probes"][1] and later["earlier_probes"] == [b]
    assert [p["cpu"] for p in later["probes"]] == [first_cpu, "Other"]
    assert later["wall_time_s"] >= report["wall_time_s"]
    md = (tmp_path / "sweep-rover.md").read_text()
    assert "(two jobs; the earlier ran " + b in md
    assert f"Machines: {b}: {first_cpu}; {a}: Other." in md
    # ... but not a report of other seeds: it is replaced
    other = sweep.run("rover", seeds=(102, 103), budget=50_000, eval_episodes=4,
                      out_dir=tmp_path, run_root=tmp_path / "runs", probes=[a])
    assert [p["probe"] for p in other["probes"]] == [a] and "earlier_probes" not in other
    with pytest.raises(ValueError, match="no probe"):
        sweep.run("rover", probes=["nope"], out_dir=tmp_path)


@pytest.mark.parametrize("study", ["rover", "discovery", "dispersion", "coverage",
                                   "rover_merl", "rover_v0", "rover_v0_2m"])
def test_every_sweep_probe_is_a_valid_config_that_changes_only_what_it_names(
        study, tmp_path, monkeypatch):
    """Each listed probe, for every arm of its study, is a TrainerConfig that differs from
    the study's shared base only in the fields the probe (and the arm) names; the
    budget holds whole rounds of every arm."""
    from experiments import coverage, sweep

    monkeypatch.setattr(coverage, "pretrain", lambda scale, store: store / "bc")  # no BC run
    spec = sweep.STUDIES[study]
    base = spec.base(tmp_path)
    names = [n for n, _ in spec.probes]
    assert len(set(names)) == len(names) >= 3
    flat = lambda d, pre="": {k2: v2 for k, v in d.items() for k2, v2 in (
        flat(v, f"{pre}{k}.").items() if isinstance(v, dict) else [(f"{pre}{k}", v)])}
    for name, over in spec.probes:
        probe = merge(base, over)
        changed = {k for k, v in flat(probe).items() if flat(base).get(k) != v}
        assert changed <= set(flat(over)), (name, changed)
        for arm in spec.arms:
            cfg = TrainerConfig.from_dict(arm_config(probe, arm, spec.extra.get(arm)))
            assert cfg.env == base["env"]
        spent, rounds = equal_budget(probe, spec.max_steps, spec.budget, spec.arms,
                                     spec.extra, spec.within_round)
        sizes = round_sizes(probe, spec.max_steps, spec.arms, spec.extra)
        if spec.within_round:  # each arm within one round past the budget
            assert all(0 <= rounds[a] * sizes[a] - spent < sizes[a] for a in spec.arms)
        else:
            assert all(rounds[a] * sizes[a] == spent >= spec.budget for a in spec.arms)


def test_mpe_peer_falls_back_to_the_anchor_readme_with_a_warning(monkeypatch, capsys):
    import bench.vs_jaxmarl
    from experiments import mpe

    monkeypatch.setattr(bench.vs_jaxmarl, "anchor", lambda algo, steps: None)
    got = mpe.peer(1000)
    assert got == {"source": "anchor README (not runnable here)",
                   "final_return": mpe.README_ANCHOR}
    assert "not measured" in capsys.readouterr().err
    monkeypatch.setattr(bench.vs_jaxmarl, "anchor", lambda algo, steps: {"error": "rc 1"})
    assert mpe.peer(1000)["error"] == "rc 1" and "rc 1" in capsys.readouterr().err
    measured = {"final_return": -50.0, "sps": 1.0}
    monkeypatch.setattr(bench.vs_jaxmarl, "anchor", lambda algo, steps: measured)
    assert mpe.peer(1000) == {"source": "measured in this job", **measured}
    assert capsys.readouterr().err == ""


def test_rover_merl_budget_and_migration_steps_by_hand():
    """RoverMERL's arms at 2M: MERL 4 x 32 x 50 MAPPO + 32 x 4 x 50 ES = 12,800 steps a
    round; merl-actor adds its elitist comparison (mean and learner, 4 episodes x 50 each)
    = 13,200; MAPPO and ES alone 6,400. The common multiple is 422,400; 2M rounds up to 5
    of them."""
    from experiments import rover_merl

    base = rover_merl.base_config(8, 4)
    sizes = round_sizes(base, 50, rover_merl.ARMS, rover_merl.extra())
    assert sizes == {"merl": 12_800, "merl_actor": 13_200, "merl_two_stage": 13_200,
                     "mappo_uniform": 6_400, "mappo_mixed": 6_400, "mappo_team": 6_400,
                     "es": 6_400}
    budget, rounds = equal_budget(base, 50, rover_merl.BUDGET, rover_merl.ARMS,
                                  rover_merl.extra())
    assert budget == 5 * math.lcm(12_800, 13_200, 6_400) == 2_112_000
    assert rounds["merl_actor"] == 160 and rounds["es"] == 330
    two = TrainerConfig.from_dict(arm_config(base, "merl_two_stage",
                                             rover_merl.extra()["merl_two_stage"]))
    assert two.mode == "merl-actor" and two.selector_stage_rounds == rover_merl.STAGE_ROUNDS
    mixed = TrainerConfig.from_dict(arm_config(base, "mappo_mixed"))
    assert (mixed.mappo.reward, mixed.actor.options, mixed.mode) == ("mixed", "fixed", "mappo")


def test_rover_merl_goals_on_a_synthetic_report(monkeypatch):
    from experiments import rover_merl

    monkeypatch.setattr(rover_merl, "METHOD", "merl_actor")

    def runs(arm, level):  # a flat training curve at ``level``
        return {"arm": arm, "curve": {"env_steps": [100_000, 2_000_000],
                                      "fitness": [level, level]}}

    arms = {"merl": [0.50, 0.52, 0.51], "merl_actor": [0.70, 0.72, 0.71],
            "merl_two_stage": [0.6, 0.6, 0.6], "mappo_uniform": [0.2, 0.25, 0.22],
            "mappo_mixed": [0.1, 0.1, 0.12], "mappo_team": [0.0, 0.0, 0.01],
            "es": [0.0, 0.05, 0.0]}
    report = _report({"8 rovers / coupling 4": arms, "12 rovers / coupling 6": arms}, 1.0)
    for v in report["variants"].values():
        v["runs"] = [runs(a, np.mean(x)) for a, x in arms.items()]
    got = rover_merl.goals(report)
    assert [g["met"] for g in got] == [True, True, True, True]
    assert "merl_actor" in got[1]["goal"]  # the sweep's method, ...
    monkeypatch.setattr(rover_merl, "METHOD", "merl")  # ... not the best held-out mean
    got = rover_merl.goals(report)
    assert "(merl," in got[1]["goal"] and [g["met"] for g in got] == [True, False, True,
                                                                      True]
    monkeypatch.setattr(rover_merl, "METHOD", "merl_actor")
    arms["mappo_uniform"] = [0.69, 0.75, 0.73]  # overlapping intervals: not disjoint
    report = _report({"8 rovers / coupling 4": arms}, 1.0)
    report["variants"]["8 rovers / coupling 4"]["runs"] = [runs(a, 0.3) for a in arms]
    got = rover_merl.goals(report)
    assert [g["met"] for g in got] == [True, False, False]  # curve never reaches 0.5


def test_rover_merl_v0_goals_need_es_only_s_level_and_merl_s_speed(monkeypatch):
    from experiments import rover_merl

    monkeypatch.setattr(rover_merl, "METHOD_V0", "merl_actor")
    monkeypatch.setattr(rover_merl, "METHOD", "merl")  # RoverMERL's method: not v0's
    arms = {"merl": [0.55, 0.56, 0.54], "merl_actor": [0.70, 0.71, 0.69],
            "es": [0.66, 0.68, 0.67]}
    report = _report({rover_merl.V0_LABEL: arms}, 1.0)
    v = report["variants"][rover_merl.V0_LABEL]
    v["runs"] = [{"arm": a, "curve": {"env_steps": [100_000, 400_000, 2_000_000],
                                      "fitness": [0.2, 0.6, np.mean(x)]}}
                 for a, x in arms.items()]
    got = rover_merl.goals(report)
    # 0.70 >= 0.670 and disjoint above merl; the mean curve reaches 0.5 at ~325k > 300k
    assert [g["met"] for g in got] == [True, False]
    arms["merl_actor"] = [0.60, 0.80, 0.70]  # wide: its interval overlaps merl's
    report = _report({rover_merl.V0_LABEL: arms}, 1.0)
    report["variants"][rover_merl.V0_LABEL]["runs"] = v["runs"]
    assert not rover_merl.goals(report)[0]["met"]
    assert rover_merl.variant("v0", rover_merl.ARMS).arms == (
        "merl", "merl_actor", "merl_two_stage", "es")


def test_rover_v0_settings_and_method_are_the_ones_its_sweep_chose():
    """configs/rover_v0.json is configs/rover.json with the best probe of the landed
    full-budget sweep (rover_v0_2m) and nothing else, and the v0 method is that sweep's;
    that sweep starts from the rover_v0 sweep's best probe; both sweeps' arms are the v0
    variant's, on seeds >= 100, and the full-budget one runs at the 2,112,000 env steps
    of the earlier v0 studies, each arm within one round of it."""
    from experiments import rover, rover_merl, sweep

    for name in ("rover_v0", "rover_v0_2m"):
        spec = sweep.STUDIES[name]
        assert min(spec.seeds) >= 100 and spec.arms == rover_merl.V0_ARMS
    full = sweep.STUDIES["rover_v0_2m"]
    assert full.budget == 2_112_000 and full.within_round and full.feudal == rover_merl.FEUDAL
    landed = {n: json.loads((RESULTS / f"sweep-{n}.json").read_text())
              for n in ("rover_v0", "rover_v0_2m")}
    best = {n: next(p["overrides"] for p in r["probes"] if p["probe"] == r["best"])
            for n, r in landed.items()}
    assert full.probes[0][1] == best["rover_v0"]
    assert landed["rover_v0_2m"]["env_steps_per_run"] == full.budget
    assert landed["rover_v0_2m"]["method"] == rover_merl.METHOD_V0
    assert rover_merl.v0_config() == merge(rover.base_config(4), best["rover_v0_2m"])


def test_rover_v0_confirmation_plays_what_no_study_or_sweep_has_seen():
    """The confirmation's seeds and held-out key are disjoint from the studies' seeds and
    key and from every sweep's seeds and validation key; its method is the study's, a
    feudal variant other than merl (the arm it must beat)."""
    from experiments import rover_merl, sweep
    from experiments import rover_v0_confirm as confirm
    from experiments.training import HELDOUT_SEED, SEEDS, VALIDATION_SEED

    assert not set(confirm.SEEDS) & set(SEEDS)
    assert max(confirm.SEEDS) < min(min(s.seeds) for s in sweep.STUDIES.values())
    assert confirm.HELDOUT_KEY not in (HELDOUT_SEED, VALIDATION_SEED)
    assert confirm.METHOD == rover_merl.METHOD_V0 != "merl"
    assert len(confirm.SEEDS) == len(SEEDS) == 10
    # the landed confirmation ran what the study runs now: config, method, rounds
    landed = json.loads((RESULTS / "rover_v0_confirm.json").read_text())
    v = rover_merl.variant(rover_merl.V0, rover_merl.V0_ARMS)
    spent, rounds = v.rounds(rover_merl.BUDGET)
    assert landed["config"] == json.loads(json.dumps(v.base))
    assert landed["method"] == confirm.METHOD and landed["env_steps_per_run"] == spent
    assert {a: s["rounds"] for a, s in landed["arms"].items()} == rounds


def test_rover_merl_method_is_the_one_its_sweep_chose():
    from experiments import rover_merl, sweep

    spec = sweep.STUDIES["rover_merl"]
    assert min(spec.seeds) >= 100 and spec.feudal == rover_merl.FEUDAL
    assert rover_merl.METHOD in rover_merl.FEUDAL
    recorded = RESULTS / "sweep-rover_merl.json"
    if recorded.exists():  # the landed sweep named the method and the setting reported
        landed = json.loads(recorded.read_text())
        assert landed["method"] == rover_merl.METHOD
        best = next(p["overrides"] for p in landed["probes"] if p["probe"] == landed["best"])
        base = rover_merl.base_config(8, 4)
        assert merge(base, best) == base, "configs/rover_merl.json is not the sweep's best"
    with pytest.raises(ValueError, match="start at 100"):
        sweep.run("rover_merl", seeds=(0, 1))


def test_strategy_comparison_changes_only_the_kind_and_ranks_by_iqm(tmp_path, monkeypatch):
    """Every strategy is Rover's MERL arm with ``es.kind`` alone changed, trained on the
    same seeds (>= 100) and rounds and scored on the validation episodes; the ranking is
    by IQM, best first."""
    from experiments import rover, strategies

    calls = []
    level = {"nes": 0.5, "cem": 0.3, "CMA-ES": 0.6, "SNES": 0.2, "PGPE": 0.4, "GA": 0.1}

    def fake_train_arm(config, seeds, rounds, max_steps, eval_episodes, run_dir, metric=None,
                       arm="", eval_root=HELDOUT_SEED, resume=False):
        calls.append(dict(config=config, seeds=tuple(seeds), rounds=rounds,
                          eval_root=eval_root, arm=arm))
        return [{"heldout_team_return": [level[arm] + 0.01 * i], "curve": {}}
                for i in range(len(seeds))], None

    def fake_summarize(per_seed):  # rliable's IQM is tested in test_aggregate
        m = float(np.mean(per_seed))
        return {"per_seed": list(per_seed), "mean": m, "ci95": 0.01, "n": len(per_seed),
                "iqm": [m, m - 0.02, m + 0.02]}

    monkeypatch.setattr(strategies, "train_arm", fake_train_arm)
    monkeypatch.setattr(strategies, "summarize", fake_summarize)
    report = strategies.run(out_dir=tmp_path, run_root=tmp_path / "runs")
    merl = arm_config(rover.base_config(4), "merl")
    assert [c["arm"] for c in calls] == list(strategies.STRATEGIES)
    for c in calls:
        assert c["seeds"] == strategies.SEEDS and c["eval_root"] == sweep_validation_seed()
        assert c["rounds"] == calls[0]["rounds"]
        assert c["config"] == merge(merl, {"es": {"kind": strategies.STRATEGIES[c["arm"]][
            "kind"]}})
    assert report["ranking_by_iqm"] == ["CMA-ES", "nes", "PGPE", "cem", "SNES", "GA"]
    assert report["apart_from_the_best"] == {"nes": True, "PGPE": True, "cem": True,
                                             "SNES": True, "GA": True}
    assert "| CMA-ES | `evosax:CMA_ES` |" in (tmp_path / "strategies.md").read_text()
    # a later job of two strategies joins the earlier rows run alike, and says so
    calls.clear()
    level["SNES"] = 0.9
    report = strategies.run(out_dir=tmp_path, run_root=tmp_path / "runs",
                            names=("SNES", "GA"))
    assert [c["arm"] for c in calls] == ["SNES", "GA"]
    assert report["ranking_by_iqm"] == ["SNES", "CMA-ES", "nes", "PGPE", "cem", "GA"]
    assert report["earlier"] == sorted(["CMA-ES", "nes", "PGPE", "cem"])
    assert "from an earlier job" in (tmp_path / "strategies.md").read_text()
    # ... but not rows of another setting (here: other seeds)
    report = strategies.run(seeds=(100, 101), out_dir=tmp_path,
                            run_root=tmp_path / "runs", names=("GA",))
    assert list(report["strategies"]) == ["GA"] and "earlier" not in report
    with pytest.raises(ValueError, match="start at 100"):
        strategies.run(seeds=(0, 1), out_dir=tmp_path)


def sweep_validation_seed() -> int:
    from experiments.training import VALIDATION_SEED

    return VALIDATION_SEED


def test_an_earlier_job_s_variant_is_kept_only_when_run_alike(tmp_path):
    """``kept_variants``: 8x4 from an earlier rover_merl.json stays in a 12x6 job's report
    when that job would train it exactly so (config, arms, budget, rounds, seeds); a changed
    config, other seeds or another budget drop it."""
    from experiments import rover_merl
    from experiments.training import kept_variants

    v84 = rover_merl.variant("8x4", rover_merl.ARMS)
    budget = rover_merl.BUDGET
    spent, rounds = equal_budget(v84.base, v84.max_steps, budget, v84.arms, v84.extra)
    alike = {"study": "rover_merl", "seeds": [0, 1], "eval_episodes": 64,
             "heldout_seed": 1, "metric": "observed_frac"}
    variant = {"config": v84.base, "budget_env_steps": spent, "rounds": rounds,
               "arm_overrides": {a: merge(ARMS[a], v84.extra.get(a, {})) for a in v84.arms},
               "team_return": {"merl": {"mean": 0.6}}}
    path = tmp_path / "rover_merl.json"

    def kept(report, **over):
        path.write_text(json.dumps(report))
        return kept_variants(path, {**alike, **over}, [v84], budget)

    earlier = {**alike, "wall_time_s": 5.0, "machine": {"cpu": "x"},
               "variants": {v84.label: variant}}
    got = kept(earlier)
    assert list(got) == [v84.label]
    assert got[v84.label]["team_return"] == variant["team_return"]
    assert got[v84.label]["earlier_job"] == {"wall_time_s": 5.0, "machine": {"cpu": "x"}}
    assert kept(earlier, seeds=[0, 1, 2]) == {}  # the earlier job ran other seeds
    other = {**variant, "config": {**v84.base, "n_outer": 1}}
    assert kept({**earlier, "variants": {v84.label: other}}) == {}
    assert kept_variants(path, alike, [v84], budget // 2) == {}  # another budget
    assert kept_variants(tmp_path / "none.json", alike, [v84], budget) == {}


def test_coverage_goals_judge_the_sweeps_fine_tuning_arm_against_the_imitator_and_lloyd(
        monkeypatch):
    """J(T)/J(0) is lower-is-better: the chosen arm must not be worse than the imitator
    alone with disjoint intervals, and must be better than decentralized Lloyd with
    disjoint intervals; the goals name the sweep's arm, not the best reported one."""
    from experiments import coverage

    monkeypatch.setattr(coverage, "METHOD", "es_selector")
    ref = lambda vals: {"coverage_cost": {**summarize(vals), "over": "episodes"}}

    def report(arms, lloyd, bc):
        return {"variants": {"4 robots": {
            "coverage_cost": {a: summarize(v) for a, v in arms.items()},
            "references": {"decentralized Lloyd": ref(lloyd), coverage.BC_START: ref(bc)}}}}

    arms = {"merl": [0.50, 0.52, 0.51], "es_selector": [0.30, 0.31, 0.32],
            "mappo_fixed": [0.2, 0.2, 0.21]}
    lloyd, bc = [0.5, 0.55, 0.6, 0.52], [0.30, 0.32, 0.31, 0.33]
    got = coverage.goals(report(arms, lloyd, bc))
    assert [g["met"] for g in got] == [False, True, True]
    assert "es_selector" in got[1]["goal"] and "es_selector" in got[2]["numbers"]
    # worse than the imitator with disjoint intervals: the second goal fails
    arms["es_selector"] = [0.40, 0.41, 0.42]
    assert [g["met"] for g in coverage.goals(report(arms, lloyd, bc))] == [False, False, True]
    # overlapping Lloyd: the third fails; MERL clearly below Lloyd: the first holds
    arms.update(es_selector=[0.30, 0.5, 0.7], merl=[0.1, 0.11, 0.12])
    assert [g["met"] for g in coverage.goals(report(arms, lloyd, bc))] == [True, True, False]


def test_coverage_method_is_the_best_arm_at_the_best_probe_of_the_landed_sweep():
    from experiments import coverage, sweep

    assert sweep.STUDIES["coverage"].feudal == coverage.ARMS
    landed = json.loads((RESULTS / "sweep-coverage.json").read_text())
    best = next(p for p in landed["probes"] if p["probe"] == landed["best"])
    assert coverage.METHOD == landed.get(
        "method", max(best["arms"], key=lambda a: best["arms"][a]["mean"]))
    assert min(landed["seeds"]) >= 100


def test_coverage_imitator_is_trained_once_per_inputs(tmp_path, monkeypatch):
    """The study, its sweep and the zoo share one imitator: a second call with the same
    inputs trains nothing, nor does a fine-tuning setting (a sweep's probe); another actor,
    recipe or scale's arguments trains another."""
    from experiments import coverage
    from feudal_es import cli

    calls = []

    def fake_main(argv):
        calls.append(argv)
        out = Path(argv[argv.index("--out") + 1])
        out.write_bytes(b"actor")

    monkeypatch.setattr(cli, "main", fake_main)
    first = coverage.pretrain(1.0, tmp_path)
    assert coverage.pretrain(1.0, tmp_path) == first and len(calls) == 1
    assert json.loads(first.with_suffix(".config.json").read_text()) == coverage.base_config()
    base = coverage.base_config()
    tuned = {**base, "mappo": {"lr": 1e-5}, "actor": {**base["actor"], "selector_period": 3}}
    monkeypatch.setattr(coverage, "base_config", lambda: tuned)  # a sweep probe's setting
    assert coverage.pretrain(1.0, tmp_path) == first and len(calls) == 1
    actor = {**tuned, "actor": {**tuned["actor"], "embed_dim": 7}}
    monkeypatch.setattr(coverage, "base_config", lambda: actor)
    assert coverage.pretrain(1.0, tmp_path) != first and len(calls) == 2
    monkeypatch.undo()
    monkeypatch.setattr(cli, "main", fake_main)
    smoke = coverage.pretrain(0.05, tmp_path)
    assert smoke != first and len(calls) == 3 and "--rounds" in calls[2]
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({**json.loads(coverage.RECIPE.read_text()), "rounds": 2}))
    monkeypatch.setattr(coverage, "RECIPE", recipe)
    assert coverage.pretrain(1.0, tmp_path) not in (first, smoke) and len(calls) == 4
    assert calls[3][calls[3].index("--recipe") + 1] == str(recipe)
