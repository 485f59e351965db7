"""experiments.coverage_lpac (issue 32): the recipe in ``configs/`` (and the observation
of ``configs/coverage_lpac.json``) is the one its sweep chose, the transfer sizes keep
the density, and a smoke scale shrinks only the work."""

from __future__ import annotations

import json
import math

import pytest

from experiments import coverage_lpac as lpac
from experiments.report import RESULTS
from feudal_es.pretrain import PretrainConfig


def test_the_configs_recipe_is_the_sweeps_choice():
    sweep = RESULTS / "sweep-coverage_lpac.json"
    if not sweep.is_file():
        pytest.skip("the sweep has not been run in this checkout")
    report = json.loads(sweep.read_text())
    chosen = report["probes"][report["chosen"]]["recipe"]
    recipe = json.loads(lpac.RECIPE.read_text())
    fields, observe, actor = lpac.split_recipe(chosen)
    assert {k: v for k, v in recipe.items() if k not in ("expert", "option")} == fields
    # configs/coverage_lpac.json: configs/coverage.json with the probe's observation and
    # actor fields, which the Coverage study's arms share
    assert lpac.OBSERVE == observe and lpac.ACTOR == actor
    from experiments import coverage

    shared = coverage.base_config()
    assert shared["env_kwargs"] == {**coverage.ENV_KWARGS, **observe}
    assert shared["actor"] == {**coverage.CONFIG["actor"], **actor}
    assert chosen == lpac.PROBES[report["chosen"]]  # and the probe as the code lists it
    assert set(report["probes"]) == set(lpac.PROBES)  # every probe listed was run
    assert min(report["seeds"]) >= 100  # never the reported seeds
    PretrainConfig.load(lpac.RECIPE)  # a valid recipe file


@pytest.mark.parametrize("factor", lpac.FACTORS)
def test_transfer_sizes_keep_robots_and_features_per_area_and_the_cell_size(factor):
    base, env = lpac.scaled_env(1), lpac.scaled_env(factor)
    area = lambda kw: kw["world_size"] ** 2
    assert env["num_agents"] / area(env) == pytest.approx(base["num_agents"] / area(base))
    assert env["num_features"] / area(env) == pytest.approx(base["num_features"] / area(base))
    cell = lambda kw: kw["world_size"] / kw["grid_size"]
    assert cell(env) == pytest.approx(cell(base), rel=0.03)  # to the grid's rounding
    for same in ("map_size", "max_steps", "max_speed"):
        assert env[same] == base[same]
    assert math.isclose(env["world_size"], math.sqrt(factor))


def test_a_smoke_scale_shrinks_episodes_and_steps_not_rounds():
    recipe = json.loads(lpac.RECIPE.read_text())
    small = lpac.scaled_recipe(recipe, 0.05)
    assert small["rounds"] == recipe["rounds"] and small["patience"] == recipe["patience"]
    assert small["episodes"] == max(1, round(recipe["episodes"] * 0.05))
    assert small["steps_per_round"] == round(recipe["steps_per_round"] * 0.05)
    assert lpac.scaled_recipe(recipe, 1.0) == recipe


