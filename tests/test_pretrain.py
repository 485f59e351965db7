"""Imitation pretraining (feudal_es.pretrain): behaviour cloning + DAgger of the executor
from the clairvoyant Lloyd controller on Coverage. The loss falls, only executor leaves
move, the pretrained actor round-trips through its file and starts a run
(``TrainerConfig.init_from``); another architecture is refused. The slow test checks the
imitation is good: J(T)/J(0) of the pretrained executor on 16 held-out episodes within
1.5x of clairvoyant Lloyd's."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging

import equinox as eqx
import jax
import numpy as np
import pytest

from agents import FeudalActor, selector_filter
from envs.coverage import Coverage
from envs.episode import run_episode, stateless
from envs.policies import lloyd_clairvoyant
from feudal_es import checkpoint, cli, pretrain
from feudal_es.checkpoint import CheckpointError, read_metadata
from feudal_es.config import COMPACT_ACTOR, TrainerConfig
from feudal_es.pretrain import (
    SELECT_STREAM,
    PretrainConfig,
    curve_paths,
    imitate,
    load_pretrained,
    save_pretrained,
)
from feudal_es.rollout import make_population_rollouts
from feudal_es.theta import selector_theta
from feudal_es.trainer import ESTrainer

COVER = 1  # Coverage's "cover" option
# the smallest actor the CLI test's 4-pixel maps take
SMALL_ACTOR = dict(cnn_channels=[4], cnn_strides=[2], cnn_out=8, vec_hidden=[8], vec_out=8,
                   gnn_layers=1, gnn_features=8, embed_hidden=[], embed_dim=8,
                   executor_hidden=[8])
# (coverage_cost's episodes re-decide the option every 10 steps: the actor's period)
ACTOR = dataclasses.replace(COMPACT_ACTOR, options="fixed", fixed_option=COVER,
                            selector_period=10)


def coverage_cost(env, actor, episodes=16):
    """Mean final J(T)/J(0) of ``actor`` on held-out episodes (seed 4242)."""
    keys = jax.random.split(jax.random.key(4242), episodes)
    rollouts = jax.jit(make_population_rollouts(env, True))
    _, metrics = rollouts(actor, selector_theta(actor)[None], keys)
    return float(metrics["coverage_cost"].mean())


def lloyd_cost(env, episodes=16):
    keys = jax.random.split(jax.random.key(4242), episodes)
    run = jax.jit(jax.vmap(lambda k: run_episode(k, env, stateless(lloyd_clairvoyant, env),
                                                 record=lambda o: o.metrics)))
    return float(run(keys).outs["coverage_cost"][:, -1].mean())


@contextlib.contextmanager
def compilations():
    """Counts JAX's programs by function name while the block runs (traced and lowered
    anew: a persistent-cache hit still counts)."""
    counts: collections.Counter = collections.Counter()

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            words = record.getMessage().split()
            if len(words) > 1 and words[0] == "Compiling":
                counts[words[1]] += 1

    handler, logger = Count(), logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield counts
    finally:
        logger.removeHandler(handler)


def test_imitation_loss_falls_only_the_executor_moves_and_a_run_starts_from_it(tmp_path):
    env = Coverage(num_agents=3, max_steps=12, grid_size=16, map_size=8, num_features=3)
    actor = FeudalActor.from_env(jax.random.key(0), env, ACTOR)
    cfg = PretrainConfig(option=COVER, episodes=8, rounds=2, steps_per_round=150)
    bc, losses, curve, *_ = imitate(env, actor, lloyd_clairvoyant, cfg)
    assert len(losses) == 300
    # ten validation losses a round, every 15 steps, each after its chunk's steps
    assert [(p["round"], p["step"]) for p in curve] == [
        (r, 150 * r + 15 * (i + 1)) for r in range(2) for i in range(10)]
    for p in curve:
        assert p["train_loss"] == pytest.approx(np.mean(losses[p["step"] - 15:p["step"]]))
    assert all(np.isfinite(p["val_loss"]) and p["val_loss"] > 0 for p in curve)
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:10]), losses[::30]
    np.testing.assert_array_equal(selector_theta(bc), selector_theta(actor))
    still = {jax.tree_util.keystr(p) for (p, a), b in zip(
        jax.tree_util.tree_leaves_with_path(eqx.filter(bc, eqx.is_inexact_array)),
        jax.tree.leaves(eqx.filter(actor, eqx.is_inexact_array)), strict=True)
        if np.array_equal(a, b)}
    selector = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(
        eqx.filter(actor, selector_filter(actor)))}
    # every executor leaf moved but the Gaussian's log-std (the deterministic action,
    # which imitation fits, does not read it); no selector leaf moved
    assert still == selector | {".executor.head.log_std"}, still
    assert coverage_cost(env, bc) < coverage_cost(env, actor)

    path = save_pretrained(tmp_path / "bc.safetensors", bc, {"env": "feudal_es/Coverage-v0"})
    config = TrainerConfig(env="feudal_es/Coverage-v0", n_outer=1, actor=COMPACT_ACTOR,
                           env_kwargs=dict(num_agents=3, max_steps=12, grid_size=16,
                                           map_size=8, num_features=3),
                           init_from=str(path), gif=False)
    t = ESTrainer(config, tmp_path / "run")
    for a, b in zip(jax.tree.leaves(eqx.filter(t.ts.actor, eqx.is_inexact_array)),
                    jax.tree.leaves(eqx.filter(bc, eqx.is_inexact_array)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert t.ts.actor.options == "learned"  # the run's own option mode, the pretrained weights
    wider = FeudalActor.from_env(jax.random.key(0), env,
                                 dataclasses.replace(ACTOR, executor_hidden=(16,)))
    with pytest.raises(CheckpointError, match="does not match the template"):
        load_pretrained(path, wider)


@pytest.mark.slow
def test_pretrained_executor_is_within_1_5x_of_clairvoyant_lloyd():
    """Behaviour cloning + 2 DAgger rounds (64 episodes each, 1500 steps, a round ended
    after 3 validation losses without a better one) from local observations (a sensor
    window of half the world, comm radius 0.5), 60-step episodes. Measured: J(T)/J(0)
    0.147 against clairvoyant Lloyd's 0.157 (in 2,250 steps, 39 s); without the
    validation split it overfit to 0.245 (1.56x, failing); an untrained executor stays at
    ~1.0."""
    env = Coverage(num_agents=4, max_steps=60, grid_size=16, map_size=16, num_features=3,
                   sensor_radius=0.5, comm_radius=0.5)
    actor = FeudalActor.from_env(jax.random.key(0), env, ACTOR)
    cfg = PretrainConfig(option=COVER, episodes=64, val_episodes=16, rounds=3,
                         steps_per_round=1500, patience=3)
    bc, losses, curve, *_ = imitate(env, actor, lloyd_clairvoyant, cfg)
    ours, expert = coverage_cost(env, bc), lloyd_cost(env)
    # the fit falls on one data set, behaviour cloning's: each DAgger round adds the
    # imitator's own, harder states, so a later round's loss is not comparable with the
    # first step's
    bc_round = [p["train_loss"] for p in curve if p["round"] == 0]
    assert bc_round[-1] < 0.5 * losses[0], (bc_round, losses[0])
    assert ours <= 1.5 * expert, (ours, expert)
    assert coverage_cost(env, actor) > 0.9


@pytest.mark.heavy
def test_a_round_that_never_validates_better_ends_early_with_its_starting_actor():
    """lr 30 wrecks every step: each round stops after ``patience`` measurements without a
    better validation loss and hands on its best actor, the one it started with. Its
    ``val_loss`` is that actor's on the last round's data, below every point of the
    round's curve: the oracle is a run whose steps are too small to move a weight
    (lr 1e-30, the same data), where every point is the starting actor's loss."""
    env = Coverage(num_agents=3, max_steps=12, grid_size=16, map_size=8, num_features=3)
    actor = FeudalActor.from_env(jax.random.key(0), env, ACTOR)
    cfg = PretrainConfig(option=COVER, episodes=4, val_episodes=2, rounds=2,
                         steps_per_round=40, evals_per_round=4, patience=2, lr=30.0)
    bc, losses, curve, val_loss, *_ = imitate(env, actor, lloyd_clairvoyant, cfg)
    assert len(losses) == 2 * 2 * 10 and len(curve) == 4  # two chunks of 10, each round
    for a, b in zip(jax.tree.leaves(eqx.filter(bc, eqx.is_inexact_array)),
                    jax.tree.leaves(eqx.filter(actor, eqx.is_inexact_array)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    still = imitate(env, actor, lloyd_clairvoyant, dataclasses.replace(cfg, lr=1e-30))
    assert val_loss == pytest.approx(still.curve[-1]["val_loss"], rel=1e-6)
    assert val_loss < min(p["val_loss"] for p in curve[2:]), (val_loss, curve)


@pytest.fixture(scope="module")
def two_rounds():
    """A small two-round imitation, as is (no final fit, no selection), with the programs
    it compiled: the run that the final-fit and selection tests compare theirs with."""
    env = Coverage(num_agents=3, max_steps=12, grid_size=16, map_size=8, num_features=3)
    actor = FeudalActor.from_env(jax.random.key(0), env, ACTOR)
    cfg = PretrainConfig(option=COVER, episodes=4, val_episodes=2, rounds=2,
                         steps_per_round=20, evals_per_round=2, lr=3e-3)
    with compilations() as compiled:
        plain = imitate(env, actor, lloyd_clairvoyant, cfg)
    return env, actor, cfg, plain, compiled


def test_the_final_fit_follows_the_rounds_on_their_data_and_keeps_learning(two_rounds):
    """``final_steps`` after the last round: the rounds run as without it (bit for bit,
    one program), the final fit's measurements follow as round ``rounds`` on all the
    rounds' data, its validation loss goes below the last round's best, and the actor it
    returns is its own best, not the last round's."""
    env, actor, cfg, plain, plain_compiled = two_rounds
    with compilations() as fitted_compiled:
        fitted = imitate(env, actor, lloyd_clairvoyant,
                         dataclasses.replace(cfg, final_steps=40))
    # one program for every round (the filled count is an array, not a static int); the
    # final fit's optimizer is another train program
    programs = [(c["jit(train)"], c["jit(validate)"]) for c in (plain_compiled, fitted_compiled)]
    assert programs == [(1, 1), (2, 1)], (plain_compiled, fitted_compiled)
    assert fitted.curve[:4] == plain.curve and fitted.losses[:40] == plain.losses
    final = fitted.curve[4:]
    assert [(p["round"], p["step"]) for p in final] == [(2, 50), (2, 60), (2, 70), (2, 80)]
    assert len(fitted.losses) == 80 and fitted.val_loss == min(p["val_loss"] for p in final)
    assert fitted.val_loss < plain.val_loss, (fitted.curve, plain.curve)
    moved = [not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(
        jax.tree.leaves(eqx.filter(fitted.actor, eqx.is_inexact_array)),
        jax.tree.leaves(eqx.filter(plain.actor, eqx.is_inexact_array)), strict=True)]
    assert any(moved)


def test_select_episodes_returns_the_round_that_plays_best_and_trains_as_without(
        two_rounds, monkeypatch):
    """DAgger's last step (``select_episodes``): the rounds train bit for bit as without
    it, each round's actor is scored by its team return on the selection episodes (keys
    from the seed's own stream: a plain rollout of the actor gives the same), and the
    actor returned is the best-scored round's, with that round's best validation loss. The
    scores are the real ones, less 10 for every round after the first, so that the choice
    (round 0, not the last) is known."""
    env, actor, cfg, plain, _ = two_rounds
    real, scored = pretrain._team_return, []

    def later_rounds_worse(env, cfg):
        score = real(env, cfg)

        def penalised(a):
            scored.append((a, score(a)))
            return scored[-1][1] - 10.0 * (len(scored) - 1)
        return penalised

    monkeypatch.setattr(pretrain, "_team_return", later_rounds_worse)
    picked = imitate(env, actor, lloyd_clairvoyant, dataclasses.replace(cfg, select_episodes=6))
    assert picked.curve == plain.curve and picked.losses == plain.losses
    assert plain.team_returns == ()
    assert picked.team_returns == (scored[0][1], scored[1][1] - 10.0)
    assert picked.actor is scored[0][0]
    # round 0's best validation loss (its starting actor's where no measurement beat it)
    assert picked.val_loss <= min(p["val_loss"] for p in plain.curve if p["round"] == 0)
    assert picked.val_loss != plain.val_loss

    def same(x, y):
        return all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(
            jax.tree.leaves(eqx.filter(x, eqx.is_inexact_array)),
            jax.tree.leaves(eqx.filter(y, eqx.is_inexact_array)), strict=True))

    assert same(scored[1][0], plain.actor) and not same(picked.actor, plain.actor)
    keys = jax.random.split(jax.random.fold_in(jax.random.key(cfg.seed), SELECT_STREAM), 6)
    rollouts = jax.jit(make_population_rollouts(env, True))
    for a, team_return in scored:
        ret, _ = rollouts(a, selector_theta(a)[None], keys)
        assert float(ret.mean()) == pytest.approx(team_return, rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match="select_episodes"):
        PretrainConfig(select_episodes=-1)


class Stop(Exception):
    """Stands for whatever ends a run (Ctrl-C, a killed job) as round 1 begins."""


def stop_at_round_1(point):
    if point.get("round") == 1 and "collected" in point:
        raise Stop


def same_actor(x, y):
    return all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(
        jax.tree.leaves(eqx.filter(x, eqx.is_inexact_array)),
        jax.tree.leaves(eqx.filter(y, eqx.is_inexact_array)), strict=True))


