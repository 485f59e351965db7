"""Absurd sizes are refused before anything is allocated (``feudal_es.budget``).

The oracles: the parameter counts the estimate uses equal the built networks'
(``count_params``) over actor and critic variants; the real CLI, given each absurd size
the reliability probes tried (population, env copies, embedding, agents, evaluation
episodes; JAX and host paths), exits 2 within seconds with one line naming the field,
no traceback and no banner, and its peak RSS (``os.wait4``: that child alone) stays a
small fraction of the memory it was refused. The memory probe itself is checked on a
fake ``/proc/meminfo``, and the check's escape hatch and its quiet cases.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import jax
import numpy as np
import pytest
from helpers import HOST, TINY, TINY_ACTOR, cli_command, cli_env

from agents import ActorConfig, CentralCritic, CriticConfig, FeudalActor
from agents.layers import count_params
from feudal_es import budget
from feudal_es.resolve import ResolvedEnv, resolve_env
from feudal_es.theta import theta_size
from feudal_es.trainer import ESTrainer

GB = 10**9
RSS_LIMIT = 1 * GB  # a refused child imports jax and feudal_es (~0.25 GB), no more


# --- the parameter counts -----------------------------------------------------------
def _box(*shape):
    return gym.spaces.Box(-np.inf, np.inf, shape, np.float32)


SPACES = {  # name -> (obs space, action space, skills, global state, agents)
    "maps+vec": (gym.spaces.Dict({"maps": _box(3, 16, 16), "vec": _box(2)}),
                 gym.spaces.Box(-1, 1, (2,), np.float32), 2, 70, 4),
    "vec": (_box(11), gym.spaces.Box(-1, 1, (3,), np.float32), 3, 33, 3),
    "image2d+discrete": (_box(9, 7), gym.spaces.Discrete(5), 2, 63, 5),
}
TUPLES = {k: tuple(v) if isinstance(v, list) else v for k, v in TINY_ACTOR.items()}
ACTORS = {
    "default": ActorConfig(),
    "tiny": ActorConfig(**TUPLES),
    "goal+embed+selector_hidden": ActorConfig(**{**TUPLES, "goal_dim": 3,
                                                 "skill_embed_dim": 5,
                                                 "selector_hidden": (7, 4)}),
    "no gnn, strided": ActorConfig(cnn_channels=(4, 6), cnn_strides=(2, 3), cnn_kernel=5,
                                   gnn_layers=0, embed_hidden=(), executor_hidden=()),
    "recurrent": ActorConfig(**{**TUPLES, "recurrent": True, "gru_hidden": 6}),
}
CRITICS = {"default": CriticConfig(), "plain+time": CriticConfig(hidden=(9,),
                                                                  layer_norm=False,
                                                                  time_input=True)}


@pytest.mark.parametrize("space", list(SPACES))
@pytest.mark.parametrize("actor", list(ACTORS))
def test_network_sizes_equal_the_built_networks(space, actor):
    obs, act, skills, gstate, agents = SPACES[space]
    for critic_cfg in CRITICS.values():
        sizes = budget.network_sizes(obs, act, skills, gstate, agents, ACTORS[actor],
                                     critic_cfg)
        built = FeudalActor(jax.random.key(0), obs, act, skills, ACTORS[actor])
        critic = CentralCritic(jax.random.key(1), gstate, agents, skills, critic_cfg,
                               horizon=10)
        assert sizes.actor == count_params(built) == theta_size(built, "actor")
        assert sizes.selector == theta_size(built, "selector")
        assert sizes.critic == count_params(critic)


# --- the CLI, given absurd sizes -----------------------------------------------------
# A small launcher runs the CLI (killing it after TIMEOUT seconds) and reports that
# child's peak RSS: measured from pytest directly, a forked child would start from (and
# report) this process's RSS.
TIMEOUT = 120
LAUNCH = ("import resource, subprocess, sys; "
          "rc = subprocess.call(sys.argv[2:], timeout=float(sys.argv[1])); "
          "print(f'maxrss={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}'); "
          "sys.exit(rc)")


def _start(args: list[str], cwd: Path, name: str) -> tuple[subprocess.Popen, Path, float]:
    out = cwd / f"{name}.log"
    with open(out, "w") as f:  # the child's stdout and stderr, read after it exits
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, str(TIMEOUT), *cli_command(*args)], cwd=cwd,
            env={k: v for k, v in cli_env().items() if k != budget.CHECK_ENV}, stdout=f,
            stderr=subprocess.STDOUT)
    return proc, out, time.monotonic()


def _finish(proc: subprocess.Popen, out: Path, t0: float) -> tuple[int, str, float, int]:
    """``(exit code, output, seconds, peak RSS bytes)`` of the CLI child."""
    code = proc.wait()  # the launcher kills the CLI at TIMEOUT
    seconds = time.monotonic() - t0
    text = out.read_text()
    kb = [int(x.split("=")[1]) for x in text.splitlines() if x.startswith("maxrss=")]
    rss = kb[-1] * (1 if sys.platform == "darwin" else 1024) if kb else 2**62
    return code, text, seconds, rss


JAX_PROBES = {  # --set ... -> the field the message must name
    "es.pop_size=1000000000": "es.pop_size",
    "mappo.num_envs=1000000000": "mappo.num_envs",
    "actor.embed_dim=1000000000": "actor.embed_dim",
}
HOST_PROBES = {  # (the networks' term is the JAX path's: not repeated)
    "es.pop_size=1000000000": "es.pop_size",
    "mappo.num_envs=1000000000": "mappo.num_envs",
    "env_kwargs.num_agents=1000000": "env_kwargs.num_agents",
}


def _probes(work: Path) -> dict[str, tuple[list[str], str]]:
    host = ["train", "--env", "tests/ManyLine-v0", "--import", "host_envs_extra",
            "--set", "mode=merl", "--no-progress"]
    probes = {f"jax {s}": (["train", "--config", "tiny.json", "--set", s, "--no-progress"],
                           field) for s, field in JAX_PROBES.items()}
    # a million Coverage robots: the functional core named directly (the registered id
    # goes through the PettingZoo adapter, which builds per-agent spaces first)
    probes["jax env_kwargs.num_agents=1000000"] = (
        ["train", "--config", "tiny.json", "--env", "envs.coverage:Coverage", "--set",
         "env_kwargs.num_agents=1000000", "--no-progress"], "env_kwargs.num_agents")
    probes.update({f"host {s}": ([*host, "--set", s], field)
                   for s, field in HOST_PROBES.items()})
    return probes


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sizes")
    (d / "tiny.json").write_text(json.dumps(TINY.to_dict()))
    return d


@pytest.mark.slow  # ~14 s: CLI runs (the API refusals run by default)
def test_absurd_sizes_are_refused_by_the_cli_before_allocating(work):
    """Every probe at once (they only import and estimate): exit 2, one line naming the
    field and the memory, no traceback, no banner, nothing written, seconds, low RSS."""
    running = {}
    for i, (name, (args, field)) in enumerate(_probes(work).items()):
        out = work / f"run{i}"
        running[name] = (field, out, *_start([*args, "--out", str(out)], work, f"p{i}"))
    problems = []
    for name, (field, out, proc, log, t0) in running.items():
        code, text, seconds, rss = _finish(proc, log, t0)
        lines = [x for x in text.splitlines() if x.startswith("feudal-es train: error:")]
        ok = (code == 2 and "Traceback" not in text and "feudal-es: training" not in text
              and len(lines) == 1 and f"lower {field}" in lines[0]
              and "available" in lines[0] and not out.exists() and rss < RSS_LIMIT
              and seconds < 90)
        if not ok:
            problems.append(f"{name}: exit {code}, {seconds:.1f} s, {rss / GB:.2f} GB, "
                            f"out exists {out.exists()}:\n{text[-2000:]}")
    assert not problems, "\n".join(problems)


def test_evaluation_too_large_is_refused_by_eval_and_the_api(work):
    """``eval --episodes 10**8`` on a JAX run: refused naming --episodes before any
    episode key is drawn; the same through ``rollout_stats``. On the host path the
    episodes stream (test_host_defaults), so only their results count: refused when
    those cannot fit."""
    t = ESTrainer(TINY, work / "evalrun")
    t.save_checkpoint()
    code, text, seconds, rss = _finish(*_start(
        ["eval", str(work / "evalrun"), "--episodes", "100000000"], work, "eval"))
    assert code == 2 and "Traceback" not in text, text
    assert "the evaluation would take about" in text and "--episodes" in text
    assert rss < RSS_LIMIT and seconds < 90
    theta = t.theta_of(t.ts.actor)[None]
    with pytest.raises(budget.MemoryBudgetError, match=r"100000000 episodes.*--episodes"):
        t.rollout_stats(theta, jax.random.key(0), episodes=10**8)
    from line_envs import Line

    host = ESTrainer(HOST, work / "host", resolved=ResolvedEnv(HOST.env, "host", make=Line))
    with pytest.raises(budget.MemoryBudgetError, match=r"2 selectors x 10000000000 episodes"):
        host.rollout_stats(np.zeros((2, host.theta_size), np.float32), jax.random.key(0),
                           episodes=10**10)


def test_refusal_happens_before_the_networks_are_built(monkeypatch, tmp_path):
    """In process: the runtime refuses before the actor is ever built (an absurd
    embedding would be allocated there), and names what dominates."""
    import feudal_es.runtime

    calls = []

    class Spy:
        @classmethod
        def from_env(cls, *args, **kwargs):
            calls.append(1)
            return FeudalActor.from_env(*args, **kwargs)

    monkeypatch.setattr(feudal_es.runtime, "FeudalActor", Spy)
    cfg = TINY.override({"actor.embed_dim": 10**9})
    with pytest.raises(budget.MemoryBudgetError) as err:
        ESTrainer(cfg, tmp_path / "run", resolved=resolve_env(cfg.env, cfg.env_kwargs))
    assert calls == [] and not (tmp_path / "run").exists()
    assert err.value.term.what == "the actor and critic" and err.value.total > 500 * GB
    assert "lower actor.embed_dim" in str(err.value)


# --- the memory probe and the check --------------------------------------------------
def test_available_memory_reads_meminfo_and_falls_back(tmp_path, monkeypatch):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       32000000 kB\nMemAvailable:   21000000 kB\n")
    assert budget._meminfo_available(str(info)) == 21000000 * 1024
    info.write_text("MemTotal: 1 kB\n")  # an old kernel without MemAvailable
    assert budget._meminfo_available(str(info)) is None
    assert budget._meminfo_available(str(tmp_path / "missing")) is None
    assert budget.host_available() is None or budget.host_available() > 0
    monkeypatch.setattr(budget, "_meminfo_available", lambda: None)
    monkeypatch.setattr(budget, "_sysconf_available", lambda: None)
    monkeypatch.setattr(budget, "_cgroup_available", lambda: None)
    huge = budget.Term("x", 10**18, "factors", "lower x")
    budget.check([huge])  # unknown memory: never refuses
    assert budget.available_memory() == (None, "this machine")


def test_check_refuses_only_above_what_is_available(monkeypatch):
    monkeypatch.setattr(budget, "host_available", lambda: 21 * GB)
    small = budget.Term("the small part", 60 * GB, "a x b", "lower b")
    big = budget.Term("the ES population", 316 * GB, "P x D", "lower es.pop_size")
    budget.check([budget.Term("fits", 20 * GB, "", "")])
    budget.check([budget.Term("tiny", budget.FLOOR - 1, "", "")])
    with pytest.raises(budget.MemoryBudgetError) as err:
        budget.check([small, big])
    assert str(err.value) == (
        "the ES population would take about 316 GB (P x D); with the rest of the run "
        "about 376 GB in all; this machine has 21 GB available: lower es.pop_size "
        "(FEUDAL_ES_MEMORY_CHECK=0 skips this check)")
    assert isinstance(err.value, ValueError)  # the CLI's one-line error, exit 2
    monkeypatch.setenv("FEUDAL_ES_MEMORY_CHECK", "0")
    budget.check([small, big])


def test_typical_configs_pass_and_the_estimate_is_a_lower_bound(tmp_path):
    """The shared test configs pass; the population term of a real generation is at most
    what its arrays take (candidates + noise as ask returns them)."""
    from feudal_es import es
    from feudal_es.runtime import make_runtime

    for cfg in (TINY, dataclasses.replace(TINY, es=dataclasses.replace(TINY.es,
                                                                       pop_size=1000))):
        rt = make_runtime(cfg, resolve_env(cfg.env, cfg.env_kwargs))
        sizes = budget.network_sizes(rt.core.observation_space, rt.core.action_space, 2,
                                     rt.core.global_state_size, rt.core.num_agents,
                                     cfg.actor, cfg.critic)
        terms = budget.run_terms(cfg, rt.footprint, sizes, 8)
        pop = next(t for t in terms if t.what == "the ES population")
        state = es.init(np.zeros(sizes.selector, np.float32), cfg.es)
        candidates, noise = es.ask_jit(jax.random.key(0), state, cfg.es)
        assert pop.nbytes == candidates.nbytes + noise.nbytes