def test_a_stopped_study_keeps_the_seeds_it_finished(tmp_path, monkeypatch):
    """Killed at its third seed and run again with resume: seeds 0 and 1 come from their
    journals (not imitated again), the report holds every seed's costs as computed (mean
    and per episode), and the journals go once it is written; without resume every seed
    runs."""
    trained: list[int] = []
    stop_at = {"seed": 2}
    found: list[bool] = []  # whether each imitation found its rounds file

    def fake_imitate(recipe, seed, factor=1, rounds_file=None):
        trained.append(seed)
        assert rounds_file == tmp_path / "rounds" / f"coverage_lpac-seed_{seed}.safetensors"
        found.append(rounds_file.exists())
        rounds_file.parent.mkdir(exist_ok=True)
        rounds_file.write_text("rounds")  # as imitate writes after its first round
        if seed == stop_at["seed"]:
            raise KeyboardInterrupt
        return seed, {"steps": 1, "val_loss": 0.1, "wall_s": 0.0}

    def fake_costs(actor, env_kwargs, keys):
        return [0.3 + 0.01 * actor + 0.001 * env_kwargs["num_agents"]] * 2

    monkeypatch.setattr(lpac, "imitate_seed", fake_imitate)
    monkeypatch.setattr(lpac, "coverage_costs", fake_costs)
    monkeypatch.setattr(lpac, "references", lambda kw, episodes, root: {
        "decentralized Lloyd": [0.5, 0.6], "clairvoyant Lloyd": [0.1, 0.12]})
    monkeypatch.setattr(lpac, "ROUNDS", tmp_path / "rounds")
    study = lambda resume=True: lpac.run_trained(1, 1.0, (0, 1, 2), tmp_path, 2, resume)
    with pytest.raises(KeyboardInterrupt):
        study()
    assert trained == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "coverage_lpac-seeds").iterdir()) == [
        "seed_0.json", "seed_1.json"]
    # a journaled seed's rounds are removed; the stopped seed's wait for the next job
    assert [p.name for p in (tmp_path / "rounds").iterdir()] == [
        "coverage_lpac-seed_2.safetensors"]
    trained.clear()
    stop_at["seed"] = None
    found.clear()
    report = study()
    assert trained == [2] and found == [True]  # seed 2 goes on from its rounds
    assert not any((tmp_path / "rounds").iterdir())
    assert report["sizes"]["4 robots"]["imitator"]["per_seed"] == pytest.approx(
        [0.304, 0.314, 0.324])
    assert report["sizes"]["16 robots"]["imitator"]["per_seed"] == pytest.approx(
        [0.316, 0.326, 0.336])
    for run, cost in zip(report["runs"], (0.304, 0.314, 0.324), strict=True):
        assert run["coverage_costs_x1"] == pytest.approx([cost] * 2)  # journaled ones too
    assert not (tmp_path / "coverage_lpac-seeds").exists()
    trained.clear()
    found.clear()
    (tmp_path / "rounds" / "coverage_lpac-seed_1.safetensors").write_text("rounds")
    study(resume=False)
    assert trained == [0, 1, 2] and found == [False] * 3  # an earlier job's are not read


def test_a_stopped_sweep_keeps_the_probe_seeds_it_finished(tmp_path, monkeypatch):
    """Killed at its last probe's second seed and run again: the seeds it finished come
    from their journals (not imitated again), each probe's score is its seeds' mean as
    computed, and the journals go once the report is written; a probe whose recipe
    changed is imitated again."""
    trained: list[tuple[str, int]] = []
    stop_at = {"at": ("b", 101)}

    def fake_imitate(recipe, seed, factor=1):
        trained.append((recipe["name"], seed))
        if (recipe["name"], seed) == stop_at["at"]:
            raise KeyboardInterrupt
        return recipe["cost"] + 0.01 * (seed - 100), {"steps": 1, "val_loss": 0.1,
                                                      "wall_s": 0.0}

    monkeypatch.setattr(lpac, "PROBES", {"a": {"name": "a", "cost": 0.4},
                                         "b": {"name": "b", "cost": 0.3}})
    monkeypatch.setattr(lpac, "imitate_seed", fake_imitate)
    monkeypatch.setattr(lpac, "coverage_costs", lambda actor, kw, keys: [actor] * 2)
    monkeypatch.setattr(lpac, "references", lambda kw, episodes, root: {
        "decentralized Lloyd": [0.5, 0.6], "clairvoyant Lloyd": [0.1, 0.12]})
    sweep = lambda: lpac.sweep(tmp_path, (100, 101), 2)
    with pytest.raises(KeyboardInterrupt):
        sweep()
    assert trained == [("a", 100), ("a", 101), ("b", 100), ("b", 101)]
    assert sorted(p.name for p in (tmp_path / "sweep-coverage_lpac-seeds").iterdir()) == [
        "a-seed_100.json", "a-seed_101.json", "b-seed_100.json"]
    trained.clear()
    stop_at["at"] = None
    report = sweep()
    assert trained == [("b", 101)]
    assert report["probes"]["a"]["per_seed"] == pytest.approx([0.40, 0.41])
    assert report["probes"]["b"]["per_seed"] == pytest.approx([0.30, 0.31])
    assert report["chosen"] == "b"
    assert not (tmp_path / "sweep-coverage_lpac-seeds").exists()
    trained.clear()
    lpac.PROBES["b"] = {"name": "b", "cost": 0.5}  # a changed probe runs again
    assert sweep()["chosen"] == "a" and trained == [("b", 100), ("b", 101)]