def test_a_stopped_imitation_resumes_after_its_rounds_as_if_never_stopped(two_rounds,
                                                                          tmp_path):
    """``rounds_file``: a run stopped as round 1 begins leaves round 0 in the file; the
    next call begins at round 1 (the progress told so) and ends where the unstopped run
    ends, bit for bit: the same actor, losses, curve and validation loss. From a complete
    file nothing is trained again. A file of another config, of other inputs, or not a
    rounds file at all is refused naming the difference."""
    env, actor, cfg, plain, _ = two_rounds
    path, inputs = tmp_path / "bc.rounds.safetensors", {"env": "Coverage", "agents": 3}
    with pytest.raises(Stop):
        imitate(env, actor, lloyd_clairvoyant, cfg, stop_at_round_1, path, inputs)
    assert read_metadata(path)["done"] == 1
    seen: list = []
    resumed = imitate(env, actor, lloyd_clairvoyant, cfg, seen.append, path, inputs)
    assert seen[:2] == [{"round": 1, "resumed": 20}, {"round": 1, "collected": 144}]
    assert (resumed.losses, resumed.curve, resumed.val_loss) == (
        plain.losses, plain.curve, plain.val_loss)
    assert same_actor(resumed.actor, plain.actor) and read_metadata(path)["done"] == 2
    assert (plain.resumed, resumed.resumed) == (0, 1)
    with compilations() as compiled:
        again = imitate(env, actor, lloyd_clairvoyant, cfg, None, path, inputs)
    assert compiled["jit(train)"] == 0 and again.losses == plain.losses
    assert same_actor(again.actor, plain.actor)
    with pytest.raises(CheckpointError, match=r"pretrain.steps_per_round: checkpoint has "
                                              r"20, expected 40.*remove"):
        imitate(env, actor, lloyd_clairvoyant, dataclasses.replace(cfg, steps_per_round=40),
                None, path, inputs)
    with pytest.raises(CheckpointError, match=r"inputs\.agents: checkpoint has 3, expected 4"):
        imitate(env, actor, lloyd_clairvoyant, cfg, None, path, {**inputs, "agents": 4})
    other = save_pretrained(tmp_path / "bc.safetensors", actor, {})
    with pytest.raises(CheckpointError, match="not an imitation's rounds file"):
        imitate(env, actor, lloyd_clairvoyant, cfg, None, other, inputs)
    cut = tmp_path / "cut.safetensors"  # a truncated write
    cut.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"truncated.*remove .*cut\.safetensors"):
        imitate(env, actor, lloyd_clairvoyant, cfg, None, cut, inputs)
    for done in (0, 3, "1", True):  # a hand-made file's count of rounds
        forged = checkpoint.save(tmp_path / "forged.safetensors", {"x": np.zeros(2)},
                                 {"kind": "imitation_rounds", "done": done})
        with pytest.raises(CheckpointError, match="completed rounds: expected 1 to 2"):
            imitate(env, actor, lloyd_clairvoyant, cfg, None, forged, inputs)


