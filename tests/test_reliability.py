"""Reliability oracles (issue 8): bad input is refused naming the cause before compute is
spent; env faults on the host path fail one population member (worst fitness, logged) and
the generation completes; a hanging env is cut off by ``episode_timeout``; a non-finite
MAPPO update is skipped and training continues from the last good state; every member
non-finite stops the run without writing; SIGINT/SIGTERM finish the round, checkpoint and
stop; crafted files never execute code; the same seed gives bit-identical runs.

JAX-path tests use the shared TINY config (``helpers``), so they share its compiled
functions; host-path tests use ``line_envs.FaultyLine``, a 3-agent PettingZoo env whose
faults are scheduled by a :class:`line_envs.Plan` (fault on the k-th episode started once
the plan is armed).
Kill-at-random-points and the 500-generation run live in ``test_faults_slow.py``.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import math
import os
import pickle
import signal
import time

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    HOST,
    TINY,
    assert_trees_equal,
    host_trainer,
    metrics_rows,
    read_st,
    stable,
    write_st,
)
from line_envs import FaultyLine, Plan

from feudal_es import _ckpt_reader, _ckpt_writer, checkpoint, cli, cli_train, es, mappo
from feudal_es.config import NESTED_CONFIGS
from feudal_es.host import EnvOutputError
from feudal_es.recorder import step_metrics
from feudal_es.theta import selector_theta
from feudal_es.trainer import (
    ESTrainer,
    ResolvedEnv,
    TrainerConfig,
    TrainingInterrupted,
    chain_key,
    resolve_env,
)


# ======================================================================= 1. bad input
def _bad_values(default):
    """Values of the wrong type and out of range for a field with this default."""
    if isinstance(default, bool):
        return ["yes", 1]
    if isinstance(default, int):
        return ["3", 2.5, None, -1]
    if isinstance(default, float):
        return ["x", None, float("nan"), float("inf"), -1.0]
    if isinstance(default, str):
        return [123, "no_such_choice"]
    if isinstance(default, tuple):
        return ["abc", 7, (0,), (1.5,)]
    if isinstance(default, dict):
        return ["x", [1]]
    raise AssertionError(default)


def _fields(cls):
    for f in dataclasses.fields(cls):
        yield f.name, f.default if f.default is not dataclasses.MISSING else f.default_factory()


# every value _bad_values proposes that is in fact legal (so the test still checks the rest)
_LEGAL = {("TrainerConfig", "env", "'no_such_choice'"),  # any string; resolve_env refuses it
          ("ActorConfig", "log_std_init", "-1.0"),
          ("TrainerConfig", "seeds", "(0,)"),  # one seed, listed
          ("TrainerConfig", "init_from", "'no_such_choice'"),  # a path: checked when loaded
          ("TrainerConfig", "team", "'no_such_choice'")}  # a group: checked with the env


def test_every_config_field_refuses_wrong_type_and_range_naming_it():
    checked = 0
    cases = [("TrainerConfig", n, d, lambda n, v: {n: v}) for n, d in _fields(TrainerConfig)
             if n not in NESTED_CONFIGS]
    for nested, cls in NESTED_CONFIGS.items():
        cases += [(cls.__name__, n, d, lambda n, v, nested=nested: {nested: {n: v}})
                  for n, d in _fields(cls)]
    for cls_name, name, default, wrap in cases:
        for value in _bad_values(default):
            if (cls_name, name, repr(value)) in _LEGAL:
                continue
            with pytest.raises((TypeError, ValueError)) as err:
                TrainerConfig(**wrap(name, value))
            assert name in str(err.value), (cls_name, name, value, str(err.value))
            checked += 1
    assert checked > 150  # every field of five config classes, several values each
    with pytest.raises(ValueError, match=r"did you mean \['episode_timeout'"):
        TrainerConfig.from_dict({"episode_timeut": 1.0})


def test_selector_period_is_the_actors_and_its_old_spelling_still_lands_there():
    """``selector_period`` moved from ``mappo`` to ``actor``: the older spelling (a config
    dict, a JSON config, ``--set mappo.selector_period=K``) lands in
    ``actor.selector_period``; both spellings with different values are refused naming
    both."""
    old = [TrainerConfig(mappo=dict(num_envs=2, selector_period=3)),
           TrainerConfig.from_dict({"mappo": {"num_envs": 2, "selector_period": 3}}),
           TrainerConfig.from_dict({"mappo": {"selector_period": 3},
                                    "actor": {"selector_period": 3}}),  # agreeing: fine
           TrainerConfig().override({"mappo.selector_period": 3})]
    args = cli.build_parser().parse_args(["train", "--set", "mappo.selector_period=3"])
    old.append(cli_train.train_config(args))  # what `feudal-es train --set ...` trains
    for cfg in old:
        assert cfg.actor.selector_period == 3
        assert "selector_period" not in cfg.to_dict()["mappo"]
        assert TrainerConfig.from_dict(cfg.to_dict()) == cfg  # config.json round trip
    assert old[0].mappo.num_envs == 2 and old[0] == TrainerConfig(
        mappo=dict(num_envs=2), actor=dict(selector_period=3))
    for bad in (lambda: TrainerConfig(mappo=dict(selector_period=3),
                                      actor=dict(selector_period=5)),
                lambda: TrainerConfig.from_dict({"mappo": {"selector_period": 3},
                                                 "actor": {"selector_period": 5}})):
        with pytest.raises(ValueError, match=r"mappo\.selector_period=3 and "
                                             r"actor\.selector_period=5 disagree"):
            bad()


def test_unknown_env_ids_are_refused_with_suggestions():
    with pytest.raises(ValueError, match=r"did you mean \['feudal_es/Dispersion-v0'"):
        resolve_env("feudal_es/Dispersoin-v0")
    with pytest.raises(ValueError, match="cannot import module 'no_such_module'"):
        resolve_env("no_such_module:make")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        resolve_env("test_reliability:nope")


@pytest.mark.parametrize("obs, act, match", [
    (gym.spaces.Discrete(3), None, "observation space Discrete"),
    (gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,)),)), None, "observation space Tuple"),
    (gym.spaces.Dict({"x": gym.spaces.Discrete(2)}), None, "observation space entry 'x'"),
    (gym.spaces.Box(-1, 1, (1, 2, 3, 4), np.float32), None, "rank 1"),
    (None, gym.spaces.MultiDiscrete([2, 3]), "unsupported action space MultiDiscrete"),
    (None, gym.spaces.Box(-1, 1, (2,), np.int64), "must be floating point"),
    (None, gym.spaces.Discrete(3, start=1), "starts at 1"),
])
def test_spaces_the_actor_cannot_handle_are_refused(tmp_path, obs, act, match):
    class Spaces(FaultyLine):
        def observation_space(self, agent):
            return obs or super().observation_space(agent)

        def action_space(self, agent):
            return act or super().action_space(agent)

    resolved = ResolvedEnv("tests/Spaces", "host", make=lambda **kw: Spaces(**kw))
    with pytest.raises(ValueError, match=match):
        ESTrainer(HOST, tmp_path, resolved=resolved)


@pytest.mark.parametrize("bad, match", [
    ("reset_not_tuple", r"reset\(\) must return \(observations, infos\)"),
    ("four_tuple", r"step\(\) must return \(observations, rewards, terminations"),
    ("nondict", r"rewards must be a dict keyed by agent, got list"),
    ("missing_agent", r"rewards miss agent\(s\) \['a1'\] that were given actions"),
    ("unknown_agent", r"rewards name agent\(s\) \['ghost'\] that are not in possible_agents"),
    ("obs_shape", r"observation of 'a2' is float32\[3\]; the observation space says float32"),
    ("reward_str", r"reward of 'a0' must be a number"),
])
def test_malformed_custom_env_is_refused_before_any_compute(tmp_path, bad, match, monkeypatch):
    built = []
    monkeypatch.setattr("feudal_es.runtime.FeudalActor.__init__",
                        lambda *a, **k: built.append(1) or pytest.fail("actor was built"))
    with pytest.raises(EnvOutputError, match=match):
        host_trainer(tmp_path, bad=bad)
    assert not built and not (tmp_path / "metrics.jsonl").exists()


def _tiny_checkpoint(tmp_path_factory) -> tuple[ESTrainer, object]:
    t = ESTrainer(dataclasses.replace(TINY, mode="es-selector", plot_every=100),
                  tmp_path_factory.mktemp("ckpt") / "run")
    t.run(rounds=1)
    return t, checkpoint.CheckpointManager(t.run_dir).latest()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return _tiny_checkpoint(tmp_path_factory)


def test_checkpoint_of_another_env_or_version_is_refused(tiny_run, tmp_path, monkeypatch):
    t, ckpt = tiny_run
    other = t.checkpoint_expect()
    other["config"]["env_kwargs"] = {**other["config"]["env_kwargs"], "num_agents": 4}
    with pytest.raises(checkpoint.CheckpointError, match=r"env_kwargs\.num_agents: checkpoint "
                                                         r"has 3, expected 4"):
        checkpoint.load(ckpt, t.checkpoint_tree(), expect=other)
    monkeypatch.setattr(_ckpt_reader, "FORMAT_VERSION", 3)  # a reader of a future version
    with pytest.raises(checkpoint.CheckpointError, match="format version 2; this feudal-es "
                                                         "reads format version 3"):
        ESTrainer.resume(t.run_dir)


def test_truncated_latest_checkpoint_is_reported_not_skipped(tiny_run, tmp_path):
    _, ckpt = tiny_run
    run = tmp_path / "run"
    run.mkdir()
    (run / "ckpt_00000001.safetensors").write_bytes(ckpt.read_bytes())
    (run / "ckpt_00000002.safetensors").write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size
                                                                      // 2])
    with pytest.raises(checkpoint.CheckpointError,
                       match=r"ckpt_00000002\.safetensors is corrupted .*\(truncated\?\).*"
                             r"older checkpoints in this run: ckpt_00000001\.safetensors"):
        ESTrainer.resume(run)


class _Payload:
    """Unpickling this creates ``marker`` (a stand-in for arbitrary code)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_crafted_checkpoint_and_selector_do_not_run_code(tiny_run, tmp_path, capsys):
    """A real run whose checkpoint declares a tensor of Python objects (the one way a
    pickle could ride in a safetensors file), a checkpoint and a selector file that are
    pickles: resume, eval and render refuse them naming the file; the payload never runs
    (and it is live: unpickling it runs it)."""
    t, ckpt = tiny_run
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(marker))
    header, body = read_st(ckpt)
    victim = next(k for k in header if k != "__metadata__")
    header[victim]["dtype"] = "O"
    run = tmp_path / "run"
    run.mkdir()
    write_st(run / ckpt.name, header, body)
    pickled_run = tmp_path / "pickled"
    pickled_run.mkdir()
    (pickled_run / ckpt.name).write_bytes(payload)
    sel = tmp_path / "sel.safetensors"
    sel.write_bytes(payload)
    with pytest.raises(checkpoint.CheckpointError, match="is corrupted"):
        ESTrainer.resume(run)
    for argv in (["eval", str(run)], ["eval", str(pickled_run)],
                 ["train", "--resume", str(pickled_run)],
                 ["eval", str(t.run_dir), "--selector", str(sel)],
                 ["render", str(t.run_dir), "--selector", str(sel), "--out",
                  str(tmp_path / "x.gif")]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert ckpt.name in err or sel.name in err, err
        assert "Traceback" not in err
    assert not marker.exists()
    pickle.loads(payload)  # the payload is live
    assert marker.exists()


def test_selector_file_of_wrong_length_is_refused(tiny_run, tmp_path, capsys):
    t, _ = tiny_run
    size = t.selector_size
    short = checkpoint.save_selector(tmp_path / "short.safetensors", np.zeros(size - 1, np.float32))
    assert cli.main(["eval", str(t.run_dir), "--selector", str(short)]) == 2
    err = capsys.readouterr().err
    assert f"holds {size - 1} parameters; the actor's selector has {size}" in err


def test_fresh_run_refuses_a_directory_holding_a_run(tiny_run):
    t, _ = tiny_run
    with pytest.raises(ValueError, match=r"already holds a run .*--resume"):
        ESTrainer(dataclasses.replace(TINY, mode="es-selector"), t.run_dir).run(rounds=1)
    assert len(metrics_rows(t.run_dir)) == 1  # untouched


# ================================================================ 3. env faults (host)
def _generation_oracle(t: ESTrainer, clean: ESTrainer, failed: set[int]):
    """Round 0's ES state, computed by hand: the trainer's ask on the round key, the clean
    trainer's per-member ``eval_fn`` as fitness, NaN for the failed members, then tell."""
    _, key_round = jax.random.split(chain_key(t.keys.es, 0))
    state = t.es_state._replace(mean=selector_theta(t.ts.actor))
    population, noise = es.ask_jit(key_round, state, t.config.es)
    fitness = np.array([np.nan if p in failed else clean.eval_fn(population[p])
                        for p in range(population.shape[0])], np.float32)
    return es.tell_jit(state, noise, jnp.asarray(fitness), t.config.es)


@pytest.mark.parametrize("kind", ["raise", "missing_agent"])
def test_env_fault_fails_one_member_and_the_generation_completes(tmp_path, caplog, kind):
    """Episode #2 (member 1's first episode) breaks at step 3: member 1 ranks last, the
    others keep their exact fitness, the ES update is the hand-computed one, the failure
    is logged (with the exception) and counted."""
    plan = Plan({2: (kind, 3)})
    t = host_trainer(tmp_path / "faulty", plan)
    clean = host_trainer(tmp_path / "clean")
    want, want_info = _generation_oracle(t, clean, failed={1})
    plan.armed = True
    with caplog.at_level(logging.WARNING, logger="feudal_es"):
        t.run(rounds=1)
    assert_trees_equal(t.es_state, want)
    row = t.history[0]
    assert row["num_invalid"] == 1 and row["failed_members"] == 1
    assert row["fitness_best"] == pytest.approx(float(want_info["best_fitness"]), abs=0)
    error = ("RuntimeError: injected fault in episode #2" if kind == "raise" else
             "EnvOutputError: FaultyLine.step() rewards miss agent(s) ['a1']")
    (failure,) = [json.loads(x) for x in (t.run_dir / "env_failures.jsonl").read_text()
                  .splitlines()]
    assert failure["member"] == 1 and failure["episode"] == 0 and failure["round"] == 0
    assert failure["error"].startswith(error)
    assert failure["where"].split(":")[0].endswith(
        "line_envs.py" if kind == "raise" else "host.py")
    assert f"population member 1 failed in episode 0 (env seed {failure['env_seed']}) and " \
           f"ranks last: {error}" in caplog.text


@pytest.mark.parametrize("kind", ["sleep", "spin"])
def test_hanging_env_is_cut_off_by_episode_timeout(tmp_path, kind):
    """A step that sleeps for a minute or spins forever: with ``episode_timeout=0.5`` the
    member fails with EnvTimeout and the round ends in seconds."""
    plan = Plan({5: (kind, 2)})  # member 2's second episode (compilation is not timed)
    t = host_trainer(tmp_path, plan, dataclasses.replace(HOST, episode_timeout=0.5))
    alarm, outer = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)[0]
    plan.armed = True
    t0 = time.monotonic()
    t.run(rounds=1)
    assert time.monotonic() - t0 < 10
    (failure,) = [json.loads(x) for x in (tmp_path / "env_failures.jsonl").read_text()
                  .splitlines()]
    assert failure["member"] == 2 and failure["episode"] == 1
    assert failure["error"] == ("EnvTimeout: an evaluation episode of FaultyLine spent more "
                                "than 0.5 s in env calls (episode_timeout)")
    assert t.history[0]["failed_members"] == 1 and t.history[0]["num_invalid"] == 1
    assert signal.getsignal(signal.SIGALRM) is alarm  # the caller's handler is back ...
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (outer > 0)  # ... and its timer


