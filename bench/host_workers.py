"""Host-path MAPPO with its env copies in worker processes (``TrainerConfig.host_workers``).

    python -m bench.host_workers                      # 0 / 1 / 2 workers, then a SIGKILL
    python -m bench.host_workers --rounds 3 --sleep 0.005 --json out.json

A deliberately slow PettingZoo env (:class:`SlowSwarm`: 4 agents moving to their goals
on a plane, vector observations, ``time.sleep(--sleep)`` in every step, as a Python
simulator would spend it) trained with ``mode="mappo"`` on the host path, by three
trainers with equal settings and env steps: ``host_workers`` 0 (every copy stepped in
this process), 1 and 2. Their rounds are interleaved (one round of each in turn, the
first round of each, with its compilation and the workers' start, not timed). Measured:
MAPPO env-steps/s of each round's MAPPO phase (collection + update: the metrics rows'
``mappo/sps``; the round's evaluation episodes, stepped in this process alike, are
outside it), best of the timed rounds, and the ratios 2 workers / 1 worker and 1 worker /
in-process. The last part trains with 2 workers and SIGKILLs worker 1 in the middle of
a round's collection: the run must finish every round and its log must name the
restart.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/host_workers.py``: import from the root
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import gymnasium as gym
import jax
import numpy as np
import pettingzoo

from bench.common import Report, add_json_arg, cpu_name, markdown_table

ENV_ID = "bench.host_workers:SlowSwarm"  # "module:attr": the workers import it too


class SlowSwarm(pettingzoo.ParallelEnv):
    """``num_agents`` agents on the plane, each rewarded for closing in on its own goal;
    every step sleeps ``sleep`` seconds; episodes last ``max_cycles`` steps; the team
    reward on the last step is minus the mean distance to the goals."""

    metadata = {"name": "slow_swarm_v0"}  # noqa: RUF012 - PettingZoo convention

    def __init__(self, num_agents: int = 4, max_cycles: int = 50, sleep: float = 0.002):
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        self.max_cycles, self.sleep = max_cycles, sleep
        self._obs_space = gym.spaces.Box(-2.0, 2.0, (4,), np.float32)
        self._act_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def observation_space(self, agent: str) -> gym.Space:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self._act_space

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: np.concatenate([p, g]).astype(np.float32)
                for a, p, g in zip(self.agents, self.pos, self.goal, strict=True)}

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.pos = rng.uniform(-1, 1, (len(self.agents), 2))
        self.goal = rng.uniform(-1, 1, (len(self.agents), 2))
        self.t = 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        time.sleep(self.sleep)
        self.t += 1
        before = np.linalg.norm(self.pos - self.goal, axis=1)
        move = np.stack([np.asarray(actions[a], np.float64) for a in self.agents])
        self.pos = np.clip(self.pos + 0.1 * np.clip(move, -1, 1), -1.5, 1.5)
        after = np.linalg.norm(self.pos - self.goal, axis=1)
        done = self.t >= self.max_cycles
        team = -float(after.mean()) if done else 0.0
        obs = self._obs()
        rewards = {a: float(r) for a, r in zip(self.agents, before - after, strict=True)}
        infos = {a: {"team_reward": team} for a in self.agents}
        flags = {a: False for a in self.agents}
        truncs = {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, flags, truncs, infos


def config(args: argparse.Namespace, workers: int, rounds: int) -> Any:
    """The benchmark's run with ``workers`` host workers."""
    from feudal_es.config import TrainerConfig

    return TrainerConfig(
        env=ENV_ID, env_kwargs={"sleep": args.sleep}, mode="mappo", n_outer=rounds, seed=0,
        episodes=1, actor=dict(vec_hidden=[32], vec_out=16, gnn_layers=0, embed_hidden=[],
                               embed_dim=16, executor_hidden=[32], selector_period=5),
        critic=dict(hidden=[32]),
        mappo=dict(num_envs=args.num_envs, num_steps=args.num_steps, epochs=1,
                   minibatches=1),
        checkpoint_every=1000, plot_every=1000, gif=False, host_workers=workers, auto=())