@pytest.mark.heavy
def test_a_stopped_imitation_resumes_its_choice_and_final_fit(two_rounds, tmp_path):
    """With ``select_episodes`` and a final fit: the round chosen so far is kept in the
    file, and the resumed run returns what an unstopped one returns."""
    env, actor, cfg, *_ = two_rounds
    cfg = dataclasses.replace(cfg, select_episodes=2, final_steps=20)
    whole = imitate(env, actor, lloyd_clairvoyant, cfg)
    path = tmp_path / "bc.rounds.safetensors"
    with pytest.raises(Stop):
        imitate(env, actor, lloyd_clairvoyant, cfg, stop_at_round_1, path)
    resumed = imitate(env, actor, lloyd_clairvoyant, cfg, None, path)
    assert (resumed.losses, resumed.curve, resumed.val_loss, resumed.team_returns) == (
        whole.losses, whole.curve, whole.val_loss, whole.team_returns)
    assert same_actor(resumed.actor, whole.actor)


class Unmoved(Coverage):
    """Coverage whose every symmetry leaves a state where it is."""

    def transform(self, state, g):
        return state


@pytest.mark.heavy
def test_augment_trains_on_moved_states_and_otherwise_as_without(two_rounds):
    """``augment``: each training sample is its gathered state moved by a random symmetry,
    observed and labelled anew. Oracles: the kept states are the ones observed (each
    re-observes and re-labels to its sample exactly); a moved sample's label is the moved
    expert action (clairvoyant Lloyd is equivariant), so obs and label move together;
    with symmetries that leave every state where it is the run is the plain one (another
    program, so to float tolerance: the same indices drawn, the same samples); with the
    square's it is not, and one train program still serves every round. An env without
    symmetries is refused."""
    from envs.coverage_symmetry import transform_vectors
    from envs.rover import Rover

    env, actor, cfg, plain, _ = two_rounds
    data = pretrain._episodes(env, lloyd_clairvoyant, actor, jax.random.key(5), 2, 0.5,
                              keep_state=True)
    label_of = pretrain.labeller(env, lloyd_clairvoyant)
    for i in (0, 7, 13, 23):
        sample = jax.tree.map(lambda x, i=i: x[i], data)
        same = pretrain._moved(env, label_of, sample, 0, jax.random.key(0))
        for k in ("obs", "adj"):
            for a, b in zip(jax.tree.leaves(same[k]), jax.tree.leaves(sample[k]), strict=True):
                np.testing.assert_array_equal(a, b)
        # the label: Lloyd's float sums, here outside the gathering's compiled scan
        np.testing.assert_allclose(same["label"], sample["label"], rtol=1e-6, atol=1e-7)
        for g in (1, 6):
            moved = pretrain._moved(env, label_of, sample, g, jax.random.key(0))
            np.testing.assert_allclose(moved["label"], transform_vectors(sample["label"], g),
                                       rtol=1e-5, atol=1e-5)
            assert not np.allclose(moved["obs"]["vec"], sample["obs"]["vec"])
    aug = dataclasses.replace(cfg, augment=True)
    unmoved = Unmoved(num_agents=3, max_steps=12, grid_size=16, map_size=8, num_features=3)
    still = imitate(unmoved, actor, lloyd_clairvoyant, aug)
    np.testing.assert_allclose(still.losses, plain.losses, rtol=1e-4)
    with compilations() as compiled:
        moved = imitate(env, actor, lloyd_clairvoyant, aug)
    assert (compiled["jit(train)"], compiled["jit(validate)"]) == (1, 1), compiled
    assert np.all(np.isfinite(moved.losses)) and len(moved.losses) == len(plain.losses)
    assert not np.allclose(moved.losses, plain.losses, rtol=1e-3)
    rover = Rover(num_agents=2, num_pois=2, coupling=1)
    with pytest.raises(ValueError, match="symmetries"):
        imitate(rover, FeudalActor.from_env(jax.random.key(0), rover, dataclasses.replace(
            ACTOR, fixed_option=0)), lambda k, e, s: None, dataclasses.replace(
                aug, option=0))
    with pytest.raises(TypeError, match="augment"):
        PretrainConfig(augment=1)