def test_every_member_failing_stops_without_writing(tmp_path):
    plan = Plan({k: ("raise", 1) for k in range(100)})
    t = host_trainer(tmp_path, plan)
    before = t.ts
    plan.armed = True
    with pytest.raises(FloatingPointError, match=r"round 0: ES generation: all 4 candidates "
                       r"failed.*RuntimeError: injected fault in episode #0.*no checkpoint"):
        t.run(rounds=1)
    assert t.round == 0 and t.history == [] and metrics_rows(tmp_path) == []
    assert checkpoint.CheckpointManager(tmp_path).latest() is None
    assert_trees_equal(t.ts, before)


def test_malformed_step_during_collection_is_a_clear_error(tmp_path):
    plan = Plan({0: ("nondict", 2)})
    t = host_trainer(tmp_path, plan, dataclasses.replace(HOST, mode="merl"))
    plan.armed = True  # the collector's copies reset when their episode ends: #0 is one
    t.runtime.collector.restart(0)
    with pytest.raises(EnvOutputError, match="rewards must be a dict keyed by agent, got list"):
        t.run(rounds=1)
    assert t.round == 0 and checkpoint.CheckpointManager(tmp_path).latest() is None


# ============================================================= 2. numerical faults
def _poison(tree):
    return jax.tree.map(lambda x: x * jnp.nan if eqx.is_inexact_array(x) else x, tree)


