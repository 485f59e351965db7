"""The learning curve (feudal_es.rundir.learning_curve_figure), built from metrics rows
alone: one labelled y axis per quantity (team return and mean agent return, which differ
by orders of magnitude, never share one), episode returns of the rounds where no training
episode ended joined over and explained, and titles / caption / notes that describe only
what a mode draws, never over the data."""

from __future__ import annotations

import re

import numpy as np
import pytest

from feudal_es.rundir import LABELS, learning_curve_figure, plot_history

ROUNDS = 16
ENDED = (3, 6, 9, 12, 15)  # rows whose round saw a training episode end (Coverage-like)


def rows(mode: str, sparse: bool = False) -> list[dict]:
    """``metrics.jsonl``-like rows of ``mode``: team return in [0, 1], mean agent return
    ~40 (Rover-like scales); with ``sparse``, episode returns only in :data:`ENDED`."""
    out = []
    for r in range(ROUNDS):
        row = {"round": r, "selector_fitness": 0.2 + 0.03 * r,
               "fitness_best": None, "fitness_mean": None}
        if mode in ("merl", "es"):
            row.update(fitness_best=0.3 + 0.03 * r, fitness_mean=0.1 + 0.03 * r)
        if mode in ("merl", "mappo"):
            ended = not sparse or r in ENDED
            row.update({"mappo/team_return": 0.1 + 0.02 * r if ended else None,
                        "mappo/episode_return": 38.0 + 0.5 * r if ended else None,
                        "mappo/skill_reward": 0.3 + 0.01 * r,
                        "mappo/env_steps": 1024 * (r + 1)})
        out.append(row)
    return out


def texts(fig) -> list[str]:
    """Every string the figure shows: titles, axis labels, legends, notes, caption."""
    found = [fig.get_suptitle(), *(t.get_text() for t in fig.texts)]
    for ax in fig.axes:
        found += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel(),
                  *(t.get_text() for t in ax.texts)]
        if ax.get_legend() is not None:
            found += [t.get_text() for t in ax.get_legend().get_texts()]
    return found


def axes_with(fig, values: list[float]) -> list:
    """Every axes holding a line through exactly ``values``."""
    return [ax for ax in fig.axes for line in ax.get_lines()
            if len(line.get_ydata()) == len(values) and np.allclose(line.get_ydata(), values)]


def test_every_quantity_has_its_own_labelled_axis():
    history = rows("merl")
    fig = learning_curve_figure(history, "Rover (merl, seed 0)", "merl")
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert all(labels) and len(set(labels)) == len(labels)
    assert labels == ["team fitness (team return per episode)",
                      "team return per training episode",
                      "mean agent return per training episode",
                      "training reward per agent-step"]
    assert all(ax.get_xlabel() == "outer round" for ax in fig.axes)
    # the 0-1 team return and the ~40 agent return sit on different axes, one line each
    team = axes_with(fig, [h["mappo/team_return"] for h in history])
    agent = axes_with(fig, [h["mappo/episode_return"] for h in history])
    assert len(team) == len(agent) == 1 and team[0] is not agent[0]
    assert len(team[0].get_lines()) == len(agent[0].get_lines()) == 1
    lo, hi = team[0].get_ylim()
    assert hi - lo < 1.0  # scaled to the team return, not flattened by the agent return
    # ES: its lines, each in the legend, each in the caption
    shown = "\n".join(texts(fig))
    for label in LABELS.values():
        assert label in shown
    assert fig.axes[0].get_title() == "ES: team fitness"


def test_mappo_mode_says_no_es_and_keeps_notes_off_the_data():
    fig = learning_curve_figure(rows("mappo"), "Rover (mappo, seed 0)", "mappo")
    shown = texts(fig)
    for text in shown:
        assert not re.search(r"\bES\b|pop\. (best|mean)|θ\+σε", text), text
    fitness = fig.axes[0]
    assert fitness.get_lines(), "the selector's team fitness is still drawn"
    assert "selector not evolved" in fitness.get_title()  # the note: in the title...
    assert not fitness.texts  # ...never over the curve
    for ax in fig.axes:
        if ax.get_lines():
            assert not ax.texts
    legend = [t.get_text() for t in fitness.get_legend().get_texts()]
    assert legend == [LABELS["selector_fitness"], LABELS["best_selector"]]
    caption = fig.texts[-1].get_text()
    assert caption.startswith(f"{LABELS['selector_fitness']}: ") and "pop." not in caption


def test_es_mode_draws_no_mappo_panels_and_says_why():
    fig = learning_curve_figure(rows("es"), "Rover (es, seed 0)", "es")
    assert len(fig.axes) == 1 and fig.axes[0].get_ylabel()
    assert "no MAPPO" in fig.get_suptitle() and not fig.axes[0].texts
    assert "MAPPO panels" not in fig.texts[-1].get_text()


def test_episode_returns_of_some_rounds_are_joined_and_explained():
    history = rows("merl", sparse=True)
    fig = learning_curve_figure(history, "Coverage (merl, seed 0)", "merl")
    team = axes_with(fig, [history[r]["mappo/team_return"] for r in ENDED])
    assert len(team) == 1
    (line,) = team[0].get_lines()
    assert list(line.get_xdata()) == [r + 1 for r in ENDED]  # one line over the gaps
    assert line.get_linestyle() == "-" and line.get_marker() == "."
    assert f"{len(ENDED)} of {ROUNDS}" in team[0].get_title()
    assert "a training episode ended" in fig.texts[-1].get_text()
    # every round has a training reward: its panel says nothing of missing rounds
    reward = axes_with(fig, [h["mappo/skill_reward"] for h in history])[0]
    assert " of " not in reward.get_title()


@pytest.mark.parametrize("mode", ["merl", "mappo", "es"])
def test_plot_history_writes_a_png(tmp_path, mode):
    path = plot_history(rows(mode), tmp_path / "curve.png", f"x ({mode})", mode)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_history([], tmp_path / "empty.png", "x", mode).stat().st_size > 0