def test_the_final_fit_decays_its_rate_by_cosine_from_lr_to_a_hundredth():
    """A constant gradient makes each Adam update the learning rate itself (up to eps):
    the final optimizer's updates follow lr * (d + (1 - d) (1 + cos(pi t / T)) / 2)."""
    import jax.numpy as jnp

    cfg = PretrainConfig(lr=2e-3, steps_per_round=10, evals_per_round=1, final_steps=50)
    tx = cfg.final_optimizer()
    x = jnp.zeros(3)
    state = tx.init(x)
    for t in range(cfg.final_steps):
        update, state = tx.update(jnp.ones(3), state, x)
        want = cfg.lr * (0.01 + 0.99 * (1 + np.cos(np.pi * t / 50)) / 2)
        np.testing.assert_allclose(np.asarray(update), -want, rtol=1e-4)
    with pytest.raises(ValueError, match="final_steps=15 must be a multiple of the 10"):
        PretrainConfig(steps_per_round=10, evals_per_round=1, final_steps=15)


@pytest.mark.heavy
def test_the_loss_fits_the_action_before_the_clip_unless_told_otherwise():
    """An executor whose mean overshoots the action bounds everywhere: fit on the
    clipped action (``clip_loss``), every gradient is zero and no leaf moves; fit on the
    action before the clip (the default), the loss falls."""
    env = Coverage(num_agents=3, max_steps=12, grid_size=16, map_size=8, num_features=3)
    actor = FeudalActor.from_env(jax.random.key(0), env, ACTOR)
    last = actor.executor.head.mean.layers[-1]
    actor = eqx.tree_at(lambda a: a.executor.head.mean.layers[-1].bias, actor,
                        last.bias + 3.0)  # every mean coordinate beyond the bound 1
    cfg = PretrainConfig(option=COVER, episodes=2, val_episodes=1, rounds=1,
                         steps_per_round=40, evals_per_round=1, lr=0.05)
    stuck = imitate(env, actor, lloyd_clairvoyant, dataclasses.replace(cfg, clip_loss=True))
    leaves = lambda a: jax.tree.leaves(eqx.filter(a, eqx.is_inexact_array))
    for x, y in zip(leaves(stuck.actor), leaves(actor), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    fits = imitate(env, actor, lloyd_clairvoyant, cfg)
    assert fits.losses[-1] < 0.5 * fits.losses[0]


def test_pretrain_command_reads_a_recipe_and_writes_the_curve_beside_the_actor(
        tmp_path, capsys):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"expert": "lloyd_clairvoyant", "option": COVER,
                                  "episodes": 2, "val_episodes": 1, "rounds": 2,
                                  "steps_per_round": 4, "evals_per_round": 2,
                                  "lr_schedule": "cosine", "weight_decay": 1e-3}))
    out = tmp_path / "bc.safetensors"
    argv = ["pretrain", "--env", "feudal_es/Coverage-v0", "--recipe", str(recipe),
            "--steps", "6", "--final-steps", "3", "--eval-episodes", "2", "--no-progress",
            "--out", str(out),
            "--set", "env_kwargs.num_agents=2", "--set", "env_kwargs.max_steps=4",
            "--set", "env_kwargs.grid_size=8", "--set", "env_kwargs.map_size=4",
            *[f"--set=actor.{k}={json.dumps(v)}" for k, v in SMALL_ACTOR.items()]]
    assert cli.main(argv) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    csv_path, png_path = curve_paths(out)
    assert csv_path == tmp_path / "bc.curve.csv" and png_path.is_file()
    rows = csv_path.read_text().splitlines()
    # --steps 6 over the recipe's 4: two measurements of 3 steps a round, two rounds, and
    # the final fit's one
    assert rows[0] == "round,step,train_loss,val_loss" and len(rows) == 1 + 5
    assert [r.split(",")[:2] for r in rows[1:]] == [["0", "3"], ["0", "6"], ["1", "9"],
                                                    ["1", "12"], ["2", "15"]]
    meta = read_metadata(out)
    assert meta["pretrain"]["lr_schedule"] == "cosine" and meta["pretrain"]["option"] == COVER
    assert meta["pretrain"]["final_steps"] == 3 and "final fit of 3 steps" in text
    assert meta["steps"] == 15 and "validation loss" in text and str(csv_path) in text
    assert f"a stopped run resumes after them with --out {out}" in text
    assert not (tmp_path / "bc.rounds.safetensors").exists()  # removed once the actor is

    recipe.write_text(json.dumps({"epochs": 3}))
    assert cli.main(argv) == 2
    assert "PretrainConfig has no field(s) ['epochs']" in capsys.readouterr().err