@pytest.mark.heavy
def test_nonfinite_mappo_update_is_skipped_and_training_continues(tmp_path, caplog):
    """Round 1's update blows up (NaN parameters and loss): it is skipped and reported, and
    the run equals a hand-made loop that drops exactly that update (its rollout state,
    key and step counter kept) and otherwise runs MAPPO then the ES generation."""
    t = ESTrainer(TINY, tmp_path / "run")
    real, calls = t.runtime.train_step, []

    def blow_up_second(ts):
        out, metrics = real(ts)
        calls.append(1)
        if len(calls) == 2:
            out, metrics = out._replace(actor=_poison(out.actor)), {**metrics,
                                                                    "policy_loss": jnp.nan}
        return out, metrics

    # the trainer's step is the step plus its guard; the injected blow-up goes between
    # (TINY takes one step a round: one call of the guarded step, no round_steps program)
    t.runtime.guarded_step = mappo.guarded(blow_up_second, eqx.filter_jit(mappo.keep_finite))
    assert t.runtime.round_steps is None
    t.fns = t.round_fns()  # the round's functions, chosen again over the patched runtime
    ts, state = t.ts, t.es_state
    with caplog.at_level(logging.WARNING, logger="feudal_es.trainer"):
        t.run()
    for r in range(TINY.n_outer):  # the oracle
        new, _ = real(ts)
        if r == 1:
            new = new._replace(**mappo.learned(ts)._asdict(), update_step=ts.update_step)
        ts = new
        state = state._replace(mean=selector_theta(ts.actor))
        state, _ = t.runtime.generation(jax.random.split(chain_key(t.keys.es, r))[1], state,
                                        ts.actor, t.round_eval_key(r))
        ts = t.fns.sync_out(ts, state.mean)
    assert_trees_equal(t.ts, ts)
    assert_trees_equal(t.es_state, state)
    assert [h["mappo/skipped_updates"] for h in t.history] == [0, 1, 0]
    assert t.history[1]["mappo/policy_loss"] is None and int(t.ts.update_step) == 2
    assert "round 1: MAPPO update skipped: non-finite policy_loss" in caplog.text
    assert bool(jnp.all(jnp.isfinite(jax.flatten_util.ravel_pytree(
        eqx.filter(t.ts.actor, eqx.is_inexact_array))[0])))


