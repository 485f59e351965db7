"""Host-path MAPPO collection over worker processes (``TrainerConfig.host_workers``).

1. Oracle: the batch collected by 2 workers (5 env copies, uneven shares) equals the
   in-process collection's leaf by leaf, over two collections, with every optional part
   of the host path in use (``worker_envs.RichLine``: state, comm graph, skill rewards,
   an agent leaving, seed-dependent episode ends, episodes cut at the time limit); the
   statistics, the key, the reset-seed counter and the warnings are the same too.
2. A worker SIGKILLed between two collections, and one that kills itself in the middle
   of one: each is replaced, the log names it, and training goes on, with nothing
   traced (compiled) again after the first round; ``close()`` leaves no worker process
   behind.
3. ``feudal-es train <custom env> --set host_workers=2`` runs, and a Ctrl-C sent to its
   whole process group (as a terminal sends it) finishes the round in progress, without
   killing a worker, and leaves no worker process behind.
4. Errors: an env error in a worker is the in-process error (type, message, and the
   command line's one-line report naming the env's line); bad ``host_workers`` values
   and an env factory that cannot reach a worker are refused by name.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import TINY_ACTOR, assert_trees_equal, cli_command, cli_env, metrics_rows
from worker_envs import RichLine

from agents import ActorConfig, CentralCritic, CriticConfig, FeudalActor
from feudal_es import mappo
from feudal_es.config import TrainerConfig
from feudal_es.errors import user_message
from feudal_es.host import EnvOutputError, EnvTimeout, HostCollector, HostEnvSpec
from feudal_es.host_copies import CopiesLost, CopyGroup
from feudal_es.host_worker import RemoteTraceback
from feudal_es.host_workers import WorkerPool, shares
from feudal_es.resolve import ResolvedEnv
from feudal_es.trainer import ESTrainer

SPEC = HostEnvSpec(RichLine())
ACTOR = FeudalActor(jax.random.key(0), SPEC.observation_space, SPEC.action_space,
                    SPEC.num_skills, ActorConfig(**{k: tuple(v) if isinstance(v, list) else v
                                                    for k, v in TINY_ACTOR.items()},
                                                 selector_period=2))
CRITIC = CentralCritic(jax.random.key(1), SPEC.global_state_size, SPEC.num_agents,
                       SPEC.num_skills, CriticConfig(hidden=(16,)))
# the trainer test's and the CLI test's run (one config: the CLI reuses the compilations)
CFG = TrainerConfig(env="tests/RichLine-v0", mode="mappo", n_outer=3, seed=1,
                    actor={**TINY_ACTOR, "selector_period": 2}, critic=dict(hidden=[16]),
                    mappo=dict(num_envs=4, num_steps=8, epochs=1, minibatches=1),
                    episodes=2, checkpoint_every=100, plot_every=100, gif=False,
                    host_workers=2, auto=())


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _gone(pids, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


# --- 1. the oracle ---------------------------------------------------------------------
def test_two_workers_collect_the_in_process_batch():
    cfg = mappo.MAPPOConfig(num_envs=5, num_steps=9, epochs=1, minibatches=1,
                            option_exploration=0.3)
    ts = mappo.init_learner(jax.random.key(2), ACTOR, CRITIC, cfg)
    kw = dict(seed=4, max_episode_steps=5)
    local = HostCollector([RichLine() for _ in range(5)], SPEC, cfg, **kw)
    pool = WorkerPool(RichLine, SPEC, 5, 2, cfg.reward, max_episode_steps=5,
                      env_id="RichLine")
    try:
        assert [len(r) for r in pool.shares] == [3, 2]
        remote = HostCollector(pool, SPEC, cfg, **kw)
        ts_l, ts_r = ts, ts
        for _ in range(2):
            ts_l, batch_l, stats_l = local.collect(ts_l)
            ts_r, batch_r, stats_r = remote.collect(ts_r)
            assert_trees_equal(batch_r, batch_l)
            assert_trees_equal(ts_r, ts_l)
            np.testing.assert_equal(stats_r, stats_l)
        assert stats_l["episodes"] > 0 and np.asarray(batch_l.alive).min() == 0  # ends, deaths
        assert remote._episodes_started == local._episodes_started
        assert remote.notices.seen == local.notices.seen and "time_limit" in local.notices.seen
    finally:
        pool.close()
    assert pool.pids == [] and shares(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]


# --- 2. a worker that dies -------------------------------------------------------------
@pytest.mark.heavy
def test_sigkilled_worker_is_replaced_and_the_collection_redone(tmp_path, caplog):
    crash = tmp_path / "crashed"
    make = functools.partial(RichLine, crash_file=str(crash), spare=os.getpid())
    t = ESTrainer(CFG, tmp_path / "run", resolved=ResolvedEnv(CFG.env, "host", make=make))
    assert t.runtime.collector is None  # the workers start with the first collection
    traces, counting = [], [False]
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, _, **kw: counting[0] and event.endswith("jaxpr_trace_duration")
        and traces.append(event))
    try:
        with caplog.at_level(logging.WARNING, logger="feudal_es"):
            t.run(rounds=1)
            pool = t.runtime.collector.copies
            started = list(pool.pids)
            counting[0] = True  # from here nothing is traced again, restarts or not
            os.kill(started[1], signal.SIGKILL)  # between two collections
            t.run(rounds=1)
            Path(f"{crash}.armed").touch()  # the first env step of the next collection dies
            t.run(rounds=1)
        counting[0] = False
        assert crash.exists() and traces == []
        lines = [r.getMessage() for r in caplog.records if "host worker" in r.getMessage()]
        assert len(lines) == 2, lines
        assert re.fullmatch(
            rf"host worker 1 \(pid {started[1]}\) died \(signal 9, SIGKILL\); restarted, its "
            r"2 env copies \(2-3\) rebuilt; every env copy's episode in progress restarted "
            r"\(next reset seeds\) and MAPPO collection #2 redone from its start", lines[0])
        assert re.match(r"host worker [01] \(pid \d+\) died \(signal 9, SIGKILL\); .* MAPPO "
                        r"collection #3 redone", lines[1])
        assert [r["round"] for r in t.history] == [0, 1, 2] and pool.restarts == 2
        assert all(np.isfinite(r["mappo/value_loss"]) for r in t.history)
        dead = [int(re.search(r"\(pid (\d+)\)", line).group(1)) for line in lines]
        now = list(pool.pids)
        assert not set(dead) & set(now) and not any(_alive(p) for p in dead)  # replaced
    finally:
        t.runtime.close()
    assert _gone(started + now), "a worker outlived close()"


# --- 3. the command line, and Ctrl-C ---------------------------------------------------
def _spawned_children(pid: int) -> set[tuple[int, bool]]:
    """``(pid, is_worker)`` of the ``multiprocessing`` children of ``pid``: its workers
    and the resource tracker ``spawn`` starts."""
    found = set()
    for d in Path("/proc").iterdir():
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"multiprocessing" in cmd:
            found.add((int(d.name), b"spawn_main" in cmd))
    return found


@pytest.mark.heavy
def test_cli_trains_with_host_workers_and_ctrl_c_leaves_no_worker(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({**CFG.to_dict(), "n_outer": 40,
                                                   "host_workers": 0}))
    run = tmp_path / "run"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a shell does
    try:
        proc = subprocess.Popen(
            cli_command("train", "--config", "run.json", "--import", "worker_envs", "--set",
                        "host_workers=2", "--out", str(run), "--no-progress"),
            cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    workers: set[tuple[int, bool]] = set()
    end = time.monotonic() + 240
    while not (run / "metrics.jsonl").is_file() or not metrics_rows(run):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "no first round within 240 s"
        workers |= _spawned_children(proc.pid)
        time.sleep(0.05)
    workers |= _spawned_children(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole process group, workers too
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "training tests/RichLine-v0 (host path), mode mappo" in out
    assert "finished the round in progress and checkpointed" in err
    assert "host worker" not in err, err  # no worker died of the Ctrl-C
    assert 1 <= len(metrics_rows(run)) <= 3
    assert json.loads((run / "config.json").read_text())["host_workers"] == 2
    assert sum(is_worker for _, is_worker in workers) == 2
    assert _gone([p for p, _ in workers]), "worker processes outlived the run"


# --- 4. errors -------------------------------------------------------------------------
def _error(copies, seed: int) -> Exception:
    """The error of the second step of copy 0's episode reset with ``seed``."""
    copies.reset_copies([(0, seed)])
    acts, skills = np.zeros((1, 3, 1), np.float32), np.zeros((1, 3), np.int32)
    with pytest.raises(Exception) as info:  # any type: the caller compares them
        for _ in range(2):
            copies.step_copies(acts, skills)
    return info.value