def test_the_references_report_runs_each_named_lloyd_at_each_size(tmp_path, monkeypatch):
    """Every policy of REFERENCE_POLICIES is a function of envs.policies, played at each
    transfer size on the held-out episodes; the report keeps its per-episode values."""
    import envs.policies

    seen = []

    def fake_returns(env, policies, episodes, metric, root):
        seen.append((env.num_agents, tuple(policies.values()), episodes, root))
        return {k: {metric: [0.1 * i + 0.01 * env.num_agents] * episodes}
                for i, k in enumerate(policies)}

    monkeypatch.setattr(lpac, "reference_returns", fake_returns)
    report = lpac.references_report(tmp_path, episodes=3)
    functions = tuple(getattr(envs.policies, v) for v in lpac.REFERENCE_POLICIES.values())
    assert seen == [(lpac.scaled_env(f)["num_agents"], functions, 3, lpac.HELDOUT_SEED)
                    for f in lpac.FACTORS]
    clairvoyant = report["sizes"]["8 robots"]["references"]["clairvoyant Lloyd"]
    assert clairvoyant["per_seed"] == pytest.approx([0.28] * 3)  # here: per episode
    md = (tmp_path / "coverage_lpac-references.md").read_text()
    assert all(f"| {4 * f} robots" in md for f in lpac.FACTORS)
    assert json.loads((tmp_path / "coverage_lpac-references.json").read_text())["policies"] \
        == lpac.REFERENCE_POLICIES


def test_the_tails_diagnostic_counts_what_a_hand_count_does():
    import numpy as np

    from experiments import coverage_tails as tails

    # spread: two robots 0.2 apart, one at the origin -> mean distance from the centroid
    pos = np.array([[0.0, 0.0], [0.2, 0.0], [0.1, 0.0]])
    assert tails.spread(pos) == pytest.approx((0.1 + 0.1 + 0.0) / 3)
    rng = np.random.default_rng(0)
    steps, n = tails.CURVE_EVERY * 2, 4
    costs = {"imitator": [0.2, 1.5, 0.4, 0.9], "decentralized Lloyd": [0.3, 1.2, 1.1, 0.5]}
    played = {}
    for name, final in costs.items():
        cost = rng.uniform(0.1, 2.0, (len(final), steps))
        cost[:, -1] = final
        played[name] = {"cost": cost, "pos": rng.uniform(0, 1, (len(final), steps + 1, n, 2)),
                        "sensed": rng.uniform(0, 0.04, (len(final), steps + 1, n)),
                        "team_sensed": np.array([0.9, 0.5, 0.8, 0.7]), "max_step": 0.03,
                        "centre": 0.5}
    # one blind robot placed by hand: at (0.1, 0.1), moving at full speed toward (0.5, 0.5)
    im_played = played["imitator"]
    im_played["sensed"][:, 0] = 0.5
    im_played["sensed"][0, 0, 2] = 0.0
    im_played["pos"][0, 0, 2] = [0.1, 0.1]
    im_played["pos"][0, tails.EARLY, 2] = np.array([0.1, 0.1]) + 5 * 0.03 / np.sqrt(2)
    s = tails.summary(played)
    im = s["policies"]["imitator"]
    assert im["episodes_worse_than_start"] == 1 and im["median"] == pytest.approx(0.65)
    assert im["mean_where_not_worse"] == pytest.approx((0.2 + 0.4 + 0.9) / 3)
    assert im["curve"] == pytest.approx(played["imitator"]["cost"][:, [4, 9]].mean(0))
    assert im["curve_worse"] == pytest.approx(played["imitator"]["cost"][1, [4, 9]])
    assert im["blind_share"] == pytest.approx(1 / 16)
    assert im["blind_speed"] == pytest.approx(1.0) and im["blind_cos_centre"] == pytest.approx(1.0)
    assert im["team_sensed_worse"] == pytest.approx(0.5)
    assert im["team_sensed_not_worse"] == pytest.approx((0.9 + 0.8 + 0.7) / 3)
    assert tails.cosine(np.zeros(2), np.ones(2)) == 0.0
    assert s["policies"]["decentralized Lloyd"]["episodes_worse_than_start"] == 2
    assert s["imitator_better"] == 2 and s["both_worse_than_start"] == 1
    assert "| imitator | 0.750 | 0.650 |" in tails.markdown(
        {**s, "episodes": 4, "imitator": "x", "wall_time_s": 1.0, "machine": {"cpu": "c"}})