@pytest.mark.heavy
def test_pretrain_command_stopped_by_ctrl_c_resumes_to_the_same_actor(tmp_path, capsys,
                                                                      monkeypatch):
    """Ctrl-C as round 1 begins (exit 130) leaves the rounds file beside the actor's path;
    the same command again says it resumes and writes the actor, bit for bit, and the
    curve an unstopped command writes, then removes the rounds file."""
    from safetensors.numpy import load_file

    from feudal_es.pretrain_curve import ImitationProgress

    def argv(out):
        return ["pretrain", "--env", "feudal_es/Coverage-v0", "--expert", "lloyd_clairvoyant",
                "--option", "cover", "--rounds", "2", "--episodes", "2", "--steps", "6",
                "--eval-episodes", "2", "--no-progress", "--out", str(out),
                "--set", "env_kwargs.num_agents=2", "--set", "env_kwargs.max_steps=4",
                "--set", "env_kwargs.grid_size=8", "--set", "env_kwargs.map_size=4",
                *[f"--set=actor.{k}={json.dumps(v)}" for k, v in SMALL_ACTOR.items()]]

    class CtrlC(ImitationProgress):
        def __call__(self, point):
            if point.get("round") == 1 and "collected" in point:
                raise KeyboardInterrupt
            super().__call__(point)

    whole, out = tmp_path / "whole.safetensors", tmp_path / "bc.safetensors"
    assert cli.main(argv(whole)) == 0, capsys.readouterr().err
    with monkeypatch.context() as m:
        m.setattr(pretrain, "ImitationProgress", CtrlC)
        assert cli.main(argv(out)) == 130
    assert not out.exists() and read_metadata(tmp_path / "bc.rounds.safetensors")["done"] == 1
    capsys.readouterr()
    assert cli.main(argv(out)) == 0, capsys.readouterr().err
    assert "found, resuming after them" in capsys.readouterr().out
    stored, fresh = load_file(out), load_file(whole)
    assert stored.keys() == fresh.keys()
    for name, array in fresh.items():
        np.testing.assert_array_equal(stored[name], array, err_msg=name)
    assert curve_paths(out)[0].read_text() == curve_paths(whole)[0].read_text()
    assert not (tmp_path / "bc.rounds.safetensors").exists()


