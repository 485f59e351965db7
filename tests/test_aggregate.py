"""rliable's aggregates through feudal_es.aggregate against hand computations, and the
marl-eval export against marl-eval's documented layout (marl-eval itself does not install
beside this stack: it pins an old pandas)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from feudal_es import aggregate
from feudal_es.marl_eval import RETURN, check_marl_eval, env_task, marl_eval_data, write_marl_eval

pytest.importorskip("rliable", reason="the stats extra")
RNG = np.random.default_rng(0)


def _iqm(x):
    """The mean of the middle half: drop the lowest and highest quarter (n divisible by 4)."""
    x = np.sort(np.ravel(x))
    q = len(x) // 4
    return x[q:len(x) - q].mean()


def _p_greater(x, y):
    """P(X > Y) over all pairs, ties one half."""
    x, y = np.asarray(x)[:, None], np.asarray(y)[None, :]
    return float(np.mean((x > y) + 0.5 * (x == y)))


def test_iqm_and_its_bootstrap_interval():
    x = RNG.normal(size=40)
    x[:3] = 100.0  # outlying runs: the IQM ignores them, the mean does not
    est = aggregate.iqm(x, reps=500, seed=1)
    assert est.point == pytest.approx(_iqm(x), rel=1e-12)
    assert est.lo < est.point < est.hi and est.hi - est.lo < 1.0
    assert aggregate.iqm(x, reps=500, seed=1) == est  # seeded: reproducible
    assert aggregate.iqm(x, reps=500, seed=2) != est
    np.random.seed(7)  # noqa: NPY002 (the caller's global stream is left as it was)
    aggregate.iqm(x, reps=50)
    assert np.random.random() == np.random.RandomState(7).random()  # noqa: NPY002
    # [runs, tasks]: stratified over tasks, the point is the IQM of all scores
    m = RNG.normal(size=(8, 3))
    assert aggregate.iqm(m, reps=200).point == pytest.approx(_iqm(m), rel=1e-12)


def test_probability_of_improvement():
    x, y = RNG.normal(1.0, 1.0, 32), RNG.normal(0.0, 1.0, 24)
    est = aggregate.probability_of_improvement(x, y, reps=500)
    assert est.point == pytest.approx(_p_greater(x, y), abs=1e-12)
    assert est.lo < est.point < est.hi
    assert aggregate.probability_of_improvement(y, x, reps=500).point == pytest.approx(
        1 - est.point, abs=1e-12)
    same = aggregate.probability_of_improvement(x, x, reps=100)
    assert same.point == 0.5
    ties = [0.0, 0.0, 1.0, 1.0]
    assert aggregate.probability_of_improvement(ties, [0.0, 1.0, 0.5, 0.5], reps=50).point == (
        pytest.approx(_p_greater(ties, [0.0, 1.0, 0.5, 0.5])))


def test_the_metrics_are_rliable_s_bit_for_bit():
    """The metrics the bootstraps call equal rliable's (scipy's trim_mean, Mann-Whitney U,
    the profile's share above each threshold) exactly, ties and uneven run counts
    included, and so do the intervals built on them (the same seeded resamples through
    rliable's bootstrap)."""
    library, metrics = aggregate.rliable()
    cases = [RNG.normal(size=(10, 1)), RNG.normal(size=(7, 3)), RNG.normal(size=(1, 1)),
             RNG.integers(0, 3, size=(9, 2)).astype(float), np.full((5, 1), 0.25)]
    for a in cases:
        assert aggregate.aggregate_iqm(a) == metrics.aggregate_iqm(a)
        for b in cases:
            if a.shape[1] == b.shape[1]:
                assert aggregate.aggregate_poi(a, b) == metrics.probability_of_improvement(
                    a, b), (a.shape, b.shape)
        taus = np.linspace(a.min() - 0.5, a.max() + 0.5, 33)
        np.testing.assert_array_equal(aggregate.aggregate_profile(a, taus),
                                      library.score_distributions(a, taus))
    x, y = RNG.normal(size=10), RNG.normal(0.5, 1.0, size=12)
    with aggregate._seeded(3):
        _, ci = library.get_interval_estimates(
            {"x": x[:, None]}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=300)
    assert tuple(aggregate.iqm(x, reps=300, seed=3))[1:] == tuple(np.ravel(ci["x"]))
    with aggregate._seeded(4):
        _, ci = library.get_interval_estimates(
            {"x": (x[:, None], y[:, None])}, metrics.probability_of_improvement, reps=300)
    assert tuple(aggregate.probability_of_improvement(x, y, reps=300, seed=4))[1:] == tuple(
        np.ravel(ci["x"]))
    taus = np.linspace(-2.0, 2.0, 21)
    with aggregate._seeded(5):
        want = library.get_interval_estimates(
            {"x": x[:, None]}, lambda s: library.score_distributions(s, taus), reps=100)
    got = aggregate.performance_profile({"x": x}, taus, reps=100, seed=5)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g["x"], w["x"])