def test_episode_by_episode_groups_by_the_references_cost_as_a_hand_count_does():
    """Five episodes, two seeds, two groups: the imitator's mean over seeds per episode,
    the paired difference's t-interval (t(4, 0.975) = 2.776), the groups by Lloyd's cost
    (the second takes the odd episode), and the study's report table from them."""
    from experiments import coverage_tails as tails

    lloyd = [0.9, 0.1, 0.5, 0.2, 1.4]
    seeds = [[0.5, 0.3, 0.4, 0.2, 0.6], [0.7, 0.3, 0.6, 0.4, 0.8]]  # mean 0.6 .3 .5 .3 .7
    clair = [0.1, 0.1, 0.2, 0.1, 0.3]
    d = tails.by_difficulty(lloyd, seeds, {"clairvoyant": clair}, parts=2)
    diff = [-0.3, 0.2, 0.0, 0.1, -0.7]
    sd = (sum((x + 0.14) ** 2 for x in diff) / 4) ** 0.5
    assert d["paired"]["mean"] == pytest.approx(-0.14)
    assert d["paired"]["ci95"] == pytest.approx(2.776 * sd / 5 ** 0.5)
    assert d["imitator_better"] == 2
    # ordered by Lloyd: episodes 1, 3 | 2, 0, 4
    assert d["groups"][0] == pytest.approx({"reference": 0.15, "imitator": 0.3,
                                            "clairvoyant": 0.1})
    assert d["groups"][1] == pytest.approx({"reference": 2.8 / 3, "imitator": 0.6,
                                            "clairvoyant": 0.2})
    with pytest.raises(ValueError, match="episodes"):
        tails.by_difficulty(lloyd[:4], seeds, {})
    with pytest.raises(ValueError, match="6 groups"):
        tails.by_difficulty(lloyd, seeds, {}, parts=6)
    refs = {"decentralized Lloyd": {"per_seed": lloyd, "mean": 0.62, "ci95": 0.6},
            "clairvoyant Lloyd": {"per_seed": clair, "mean": 0.16, "ci95": 0.1}}
    report = {"seeds": [0, 1], "episodes": 5, "recipe": {}, "wall_s": 60.0,
              "sizes": {"4 robots": {"env_kwargs": lpac.scaled_env(1), "references": refs,
                                     "imitator": {"mean": 0.48, "ci95": 0.1},
                                     "below_decentralized_lloyd": False}},
              "runs": [{"wall_s": 60.0, "coverage_costs_x1": c} for c in seeds]}
    md = lpac.study_markdown(report)
    assert "| 4 robots | -0.140 ± " in md and "| 2 of 5 |" in md
    # the report's quarters of 5 episodes: 1, 1, 1 and the last 2 (episodes 0 and 4)
    assert md.rstrip().endswith("| 0.200 / 0.300 / 0.100 | 0.500 / 0.500 / 0.200 | "
                                "1.150 / 0.650 / 0.200 |")
    del report["runs"][0]["coverage_costs_x1"]  # an earlier study's report: no such table
    assert "Episode by episode" not in lpac.study_markdown(report)