def test_the_progress_bar_counts_each_chunk_and_ends_full_after_early_stops():
    from feudal_es.pretrain_curve import ImitationProgress

    bar = ImitationProgress(PretrainConfig(rounds=2, steps_per_round=10, evals_per_round=2), True)
    bar({"round": 0, "collected": 5})
    bar({"round": 0, "step": 5, "train_loss": 0.1, "val_loss": 0.2})  # round 0 stops early
    bar({"round": 1, "collected": 10})
    assert bar.bar.n == 10  # round 1 begins at its own first step
    bar({"round": 1, "step": 10, "train_loss": 0.1, "val_loss": 0.2})
    assert bar.bar.n == 15
    bar.finish()
    assert bar.bar.n == bar.bar.total == 20
    bar.close()
    resumed = ImitationProgress(PretrainConfig(rounds=3, steps_per_round=10,
                                               evals_per_round=2), True)
    resumed({"round": 2, "resumed": 20})  # rounds 0 and 1 from a rounds file
    resumed({"round": 2, "collected": 5})
    assert resumed.bar.n == resumed.bar.initial == 20  # (the ETA: from this run's steps)
    resumed.close()
    fit = ImitationProgress(PretrainConfig(rounds=1, steps_per_round=10, evals_per_round=2,
                                           final_steps=30), True)
    fit({"round": 1, "collected": 5})  # the final fit (round 0 stopped before any step)
    assert fit.bar.n == 10 and fit.bar.desc.startswith("final fit") and fit.bar.total == 40
    fit.close()