def test_nan_critic_update_is_detected_without_a_simulated_loss(tmp_path):
    """A genuinely broken learner (NaN critic weights -> NaN values, advantages, losses):
    the step is skipped, the learner is left as it was, the rollout moves on."""
    t = ESTrainer(TINY, tmp_path / "run")
    ts = t.ts._replace(critic=_poison(t.ts.critic))
    out, aux = t.fns.step(ts)  # the trainer's gradient step (MAPPO + its guard)
    # on device until the round's gradient steps are done (merl_round fetches them once)
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(aux))
    (metrics,) = step_metrics(jax.device_get([aux]), None, 0.0)  # the round row's input
    assert metrics["skipped_updates"] == 1.0 and math.isnan(metrics["value_loss"])
    assert_trees_equal(mappo.learned(out), mappo.learned(ts))
    assert int(out.update_step) == int(ts.update_step)
    assert int(out.env_steps) == int(ts.env_steps) + t.config.mappo.batch_size


def test_every_member_nan_on_the_jax_path_stops_before_writing(tmp_path):
    from agents import executor_filter

    t = ESTrainer(dataclasses.replace(TINY, mode="es-selector"), tmp_path / "run")
    t.run(rounds=1)
    params, rest = eqx.partition(t.ts.actor, executor_filter(t.ts.actor))
    t.ts = t.ts._replace(actor=eqx.combine(_poison(params), rest))  # NaN actions everywhere
    before = (t.ts, t.es_state)
    with pytest.raises(FloatingPointError, match=r"^round 1: every candidate returned "
                       r"non-finite fitness\. The run stopped without writing this round; "
                       r"the last checkpoint is .*ckpt_00000001\.safetensors$"):
        t.run(rounds=1)
    assert t.round == 1 and len(metrics_rows(t.run_dir)) == 1
    assert_trees_equal((t.ts, t.es_state), before)
    assert checkpoint.CheckpointManager(t.run_dir).latest().name == "ckpt_00000001.safetensors"
    tree, _ = checkpoint.load(checkpoint.CheckpointManager(t.run_dir).latest(), t.checkpoint_tree())
    flat = jax.flatten_util.ravel_pytree(eqx.filter(tree["train_state"].actor,
                                                    eqx.is_inexact_array))[0]
    assert bool(jnp.all(jnp.isfinite(flat)))