@pytest.mark.heavy
def test_env_errors_in_a_worker_are_the_in_process_errors():
    """... and a worker that dies in every collection ends it with a clear error."""
    faults = {101: "nondict", 102: "raise", 103: "sleep"}
    dying = {seed: "die" for seed in range(300, 310)}
    make = functools.partial(RichLine, faults={**faults, **dying}, spare=os.getpid())
    local = CopyGroup([make()], SPEC, step_timeout=1.0)
    pool = WorkerPool(make, SPEC, 1, 1, step_timeout=1.0)
    try:
        said = {}
        for seed, kind in zip(faults, (EnvOutputError, RuntimeError, EnvTimeout),
                              strict=True):
            want, got = _error(local, seed), _error(pool, seed)
            assert type(got) is type(want) is kind and str(got) == str(want)
            assert isinstance(got.__cause__, RemoteTraceback)
            said[faults[seed]] = user_message(got)
            assert said[faults[seed]] == user_message(want), seed
        assert said["nondict"].startswith("RichLine.step() rewards must be a dict keyed by")
        assert said["raise"].startswith("your code raised RuntimeError: RichLine: injected "
                                        "fault in the episode of seed 102 (")
        assert "worker_envs.py" in said["raise"]
        assert said["sleep"] == "RichLine.step() took longer than 1 s (time limit)"
        cfg = mappo.MAPPOConfig(num_envs=1, num_steps=3, epochs=1, minibatches=1)
        collector = HostCollector(pool, SPEC, cfg, seed=300, max_redos=1)
        with pytest.raises(CopiesLost, match=r"host worker 0 \(pid \d+\) died \(signal 9, "
                           r"SIGKILL\); restarted, its env copy \(0\) rebuilt; MAPPO "
                           r"collection #1 was redone 1 times and a worker died again"):
            collector.collect(mappo.init_learner(jax.random.key(2), ACTOR, CRITIC, cfg))
        assert pool.restarts == 2 and user_message(CopiesLost("x")) == "x"  # one line
        (link,) = pool._links  # the main process gone: its pipe closes, the worker exits
        link.conn.close()
        link.process.join(10)
        assert link.process.exitcode == 0
    finally:
        pool.close()