def throughput(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """MAPPO env-steps/s per worker count (see the module docstring)."""
    from feudal_es.trainer import ESTrainer

    trainers = {w: ESTrainer(config(args, w, args.rounds + 1), out / f"workers_{w}")
                for w in args.workers}
    rates: dict[int, list[float]] = {w: [] for w in args.workers}
    try:
        t0 = time.perf_counter()
        for t in trainers.values():
            t.run(rounds=1)  # compile, and the workers' first collection
        warm_s = time.perf_counter() - t0
        for _ in range(args.rounds):
            for w, t in trainers.items():
                t.run(rounds=1)
                rates[w].append(float(t.history[-1]["mappo/sps"]))
        env_steps = {w: int(t.history[-1]["env_steps"]) for w, t in trainers.items()}
    finally:
        for t in trainers.values():
            t.runtime.close()
    best = {w: max(r) for w, r in rates.items()}
    res: dict[str, Any] = {"rates_per_round": {str(w): r for w, r in rates.items()},
                           "best_env_steps_per_s": {str(w): b for w, b in best.items()},
                           "env_steps_per_run": {str(w): s for w, s in env_steps.items()},
                           "warmup_s": warm_s}
    if 1 in best and 2 in best:
        res["two_over_one"] = best[2] / best[1]
    if 0 in best and 1 in best:
        res["one_over_in_process"] = best[1] / best[0]
    return res


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def sigkill_case(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Train with 2 workers; ``--kill-after`` seconds into round 1's collection, SIGKILL
    worker 1. The run must finish its rounds; the log must name the restart."""
    from feudal_es.trainer import ESTrainer

    rounds = max(3, args.rounds)
    trainer = ESTrainer(config(args, 2, rounds), out / "sigkill")
    killed: list[int] = []

    def kill_later() -> None:
        time.sleep(args.kill_after)
        killed.append(trainer.runtime.collector.copies.pids[1])
        os.kill(killed[0], signal.SIGKILL)

    def on_round(row: dict) -> None:
        if row["round"] == 0:  # round 1 starts with its collection right after this
            threading.Thread(target=kill_later, daemon=True).start()

    keep, logger = _Keep(), logging.getLogger("feudal_es")
    logger.addHandler(keep)
    try:
        t0 = time.perf_counter()
        trainer.run(on_round=on_round)
        wall = time.perf_counter() - t0
    finally:
        logger.removeHandler(keep)
        trainer.runtime.close()
    restarts = [line for line in keep.lines if line.startswith("host worker")]
    return {"rounds": rounds, "rounds_done": len(trainer.history), "killed_pid": killed[0],
            "restart_log": restarts, "finished": len(trainer.history) == rounds,
            "restart_logged": bool(restarts) and f"(pid {killed[0]}) died" in restarts[0],
            "restarts": trainer.runtime.collector.copies.restarts, "wall_s": wall}


def summary_rows(doc: dict[str, Any]) -> list[Any]:
    """bench/all.py's rows: 2 workers vs 1, 1 worker vs in process, the SIGKILL case."""
    from bench.all import Row, fmt_n

    r, s = doc["results"], doc["settings"]
    best = r["best_env_steps_per_s"]
    head = (f"host-path MAPPO, slow PettingZoo env ({s['sleep'] * 1e3:g} ms/step, "
            f"{s['num_envs']} copies)")
    rows = []
    if "two_over_one" in r:
        rows.append(Row(f"{head}: `host_workers=2` vs 1, MAPPO env-steps/s", fmt_n(best["2"]),
                        fmt_n(best["1"]), r["two_over_one"], ">= 1.7x",
                        r["two_over_one"] >= 1.7,
                        "the policy call, the update and the evaluation episodes stay in the "
                        "main process, and other jobs shared the 2 cores"))
    if "one_over_in_process" in r:
        rows.append(Row(f"{head}: `host_workers=1` vs 0 (in process): the pipes' cost",
                        fmt_n(best["1"]), fmt_n(best["0"]), r["one_over_in_process"],
                        "(reported)", None))
    kill = r.get("sigkill")
    if kill:
        rows.append(Row(f"{head}: a worker SIGKILLed mid-collection: rounds done, restart "
                        "logged", f"{kill['rounds_done']} of {kill['rounds']}",
                        "logged" if kill["restart_logged"] else "not logged", None,
                        "finishes, logged", kill["finished"] and kill["restart_logged"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2],
                   help="host_workers values to compare")
    p.add_argument("--sleep", type=float, default=0.002, help="seconds each env step sleeps")
    p.add_argument("--num-envs", type=int, default=8, help="MAPPO env copies")
    p.add_argument("--num-steps", type=int, default=64, help="steps per copy per collection")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per worker count")
    p.add_argument("--kill-after", type=float, default=0.3,
                   help="seconds into a round's collection the SIGKILL case kills worker 1")
    p.add_argument("--no-kill", action="store_true", help="skip the SIGKILL case")
    add_json_arg(p)
    args = p.parse_args(argv)
    report = Report("host_workers", args, argv)
    load = os.getloadavg()
    print(f"# host workers benchmark, {datetime.date.today()}, {cpu_name()} "
          f"({os.cpu_count()} cores), jax {jax.__version__} on {jax.default_backend()}; "
          f"load average at start {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")
    print(f"# SlowSwarm (4 agents, sleep {args.sleep * 1e3:g} ms per step), mode mappo, "
          f"{args.num_envs} copies x {args.num_steps} steps per collection, best of "
          f"{args.rounds} interleaved rounds after a warm-up round")
    print(f"# command: {report.command}")
    with tempfile.TemporaryDirectory(prefix="bench-host-workers-") as tmp:
        res = throughput(args, Path(tmp))
        rows = []
        for w in args.workers:
            rate = res["best_env_steps_per_s"][str(w)]
            rows.append(("in process" if w == 0 else f"{w} worker{'s' * (w > 1)}",
                         res["env_steps_per_run"][str(w)], f"{rate:,.0f}",
                         " / ".join(f"{r:,.0f}" for r in res["rates_per_round"][str(w)])))
        print()
        print(markdown_table(["host_workers", "env steps per run", "MAPPO env-steps/s (best)",
                              "per round"], "lrrr", rows))
        if "two_over_one" in res:
            met = "met" if res["two_over_one"] >= 1.7 else "NOT met"
            print(f"\n2 workers / 1 worker: **{res['two_over_one']:.2f}x** (goal >= 1.7x: "
                  f"{met})")
        if "one_over_in_process" in res:
            print(f"1 worker / in process: {res['one_over_in_process']:.2f}x")
        if not args.no_kill:
            kill = sigkill_case(args, Path(tmp))
            res["sigkill"] = kill
            print(f"\nSIGKILL of worker 1 (pid {kill['killed_pid']}) {args.kill_after:g} s "
                  f"into round 1's collection: {kill['rounds_done']} of {kill['rounds']} rounds "
                  f"done ({'finished' if kill['finished'] else 'NOT finished'}), "
                  f"{kill['restarts']} restart(s), in {kill['wall_s']:.1f} s; logged:")
            for line in kill["restart_log"] or ["(nothing: NOT logged)"]:
                print(f"  {line}")
    report.write(res, units={"two_over_one": "ratio", "one_over_in_process": "ratio"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