# ================================================================ 4. process signals
ES_RUN = dataclasses.replace(TINY, mode="es-selector", n_outer=4, checkpoint_every=100,
                             plot_every=100)


def _signal_in_round(t: ESTrainer, round_: int, *signums: int) -> None:
    """Make the trainer send itself ``signums`` in round ``round_``, as its ES half starts
    (the learner injected into the ES mean: ``ES_RUN``'s frozen executor takes no gradient
    steps)."""
    real, calls = t.fns.sync_in, []

    def sync_in(ts, theta):
        calls.append(1)
        if len(calls) == round_ + 1:
            for s in signums:
                os.kill(os.getpid(), s)
        return real(ts, theta)

    t.fns = dataclasses.replace(t.fns, sync_in=sync_in)


@pytest.fixture(scope="module")
def es_full(tmp_path_factory):
    t = ESTrainer(ES_RUN, tmp_path_factory.mktemp("full") / "run")
    t.run()
    return t


@pytest.fixture
def terminal_signals():
    """Python's own SIGINT / SIGTERM handlers, as in a terminal. A background shell starts
    pytest with SIGINT ignored, and the trainer leaves an ignored signal ignored."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.mark.usefixtures("terminal_signals")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_finishes_the_round_checkpoints_and_resumes_exactly(tmp_path, es_full, sig,
                                                                   caplog):
    t = ESTrainer(ES_RUN, tmp_path / "run")
    _signal_in_round(t, 1, sig)
    with caplog.at_level(logging.WARNING, logger="feudal_es.trainer"), \
            pytest.raises(TrainingInterrupted) as stop:
        t.run()
    assert stop.value.graceful and stop.value.round == 2 and stop.value.signum == sig
    assert "finishing the round in progress (1 done so far), then checkpointing" in caplog.text
    assert [r["round"] for r in metrics_rows(t.run_dir)] == [0, 1]
    assert checkpoint.CheckpointManager(t.run_dir).latest().name == "ckpt_00000002.safetensors"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    resumed = ESTrainer.resume(t.run_dir)
    resumed.run()
    assert stable(resumed.history) == stable(es_full.history)
    assert_trees_equal((resumed.ts, resumed.es_state), (es_full.ts, es_full.es_state))


@pytest.mark.usefixtures("terminal_signals")
def test_second_sigint_stops_at_once_keeping_completed_rounds(tmp_path, es_full):
    t = ESTrainer(ES_RUN, tmp_path / "run")
    _signal_in_round(t, 1, signal.SIGINT, signal.SIGINT)
    with pytest.raises(TrainingInterrupted) as stop:
        t.run()
    assert not stop.value.graceful and t.round == 1
    assert [r["round"] for r in metrics_rows(t.run_dir)] == [0]
    back = ESTrainer.resume(t.run_dir)
    assert back.round == 1 and stable(back.history) == stable(es_full.history[:1])


# ===================================================================== 7. determinism
def test_same_seed_same_run_bit_for_bit_jax_path(tmp_path):
    cfg = dataclasses.replace(TINY, plot_every=100)
    a, b = ESTrainer(cfg, tmp_path / "a"), ESTrainer(cfg, tmp_path / "b")
    a.run(rounds=2)
    b.run(rounds=2)
    assert stable(a.history) == stable(b.history)
    assert_trees_equal((a.ts, a.es_state), (b.ts, b.es_state))
    c = ESTrainer(cfg.override({"seed": 1}), tmp_path / "c")  # the oracle is not vacuous
    c.run(rounds=1)
    assert stable(c.history)[0] != stable(a.history)[0]


def test_same_seed_same_run_bit_for_bit_host_path(tmp_path):
    """ES on a PettingZoo env (the host loop); the MAPPO host path is checked in
    test_faults_slow.py (its update compiles for ~25 s on 2 cores)."""
    a, b = host_trainer(tmp_path / "a"), host_trainer(tmp_path / "b")
    a.run()
    b.run()
    assert stable(a.history) == stable(b.history)
    assert_trees_equal((a.ts, a.es_state), (b.ts, b.es_state))
    assert a.history[0]["selector_fitness"] != a.history[1]["selector_fitness"]


# ===================================================================== 8. a full disk
def test_full_disk_is_one_line_naming_the_last_checkpoint_then_resumes(tmp_path, es_full,
                                                                      monkeypatch, capsys):
    """The second checkpoint's write fails with ENOSPC: `feudal-es train` exits 1 with one
    line naming the cause, the last good checkpoint and the resume command; nothing is
    lost, and once the disk has room `--resume` completes the same run."""
    run = tmp_path / "run"
    (tmp_path / "cfg.json").write_text(json.dumps(ES_RUN.override({"checkpoint_every": 1})
                                                  .to_dict()))
    real = _ckpt_writer.atomic_write

    def full_disk(path, write):
        if path.name == "ckpt_00000002.safetensors":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, write)

    monkeypatch.setattr(_ckpt_writer, "atomic_write", full_disk)
    argv = ["train", "--config", str(tmp_path / "cfg.json"), "--out", str(run), "--no-progress"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "No space left on device" in err[0] and "ckpt_00000002.safetensors" in err[0]
    assert f"the last good checkpoint is {run / 'ckpt_00000001.safetensors'}" in err[0]
    assert err[0].endswith(f"continue with: feudal-es train --resume {run}")
    assert [p.name for p in run.iterdir() if p.name.startswith((".ckpt", "ckpt"))] == [
        "ckpt_00000001.safetensors"]  # no temp file left behind
    monkeypatch.setattr(_ckpt_writer, "atomic_write", real)
    assert cli.main(["train", "--resume", str(run), "--no-progress"]) == 0
    assert stable(metrics_rows(run)) == stable(es_full.history)