@pytest.mark.heavy
def test_the_explorer_heads_for_the_nearest_unsensed_cell_of_its_own_cell():
    import jax
    import jax.numpy as jnp
    import numpy as np

    from envs.coverage import Coverage
    from envs.policies import frontier_decentralized
    from experiments import coverage_explore as explore

    pos = jnp.array([[0.125, 0.125], [0.875, 0.875]])  # cells (0, 0) and (3, 3)
    seen = np.ones((2, 4, 4), bool)  # [robot, iy, ix]
    seen[0, 0, 2] = seen[0, 3, 0] = False  # robot 0: (ix 2, iy 0) and (ix 0, iy 3) unsensed
    seen[1, 0, 1] = False  # robot 1: (ix 1, iy 0), in robot 0's half of the world
    for comm, expected in ((0.1, [[1.0, 0.0], np.array([-0.5, -0.75]) / np.hypot(0.5, 0.75)]),
                           (1.5, [[1.0, 0.0], [0.0, 0.0]])):
        env = Coverage(num_agents=2, grid_size=4, map_size=2, num_features=1, max_steps=5,
                       max_speed=0.1, comm_radius=comm)  # cells 0.25 wide
        _, state = env.reset(jnp.asarray(np.zeros(2, np.uint32)))
        state = state._replace(pos=pos, seen=jnp.asarray(seen))
        # robot 0: the nearer unsensed cell, (0.625, 0.125), 0.5 to its right (a full
        # step); robot 1, alone (comm 0.1), heads for (0.375, 0.125); with robot 0 as its
        # neighbour (comm 1.5) that cell is robot 0's, and robot 1 has seen its own: stays
        action = np.asarray(frontier_decentralized(None, env, state))
        np.testing.assert_allclose(action, expected, atol=1e-5)
    # the true density over the comm cell: decentralized Lloyd once every cell is sensed,
    # clairvoyant Lloyd once every robot is every other's neighbour; neither before
    from envs.policies import lloyd_clairvoyant, lloyd_decentralized

    for comm in (0.3, 1.5):
        env = Coverage(num_agents=3, grid_size=8, map_size=4, num_features=2, max_steps=5,
                       comm_radius=comm)
        _, state = env.reset(jax.random.key(3))
        ours = np.asarray(explore.true_density_comm_cell(None, env, state))
        np.testing.assert_allclose(ours, lloyd_decentralized(
            None, env, state._replace(seen=jnp.ones_like(state.seen))), atol=1e-5)
        assert np.allclose(ours, lloyd_clairvoyant(None, env, state), atol=1e-5) == (comm > 1)
        assert not np.allclose(ours, lloyd_decentralized(None, env, state), atol=1e-3)
    row = explore.summary([0.5, 1.5, 0.1], [0.4, 1.0, 0.2])
    assert row["worse"] == 1 and row["median"] == pytest.approx(0.5)
    assert row["minus_alone"] == pytest.approx((0.1 + 0.5 - 0.1) / 3)


@pytest.mark.heavy
@pytest.mark.parametrize("expert", ["lloyd_clairvoyant", "lloyd_memory"])
def test_the_options_diagnostic_replays_the_scheduled_experts_and_the_imitator_alone(expert):
    """Two of its pairings have oracles: scripted explore then the probe's cover expert
    is the scheduled experts' policy, learned then learned is the imitator's own
    rollout."""
    import dataclasses

    import jax
    import numpy as np

    import envs.policies
    from agents import FeudalActor
    from envs.coverage import Coverage
    from envs.episode import run_episode, stateless
    from envs.policies import frontier_decentralized
    from experiments import coverage_options as options
    from experiments.training import VALIDATION_SEED, heldout_keys
    from feudal_es.config import COMPACT_ACTOR
    from feudal_es.pretrain import scheduled_expert
    from feudal_es.rollout import make_population_rollouts
    from feudal_es.theta import selector_theta

    env = Coverage(num_agents=3, max_steps=8, grid_size=8, map_size=4, num_features=3)
    actor = FeudalActor.from_env(jax.random.key(0), env, dataclasses.replace(
        COMPACT_ACTOR, options="schedule", option_schedule=(0, 1), selector_period=3))
    played = options.play(actor, env, 4, expert)
    covers = options.covers(expert)
    assert len(played) == len(options.EXPLORERS) * len(covers)
    keys = heldout_keys(4, VALIDATION_SEED)
    experts = scheduled_expert((frontier_decentralized, getattr(envs.policies, expert)),
                               (0, 1), 3)
    want = jax.vmap(lambda k: run_episode(k, env, stateless(experts, env), record=lambda o: (
        o.metrics["coverage_cost"], o.metrics["sensed_fraction"])).outs)(keys)
    got = played[f"{options.EXPLORERS[0]} | {covers[2]}"]
    np.testing.assert_allclose(got["final"], want[0][:, -1], rtol=1e-5)
    np.testing.assert_allclose(got["handover_cost"], want[0][:, 2], rtol=1e-5)
    np.testing.assert_allclose(got["handover_sensed"], want[1][:, 2], rtol=1e-5)
    _, metrics = make_population_rollouts(env, True)(actor, selector_theta(actor)[None], keys)
    np.testing.assert_allclose(played[f"{options.EXPLORERS[1]} | {covers[1]}"]
                               ["final"], metrics["coverage_cost"][0], rtol=1e-5)
    with pytest.raises(ValueError, match=r"imitates one option.*needs a feudal probe"):
        options.run(probe="own-map-wide")
    with pytest.raises(ValueError, match="is not a probe of the sweep"):
        options.run(probe="no-such-probe")
