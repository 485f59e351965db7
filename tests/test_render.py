"""Self-explaining episode frames (envs.render.decorate_frames / write_gif): header and
legend bands around untouched raw pixels, a step counter that changes per frame, legends
that name colors the env really draws, and a GIF that reads back with every frame. The
arena's border is drawn and an agent on the world's edge is drawn whole; the header shows
the running team reward and the env's metrics, in ``envs.gif``'s reference GIFs and in
the GIF a training run (JAX and host paths) writes."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from line_envs import Line
from PIL import Image

from envs.base import SwarmEnv
from envs.gif import TEAM_REWARD, episode_info
from envs.registration import BUNDLED_ENVS, load_env_class
from envs.render import (
    AGENT_COLOR,
    ARENA_COLOR,
    BAND_UNIT,
    LINK_COLOR,
    MARGIN_COLOR,
    TARGET_COLOR,
    band_heights,
    decorate_frames,
    draw_swarm,
    write_gif,
)

LEGEND = (("agents", AGENT_COLOR), ("comm links", LINK_COLOR), ("targets", TARGET_COLOR))


def raw_frames(count: int = 8, size: int = 128) -> list[np.ndarray]:
    """A short synthetic episode: three agents drifting right, one target."""
    frames = []
    for t in range(count):
        pos = np.array([[0.2 + 0.05 * t, 0.3], [0.3 + 0.05 * t, 0.35], [0.25, 0.7]])
        frames.append(draw_swarm(1.0, pos, adjacency=1 - np.eye(3), targets=np.array([[0.8, 0.8]]),
                                 size=size))
    return frames


def test_bands_surround_the_untouched_raw_frame_and_the_counter_moves():
    raw = raw_frames()
    info = {"team reward": [0.1 * t for t in range(len(raw))]}
    out = decorate_frames(raw, title="Discovery · greedy · runs/x", legend=LEGEND, info=info)
    top, bottom = band_heights(128, len(raw), title="Discovery · greedy · runs/x",
                               legend=LEGEND, info=info)
    h, w = raw[0].shape[:2]
    assert top > 0 and bottom > 0 and top % BAND_UNIT == 0 and bottom % BAND_UNIT == 0
    assert len(out) == len(raw)
    for deco, frame in zip(out, raw, strict=True):
        assert deco.shape == (h + top + bottom, w, 3) and deco.dtype == np.uint8
        np.testing.assert_array_equal(deco[top:top + h], frame)  # raw area exactly kept
    # the header differs between step 0 and step 5 (counter, reward); the legend does not
    assert not np.array_equal(out[0][:top], out[5][:top])
    np.testing.assert_array_equal(out[0][top + h:], out[5][top + h:])
    # frames that are identical still get different headers: only the counter can differ
    same, (top_same, _) = decorate_frames([raw[0]] * 6), band_heights(128, 6)
    assert not np.array_equal(same[0][:top_same], same[5][:top_same])
    np.testing.assert_array_equal(same[0][top_same:], same[5][top_same:])
    # each legend color is drawn in the legend band (its swatch)
    band = {tuple(c) for c in out[0][top + h:].reshape(-1, 3)}
    assert all(color in band for _, color in LEGEND)


def test_band_heights_keep_the_frame_a_multiple_of_16_and_long_titles_wrap():
    raw = raw_frames(count=3)
    short = band_heights(128, 3, title="Coverage · lloyd")
    long = band_heights(128, 3, title="Coverage-v0 · merl · Coverage-v0-merl-20250101-120000")
    assert long[0] > short[0] and short[1] == long[1] == 0
    out = decorate_frames(raw, title="Coverage-v0 · merl · Coverage-v0-merl-20250101-120000",
                          legend=LEGEND)
    assert out[0].shape[0] % 16 == 0 and out[0].shape[1] == 128
    with pytest.raises(ValueError, match="values for 3 frames"):
        decorate_frames(raw, info={"team reward": [0.0]})


def clustered(env: SwarmEnv, state):
    """``state`` with the agents in a tight cluster (comm links drawn) and, where the env
    has targets, every other one marked done."""
    n = env.num_agents
    pos = env.world_size * (0.5 + 0.04 * jnp.stack([jnp.arange(n), jnp.arange(n) % 2], -1))
    state = eqx.tree_at(lambda s: s.pos, state, pos.astype(state.pos.dtype))
    if hasattr(state, "found"):
        found = jnp.arange(state.found.shape[0]) % 2 == 0
        state = eqx.tree_at(lambda s: s.found, state, found)
    return state


@pytest.mark.parametrize("name", list(BUNDLED_ENVS))
def test_each_env_legend_names_colors_its_render_draws(name):
    env = load_env_class(BUNDLED_ENVS[name])(num_agents=4)
    legend = type(env).render_legend
    assert legend and legend != SwarmEnv.render_legend, f"{name} keeps the generic legend"
    assert all(isinstance(label, str) and label for label, _ in legend)
    _, state = env.reset(jax.random.key(0))
    frame = env.render(jax.device_get(clustered(env, state)))
    drawn = {tuple(int(v) for v in c) for c in frame.reshape(-1, 3)}
    for label, color in legend:
        assert tuple(color) in drawn, f"{name}: legend entry {label!r} {color} is not drawn"


def test_write_gif_reads_back_with_every_frame(tmp_path):
    raw = raw_frames(count=7)
    info = {"reached_frac": [None, *np.linspace(0, 1, 6)]}
    path = write_gif(raw, tmp_path / "ep.gif", title="Dispersion · greedy", legend=LEGEND,
                     info=info)
    top, bottom = band_heights(128, 7, title="Dispersion · greedy", legend=LEGEND, info=info)
    with Image.open(path) as im:
        assert im.format == "GIF" and im.n_frames == 7
        assert im.size == (128, 128 + top + bottom)
        im.seek(6)
        assert np.asarray(im.convert("RGB")).shape == (128 + top + bottom, 128, 3)
    # the old call (no title, legend or info) writes the raw frames as they are
    with Image.open(write_gif(raw, tmp_path / "raw.gif")) as im:
        assert im.size == (128, 128) and im.n_frames == 7


# --- the arena: its border, and agents on its edge drawn whole -----------------------------
def agent_pixels(frame: np.ndarray) -> int:
    return int((frame == AGENT_COLOR).all(-1).sum())


def assert_border_and_whole_agents(frame: np.ndarray, agents: int, disc: int) -> None:
    """``frame`` outlines the arena on all four sides (the border differs from the
    background inside it and from the margin outside), and shows ``agents`` whole dots of
    ``disc`` pixels, none touching the frame's edge."""
    size = frame.shape[0]
    for line in (frame[size // 2], frame[:, size // 2]):  # a row and a column, mid-frame
        border = np.nonzero((line == ARENA_COLOR).all(-1))[0]
        assert border.size and border.min() < size // 8 and border.max() > size - size // 8
    assert tuple(frame[0, 0]) == MARGIN_COLOR != ARENA_COLOR
    assert agent_pixels(frame) == agents * disc, "an agent on the edge is cut off"
    edge = np.concatenate([frame[0], frame[-1], frame[:, 0], frame[:, -1]])
    assert not (edge == AGENT_COLOR).all(-1).any()


def test_arena_border_and_agents_on_the_edge_drawn_whole():
    corners = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    disc = agent_pixels(draw_swarm(1.0, corners[:1], size=96, pad_px=30))  # far from the edge
    assert disc >= 9
    frame = draw_swarm(1.0, corners, size=96)
    assert_border_and_whole_agents(frame, 4, disc)
    inside = frame[48, 48]
    assert tuple(inside) == (255, 255, 255) != ARENA_COLOR  # the background is not the border


def test_rover_frame_has_its_border_and_whole_rovers_at_the_corners():
    env = load_env_class(BUNDLED_ENVS["Rover"])(num_agents=4)
    _, state = env.reset(jax.random.key(0))
    w = env.world_size
    corners = jnp.array([[0.0, 0.0], [w, w], [0.0, w], [w, 0.0]], state.pos.dtype)
    frame = env.render(jax.device_get(eqx.tree_at(lambda s: s.pos, state, corners)))
    size = frame.shape[0]
    disc = agent_pixels(draw_swarm(1.0, np.zeros((1, 2)), size=size, pad_px=size // 4))
    assert_border_and_whole_agents(frame, 4, disc)


# --- the header: step, running team reward, the env's metrics --------------------------------
def test_header_text_follows_the_team_reward():
    frame = raw_frames(count=1)[0]
    info = episode_info([0.0, 0.0, 0.5, 0.0], {"observed_frac": [0.0, 0.5, 0.5, 1.0]})
    assert info[TEAM_REWARD] == [0.0, 0.0, 0.0, 0.5, 0.5]  # running sum, 0 at the reset
    assert info["observed_frac"] == [None, 0.0, 0.5, 0.5, 1.0]
    flat = {**info, TEAM_REWARD: [0.0] * 5}
    top, _ = band_heights(128, 5, info=info)
    a, b = (decorate_frames([frame] * 5, info=x) for x in (info, flat))
    for t in range(5):  # the same frames, the same steps: only the team reward differs
        same = np.array_equal(a[t][:top], b[t][:top])
        assert same == (t < 3), f"frame {t}: the header does not follow the team reward"


def test_training_gif_header_shows_team_reward_and_metrics(tmp_path):
    """The GIF a JAX-path run writes (end of training, ``feudal-es render``)."""
    from helpers import TINY

    from feudal_es.trainer import ESTrainer

    t = ESTrainer(TINY, tmp_path / "run")
    frames, info = t.episode_record()
    steps = TINY.env_kwargs["max_steps"]
    assert len(frames) == steps + 1
    assert set(info) >= {TEAM_REWARD, "coverage_cost"}
    assert all(len(v) == steps + 1 for v in info.values())
    path = t.write_gif(tmp_path / "ep.gif")
    title = f"{TINY.env} · {TINY.mode} · run"
    top, bottom = band_heights(frames[0].shape[1], len(frames), title=title,
                               legend=t.env.core.render_legend, info=info)
    with Image.open(path) as im:
        assert im.n_frames == len(frames)
        assert im.size == (frames[0].shape[1], frames[0].shape[0] + top + bottom)
    assert top > band_heights(frames[0].shape[1], len(frames), title=title)[0]


class DrawnLine(Line):
    """``line_envs.Line`` that draws itself (agents on the segment ``[-1.5, 1.5]``)."""

    def __init__(self, render_mode: str | None = None, max_cycles: int = 6):
        super().__init__(max_cycles)
        self.render_mode = render_mode

    def render(self):
        xs = np.array([self.pos[a] for a in self.possible_agents]) + 1.5
        return draw_swarm(3.0, np.stack([xs, np.full(3, 1.5)], -1), size=64)


def test_host_gif_header_shows_the_running_team_reward(tmp_path):
    """The host path (a PettingZoo env): the team reward, which this env pays on its last
    step, appears in the last frame's header."""
    from helpers import HOST

    from feudal_es.resolve import ResolvedEnv
    from feudal_es.trainer import ESTrainer

    t = ESTrainer(HOST, tmp_path / "run",
                  resolved=ResolvedEnv(HOST.env, "host", make=DrawnLine))
    frames, info = t.episode_record()
    team = info[TEAM_REWARD]
    assert len(frames) == len(team) == 7
    assert team[:-1] == [0.0] * 6 and team[-1] < 0  # minus the mean distance, at the end