@pytest.mark.parametrize("bad, match", [
    ([], "runs"), ([[[1.0]]], "runs"), ([1.0, float("nan")], "finite"),
])
def test_bad_scores_are_refused_by_name(bad, match):
    with pytest.raises(ValueError, match=match):
        aggregate.iqm(bad)
    with pytest.raises(ValueError, match="same tasks"):
        aggregate.probability_of_improvement(np.zeros((4, 2)), np.zeros((4, 3)))


def test_performance_profile_is_the_share_above_each_threshold(tmp_path):
    x, y = RNG.uniform(size=20), RNG.uniform(0.5, 1.5, size=20)
    taus = [0.0, 0.5, 1.0]
    prof, band = aggregate.performance_profile({"x": x, "y": y}, taus, reps=200)
    for name, s in (("x", x), ("y", y)):
        np.testing.assert_allclose(prof[name], [(s > t).mean() for t in taus])
        assert band[name].shape == (2, 3) and np.all(band[name][0] <= prof[name] + 1e-12)
    png = aggregate.plot_performance_profiles({"x": x, "y": y}, tmp_path / "p.png", "score",
                                              higher_is_better=False, reps=50)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_marl_eval_export_has_the_documented_layout(tmp_path):
    rows = [{"name": "merl", "step_count": 1000, "returns": [0.5, 0.25],
             "metrics": {"observed_frac": [0.5, 0.25]}},
            {"name": "es", "step_count": 0, "returns": [0.0, 0.25], "metrics": {}}]
    data = marl_eval_data("feudal_es/RoverMERL-v0", rows)
    run = data["feudal_es"]["RoverMERL-v0"]["merl"]["run_0"]
    assert run["step_0"] == {"step_count": 1000, RETURN: [0.5, 0.25],
                             "observed_frac": [0.5, 0.25]}
    assert run["absolute_metrics"] == {RETURN: [0.5, 0.25], "observed_frac": [0.5, 0.25]}
    path = write_marl_eval(tmp_path / "out.json", data)
    assert json.loads(path.read_text()) == data
    assert env_task("mpe_line") == ("mpe_line", "mpe_line")
    with pytest.raises(ValueError, match="two rows are named 'es'"):
        marl_eval_data("x/y", [rows[1], rows[1]])


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d["e"]["t"]["a"]["run_0"].update(step_x={}), "run_0.step_x"),
    (lambda d: d["e"]["t"]["a"]["run_0"]["step_0"].pop("step_count"), "step_0"),
    (lambda d: d["e"]["t"]["a"]["run_0"]["step_0"].update(step_count=-1), "step_count"),
    (lambda d: d["e"]["t"]["a"]["run_0"]["absolute_metrics"].update(r=[float("inf")]),
     "absolute_metrics.r"),
    (lambda d: d["e"]["t"]["a"]["run_0"]["absolute_metrics"].update(r="1.0"),
     "absolute_metrics.r"),
    (lambda d: d["e"]["t"].update(b={}), "e.t.b"),
    (lambda d: d.update(f=[]), "f"),
])
def test_marl_eval_check_names_where_a_file_departs(mutate, where):
    good = {"e": {"t": {"a": {"run_0": {"step_0": {"step_count": 3, "r": [1.0]},
                                        "absolute_metrics": {"r": [1.0]}}}}}}
    check_marl_eval(good)
    mutate(good)
    with pytest.raises(ValueError, match=re.escape(where) + ":"):
        check_marl_eval(good)