def test_bad_host_workers_values_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"TrainerConfig.host_workers must be .*>= 0"):
        TrainerConfig(host_workers=-1)
    with pytest.raises(ValueError, match=r"host_workers=5 is more than the 4 env copies "
                                         r"\(mappo.num_envs\)"):
        dataclasses.replace(CFG, host_workers=5)
    stored = {k: v for k, v in CFG.to_dict().items() if k != "host_workers"}
    assert TrainerConfig.from_dict(stored).host_workers == 0  # an older run's config
    assert TrainerConfig.from_dict(CFG.to_dict()) == CFG
    assert CFG.override({"host_workers": 1}).host_workers == 1  # what --set does
    closure = ResolvedEnv(CFG.env, "host", make=lambda **kw: RichLine(**kw))
    with pytest.raises(ValueError, match=r"cannot be sent to one .* not a lambda or closure"):
        ESTrainer(CFG, tmp_path / "lambda", resolved=closure)
    assert not (tmp_path / "lambda").exists()


@pytest.mark.slow  # a local Ray instance (~15 s on 2 cores)
def test_ray_workers_collect_the_in_process_batch(caplog):
    """The same oracle with Ray actors as the workers; then an actor SIGKILLed between
    two collections is replaced and the collection redone."""
    ray = pytest.importorskip("ray")
    cfg = mappo.MAPPOConfig(num_envs=4, num_steps=6, epochs=1, minibatches=1)
    ts = mappo.init_learner(jax.random.key(2), ACTOR, CRITIC, cfg)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    local = HostCollector([RichLine() for _ in range(4)], SPEC, cfg, seed=4)
    pool = WorkerPool(RichLine, SPEC, 4, 2, backend="ray")
    try:
        _, want, _ = local.collect(ts)
        remote = HostCollector(pool, SPEC, cfg, seed=4)
        ts_r, got, _ = remote.collect(ts)
        assert_trees_equal(got, want)
        os.kill(pool.pids[1], signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="feudal_es"):
            _, again, _ = remote.collect(ts_r)
        assert pool.restarts == 1 and np.asarray(again.reward).shape == (6, 4, 3)
        assert any(r.getMessage().startswith("host worker 1 (pid ") for r in caplog.records)
    finally:
        pool.close()
        ray.shutdown()
        for s, handler in handlers.items():  # ray.init replaces them
            signal.signal(s, handler)
