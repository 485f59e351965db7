"""``ESTrainer``: the MERL loop end to end — MAPPO on the executor, ES on the selector.

One trainer owns one run: a :class:`~feudal_es.config.TrainerConfig`, the runtime of its
env's path (:mod:`feudal_es.runtime`: the pure-JAX path for functional envs, the host path
for any PettingZoo ``ParallelEnv``), the MAPPO train state whose actor holds the current
selector, the ES state, and the run directory (:class:`~feudal_es.rundir.RunDir`). Each
round is :func:`feudal_es.es.merl_coexist`'s: gradient steps, the learner's selector
injected into the ES mean, one ES generation on team fitness, the evolved selector
written back; then the round is evaluated, logged and checkpointed.

Keys come from the seed by a fixed derivation (:mod:`feudal_es.keys`), so a resumed run
repeats exactly what the uninterrupted run would have done (JAX path, same machine).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agents import FeudalActor, es_theta, selector_theta, set_es_theta
from feudal_es import checkpoint, es, mappo
from feudal_es.config import MODES, TrainerConfig, parse_assignment
from feudal_es.keys import KeySchedule, chain_key, root_keys
from feudal_es.resolve import ResolvedEnv, UntrustedEnvError, resolve_env, resolve_stored_env
from feudal_es.rundir import LABELS, RunDir, clean, default_run_dir
from feudal_es.runtime import make_runtime
from feudal_es.sharding import committed
from feudal_es.signals import StopOnSignals, TrainingInterrupted

__all__ = ["MODES", "ESTrainer", "KeySchedule", "ResolvedEnv", "TrainerConfig",
           "TrainingInterrupted", "UntrustedEnvError", "chain_key", "parse_assignment",
           "resolve_env", "root_keys"]

log = logging.getLogger("feudal_es.trainer")


class ESTrainer:
    """Builds everything a run needs from a :class:`TrainerConfig` and runs it.

    Attributes: ``config``, ``env`` (:class:`ResolvedEnv`), ``runtime`` (its path's
    :class:`~feudal_es.runtime.JaxRuntime` or :class:`~feudal_es.runtime.HostRuntime`),
    ``keys`` (:class:`KeySchedule`), ``ts`` (the MAPPO train state, whose actor holds the
    current selector), ``es_state``, ``round`` (rounds completed), ``history`` (one dict
    per round, the rows of ``metrics.jsonl``), ``round_metrics`` (this round's MAPPO
    metrics so far), ``run_dir`` (set by the first :meth:`run` when not given).
    """

    def __init__(self, config: TrainerConfig, run_dir: str | os.PathLike | None = None,
                 resolved: ResolvedEnv | None = None):
        if not isinstance(config, TrainerConfig):
            raise TypeError(f"config must be a TrainerConfig, got {type(config).__name__}")
        self.config = config
        self.env = resolved or resolve_env(config.env, config.env_kwargs)
        self.runtime = make_runtime(config, self.env)
        self.keys = root_keys(config.seed)
        self.ts = committed(self.runtime.init_train_state(self.keys.init))
        self.es_state = committed(es.init(self.theta_of(self.ts.actor), config.es))
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.round = 0
        self.history: list[dict] = []
        self.best_fitness = -math.inf
        self.round_metrics: list[dict] = []
        self._pending: list[tuple[dict, jax.Array]] = []  # train steps not yet fetched
        self._t_grad = 0.0
        self._rundir: RunDir | None = None
        self._fresh = True  # built from a config, not restored from a checkpoint
        self._wall_offset, self._t_start, self._t_round = 0.0, 0.0, 0.0
        self._pbar: Any = None
        self._end = 0
        self._user_on_round: Callable[[dict], None] | None = None
        self._stop = StopOnSignals(lambda: self.round)

    # --- fitness -------------------------------------------------------------------
    @property
    def selector_size(self) -> int:
        return int(selector_theta(self.ts.actor).shape[0])

    def theta_of(self, actor: FeudalActor) -> jax.Array:
        """What ES evolves (``config.es_params``: the selector, or the whole actor)."""
        return es_theta(actor, self.config.es_params)

    @property
    def theta_size(self) -> int:
        """The number of parameters ES evolves."""
        return int(self.theta_of(self.ts.actor).shape[0])

    @property
    def skill_names(self) -> tuple[str, ...]:
        return tuple(self.runtime.skill_names)

    def round_eval_key(self, round_: int | None = None) -> jax.Array:
        """The key of round ``round_``'s per-member ``eval_fn`` episodes."""
        return jax.random.fold_in(self.keys.eval, self.round if round_ is None else round_)

    def rollout_stats(self, thetas: jax.Array, key: jax.Array, actor: FeudalActor | None = None,
                      episodes: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Team returns ``[P, E]`` and final-step env metrics ``{name: [P, E]}`` of
        ``thetas[P, D]`` on the ``E`` episodes derived from ``key`` (same for all)."""
        actor = self.ts.actor if actor is None else actor
        e = self.config.episodes if episodes is None else int(episodes)
        return self.runtime.returns(actor, jnp.atleast_2d(jnp.asarray(thetas, jnp.float32)),
                                    key, e)

    def population_fitness(self, thetas: jax.Array, key: jax.Array) -> jax.Array:
        """``[P]`` team fitness of ``thetas[P, D]`` with the current executor, all members
        on the same ``episodes`` episodes (one jitted call on the JAX path)."""
        return jnp.asarray(self.rollout_stats(thetas, key)[0].mean(axis=1), jnp.float32)

    def eval_fn(self, theta: jax.Array, key: jax.Array | None = None) -> float:
        """Reference-compatible team fitness of one selector: mean team return over
        ``episodes`` episodes (default key: this round's :meth:`round_eval_key`)."""
        key = self.round_eval_key() if key is None else key
        return float(self.rollout_stats(jnp.asarray(theta)[None], key)[0].mean())

    # --- the sync hooks (the one ES partition) -----------------------------------------
    def sync_in(self, ts: mappo.TrainState, theta: jax.Array) -> jax.Array:
        """The gradient learner's ES leaves, read out of ``ts.actor`` (MERL injection)."""
        del theta
        self.flush_mappo()  # the round's gradient steps are done
        return self.theta_of(ts.actor)

    def sync_out(self, ts: mappo.TrainState, theta: jax.Array) -> mappo.TrainState:
        """``ts`` with the evolved leaves written into its actor."""
        return ts._replace(actor=set_es_theta(ts.actor, theta, self.config.es_params))

    # --- gradient side ---------------------------------------------------------------
    def gradient_step(self, ts: mappo.TrainState) -> mappo.TrainState:
        """One MAPPO train step (identity in ``es`` mode). A non-finite update is skipped:
        the learner keeps its last finite state, the rollout moves on. The step's metrics
        stay on device until :meth:`flush_mappo` (no host sync per step, so the next step
        is dispatched while this one runs)."""
        if not self.config.trains_executor:
            return ts
        if not self._pending:
            self._t_grad = time.perf_counter()
        ts, metrics, skipped = self.runtime.guarded_step(ts)
        self._pending.append((metrics, skipped))
        return ts

    def flush_mappo(self) -> None:
        """Fetch the pending train steps' metrics in one transfer and record them; ``sps``
        is the steps' env steps per wall second since the first of them was dispatched."""
        if not self._pending:
            return
        pending, self._pending = jax.device_get(self._pending), []
        sps = len(pending) * self.config.mappo.batch_size / (time.perf_counter() - self._t_grad)
        for metrics, skipped in pending:
            self.record_mappo({**{k: float(v) for k, v in metrics.items()},
                               "skipped_updates": float(skipped), "sps": sps})

    def record_mappo(self, metrics: dict[str, float]) -> None:
        """Keep one train step's (host) metrics for the round's row; warn about a skipped
        (non-finite) update."""
        if metrics["skipped_updates"]:
            bad = [k for k in mappo.LOSS_KEYS if k in metrics and not math.isfinite(metrics[k])]
            log.warning("round %d: MAPPO update skipped: non-finite %s; the executor and "
                        "critic keep their last finite parameters", self.round,
                        ", ".join(bad) if bad else "parameters after the update")
        self.round_metrics.append(metrics)

    # --- run ---------------------------------------------------------------------------
    @property
    def rundir(self) -> RunDir:
        """The run directory (``runs/<env>-<mode>-<time>`` unless one was given)."""
        if self._rundir is None:
            if self.run_dir is None:
                self.run_dir = default_run_dir(self.config.env, self.config.mode)
            self._rundir = RunDir(self.run_dir, self.config.keep_checkpoints)
        return self._rundir

    def run(self, rounds: int | None = None, progress: bool = False,
            on_round: Callable[[dict], None] | None = None) -> list[dict]:
        """Run up to ``rounds`` more outer rounds (default: until ``config.n_outer``).

        Writes ``config.json``, one ``metrics.jsonl`` row per round, the learning curve,
        checkpoints every ``checkpoint_every`` rounds and at the end, the best selector
        whenever the selector's fitness improves, and (when the run reaches ``n_outer``)
        the final episode GIF. Returns the history (all rounds so far).

        Ctrl-C (SIGINT) or SIGTERM, on the main thread: the current round is finished and
        checkpointed, then :class:`TrainingInterrupted` (a ``KeyboardInterrupt``) is
        raised; a second signal stops at once, keeping every completed round. A fresh
        trainer refuses a run directory that already holds checkpoints (resume it).
        """
        cfg = self.config
        start = self.round
        end = cfg.n_outer if rounds is None else min(cfg.n_outer, start + int(rounds))
        if end <= start:
            return self.history
        self.start_rounds(end, on_round)
        if progress:
            from tqdm import tqdm

            self._pbar = tqdm(total=cfg.n_outer, initial=start, unit="round",
                              dynamic_ncols=True, desc=cfg.mode)
        try:
            with self._stop:
                self._rounds(start, end)
        except KeyboardInterrupt:
            self.keep_completed(start)
            raise
        except FloatingPointError as e:  # every ES member non-finite: nothing was written
            raise self.unwritten_round(e) from None
        finally:
            self.stop_rounds()
        self.final_gif()
        return self.history

    def _rounds(self, start: int, end: int) -> None:
        cfg = self.config
        if not cfg.runs_es:  # the selector is frozen: no ES generation at all
            ts = self.ts
            for _ in range(start, end):
                for _ in range(cfg.grad_steps_per_outer):
                    ts = self.gradient_step(ts)
                self.flush_mappo()
                self._on_round(ts, self.es_state, None)
            return
        es.merl_coexist(
            theta0=self.theta_of(self.ts.actor), eval_fn=self.eval_fn,
            gradient_step_fn=self.gradient_step, sync_in=self.sync_in,
            sync_out=self.sync_out, n_outer=end - start,
            grad_steps_per_outer=cfg.grad_steps_per_outer, es_cfg=cfg.es,
            key=chain_key(self.keys.es, start), gstate0=self.ts,
            on_round=lambda _, ts, state, info: self._on_round(ts, state, info),
            es_state0=self.es_state,
            generation_fn=lambda k, s, ts: self.runtime.generation(k, s, ts.actor,
                                                                   self.round_eval_key()))

    def _on_round(self, ts: mappo.TrainState, es_state: es.ESState, info: dict | None) -> None:
        self.finish_round(ts, es_state, info)
        if self._stop.signum is not None and self.round < self._end:
            self.save_checkpoint_if_new()
            self._stop.stop(self.round)

    # --- the round lifecycle (also driven by feudal_es.seeds for many seeds at once) ----
    def start_rounds(self, end: int, on_round: Callable[[dict], None] | None = None) -> None:
        """Before rounds up to ``end``: the run directory (a fresh run refuses one that
        holds a run), clocks, the user callback."""
        cfg = self.config
        if self._fresh and self.round == 0:
            self.rundir.start(cfg.to_dict())
        self._fresh = False
        self.rundir.ensure(cfg.to_dict())
        self._t_start = self._t_round = time.perf_counter()
        self._end, self._user_on_round = end, on_round
        self.round_metrics, self._pending = [], []  # an interrupted round's steps are gone

    def finish_round(self, ts: mappo.TrainState, es_state: es.ESState, info: dict | None,
                     evaluation: tuple[np.ndarray, dict] | None = None,
                     seconds: float | None = None) -> dict:
        """After a round: evaluate the current selector (or take ``evaluation``, its team
        returns ``[1, E]`` and env metrics), commit the round, write it, report it.
        ``seconds``: the round's wall time (default: since the last round ended)."""
        r = self.round
        theta = self.theta_of(ts.actor)
        row = self._round_row(ts, theta, info, evaluation, seconds)
        # commit the round in one statement (an interrupt sees all of it or none)
        self.ts, self.es_state, self.round, self.history = ts, es_state, r + 1, [
            *self.history, row]
        self._record(row, theta)
        if self._pbar is not None:
            post = {LABELS["selector_fitness"]: f"{row['selector_fitness']:.3g}",
                    LABELS["best_selector"]: f"{self.best_fitness:.3g}"}
            if row.get("fitness_best") is not None:
                post[LABELS["fitness_best"]] = f"{row['fitness_best']:.3g}"
            if row.get("sps") is not None:
                post["sps"] = f"{row['sps']:.0f}"
            self._pbar.set_postfix(post)
            self._pbar.update(1)
        if self._user_on_round is not None:
            self._user_on_round(row)
        return row

    def save_checkpoint_if_new(self) -> None:
        """Checkpoint the current round unless its checkpoint exists."""
        if not self.rundir.has_checkpoint(self.round):
            self.save_checkpoint()

    def keep_completed(self, start: int) -> None:
        """After an interruption: checkpoint the rounds completed since ``start``."""
        if self.round > start:
            self.save_checkpoint_if_new()

    def unwritten_round(self, err: FloatingPointError) -> FloatingPointError:
        """The error for a round that stopped before writing (every ES member
        non-finite), naming the last checkpoint."""
        latest = self.rundir.checkpoints.latest()
        cause = re.sub(r"^ES round \d+: ", "", str(err))  # merl_coexist counts from 0
        return FloatingPointError(
            f"round {self.round}: {cause}. The run stopped without writing this round; "
            f"{'the last checkpoint is ' + str(latest) if latest else 'no checkpoint yet'}")

    def stop_rounds(self) -> None:
        """After the rounds (however they ended): clocks, progress bar, TensorBoard."""
        self._wall_offset, self._t_start = self._wall(), 0.0
        if self._pbar is not None:
            self._pbar.close()
            self._pbar = None
        self.rundir.flush()

    def final_gif(self) -> None:
        """The final episode GIF, once the run has reached ``n_outer`` (if enabled)."""
        if self.round >= self.config.n_outer and self.config.gif:
            self.write_gif(self.rundir.gif)

    def _wall(self) -> float:
        return self._wall_offset + (time.perf_counter() - self._t_start if self._t_start else 0.0)

    def _round_row(self, ts: mappo.TrainState, theta: jax.Array, info: dict | None,
                   evaluation: tuple[np.ndarray, dict] | None, seconds: float | None) -> dict:
        """The round's ``metrics.jsonl`` row: the current selector on the evaluation
        episodes, the ES generation's info, MAPPO's metrics, failures, throughput."""
        ret, env_metrics = evaluation or self.rollout_stats(theta[None], self.keys.eval,
                                                            actor=ts.actor)
        now = time.perf_counter()
        dt, self._t_round = now - self._t_round if seconds is None else seconds, now
        row: dict[str, Any] = {"round": self.round, "env_steps": int(ts.env_steps),
                               "selector_fitness": float(ret.mean()),
                               "selector_fitness_std": float(ret.std())}
        row.update({f"env/{k}": float(np.mean(v)) for k, v in env_metrics.items()})
        names = {"fitness_best": "best_fitness", "fitness_mean": "mean_fitness",
                 "sigma": "sigma", "num_invalid": "num_invalid"}  # row column: ES info key
        row.update({col: None if info is None else info[k] for col, k in names.items()})
        self.flush_mappo()
        for k in self.round_metrics[0] if self.round_metrics else ():
            vals = [m[k] for m in self.round_metrics]
            row[f"mappo/{k}"] = (vals[-1] if k == "env_steps" else sum(vals)
                                 if k == "skipped_updates" else float(np.nanmean(vals))
                                 if np.isfinite(vals).any() else None)
        self.round_metrics = []
        if self.runtime.kind == "host":
            failures, self.runtime.failures = self.runtime.failures, []
            row["failed_members"] = sum(f["phase"] == "population" for f in failures)
            self.rundir.log_failures(self.round, failures)
        cfg = self.config
        steps = self.runtime.round_env_steps(
            cfg.grad_steps_per_outer * cfg.mappo.batch_size if cfg.trains_executor else 0,
            0 if info is None else cfg.es.num_candidates)
        row.update(sps=steps / dt if steps else None, round_time=dt, wall_time=self._wall())
        return clean(row)

    def _record(self, row: dict, theta: jax.Array) -> None:
        """Write the committed round: best selector, metrics row, TensorBoard, plot,
        checkpoint."""
        cfg, rd, r = self.config, self.rundir, row["round"]
        if row["selector_fitness"] is not None and row["selector_fitness"] > self.best_fitness:
            self.best_fitness = row["selector_fitness"]
            rd.save_best_selector(theta, {**self.checkpoint_metadata(),
                                          "fitness": self.best_fitness, "round": r})
        rd.append_metrics(row)
        rd.add_scalars(row, r)
        last = self.round >= self._end
        if self.round % cfg.plot_every == 0 or last:
            rd.save_plot(self.history, f"{cfg.env} ({cfg.mode}, seed {cfg.seed})", cfg.mode)
        if self.round % cfg.checkpoint_every == 0 or last:
            self.save_checkpoint()

    # --- checkpoints -----------------------------------------------------------------------
    def checkpoint_metadata(self) -> dict[str, Any]:
        """What every checkpoint and selector file of the run records about it."""
        return {"env": self.config.env, "config": self.config.to_dict(),
                "selector_size": self.selector_size, "es_params": self.config.es_params,
                "skill_names": list(self.skill_names)}

    def checkpoint_expect(self) -> dict[str, Any]:
        """The metadata a checkpoint must match to be loaded into this trainer."""
        c = self.config.to_dict()
        keep = ("env", "env_kwargs", "seed", "es", "mappo", "actor", "critic", "num_skills")
        return {"env": self.config.env, "config": {k: c[k] for k in keep}}

    def checkpoint_tree(self) -> dict[str, Any]:
        """The state a checkpoint holds (also the template a load fills)."""
        return {"train_state": self.ts, "es_state": self.es_state, "round": int(self.round),
                "best_fitness": float(self.best_fitness)}

    def save_checkpoint(self) -> Path:
        """Checkpoint the whole state (TrainState, ESState, round, best fitness, history)."""
        self.rundir.ensure(self.config.to_dict())
        meta = {**self.checkpoint_metadata(), "history": clean(self.history),
                "wall_time": self._wall()}
        return self.rundir.save_checkpoint(self.round, self.checkpoint_tree(), meta)

    def _restore(self, tree: dict[str, Any], meta: dict[str, Any]) -> None:
        self.ts, self.es_state = committed(tree["train_state"]), committed(tree["es_state"])
        self.round, self.best_fitness = int(tree["round"]), float(tree["best_fitness"])
        self.history = list(meta.get("history", []))
        self._wall_offset = float(meta.get("wall_time") or 0.0)
        self._fresh = False

    # --- episodes to pictures ------------------------------------------------------------
    def episode_frames(self, theta: jax.Array | None = None, seed: int | None = None,
                       actor: FeudalActor | None = None) -> list[np.ndarray]:
        """Frames of one deterministic episode with ``actor`` (default: the current one)
        and selector ``theta`` (default: the actor's)."""
        actor = self.ts.actor if actor is None else actor
        if theta is not None:
            actor = set_es_theta(actor, jnp.asarray(theta), self.config.es_params)
        seed = self.config.seed if seed is None else seed
        return self.runtime.episode_frames(actor, jax.random.key(seed), seed)

    def write_gif(self, path: str | os.PathLike, theta: jax.Array | None = None,
                  seed: int | None = None) -> Path | None:
        """Deterministic episode GIF (env · mode · run, steps, legend); None (logged) if not."""
        from envs.render import write_gif
        try:
            frames = self.episode_frames(theta, seed)
        except (ValueError, NotImplementedError, AttributeError) as e:
            log.warning("no GIF: %s", e)
            return None
        run, core = Path(self.run_dir or "-").name, self.env.core
        return write_gif(frames, path, title=f"{self.config.env} · {self.config.mode} · {run}",
                         legend=getattr(core, "render_legend", None))

    # --- resume ---------------------------------------------------------------------------
    @classmethod
    def resume(cls, run_dir: str | os.PathLike, n_outer: int | None = None,
               env: str | None = None, at_round: int | None = None) -> ESTrainer:
        """A trainer continuing ``run_dir`` from its newest checkpoint.

        The config comes from the checkpoint (``n_outer`` may be raised); the template is
        a freshly built trainer, so a checkpoint of another env or architecture is
        refused naming the difference. ``metrics.jsonl`` is rewritten to the checkpoint's
        history (rounds after the checkpoint will be recomputed identically).

        The checkpoint is data: a ``"module:attr"`` env it names is not imported unless
        the caller names the same id as ``env`` (:class:`UntrustedEnvError` otherwise).
        ``at_round`` resumes from that round's checkpoint instead of the newest.
        """
        run_dir = Path(run_dir)
        mgr = checkpoint.CheckpointManager(run_dir)
        latest = mgr.latest() if at_round is None else mgr.path(at_round)
        if at_round is not None and not latest.is_file():
            raise ValueError(f"cannot resume {run_dir} at round {at_round}: no {latest.name}")
        if latest is None:
            raise ValueError(f"cannot resume {run_dir}: no checkpoint "
                             f"(ckpt_*{checkpoint.SUFFIX}) in it")
        try:
            meta = checkpoint.read_metadata(latest)
        except checkpoint.CheckpointError as e:  # say what is left rather than skip silently
            older = ", ".join(p.name for p in reversed(mgr.all()[:-1]))
            raise checkpoint.CheckpointError(
                f"{e}" + (f" (older checkpoints in this run: {older}; move the damaged one "
                          "away to resume from the previous)" if older else "")) from None
        config = _stored_config(latest, meta)
        if env is not None and env != config.env:
            raise ValueError(f"{run_dir} is a run of env {config.env!r}; resuming continues "
                             f"that env (env={env!r} may only repeat it)")
        if n_outer is not None:
            config = dataclasses.replace(config, n_outer=int(n_outer))
        resolved = resolve_stored_env(config.env, config.env_kwargs, config.imports, env, latest)
        trainer = cls(config, run_dir, resolved=resolved)
        template, expect = trainer.checkpoint_tree(), trainer.checkpoint_expect()
        tree, meta = (mgr.load_latest(template, expect) if at_round is None
                      else checkpoint.load(latest, template, expect))
        trainer._restore(tree, meta)
        if n_outer is not None:  # the run's config.json says what it now runs to
            trainer.rundir.write_config(config.to_dict())
        trainer.rundir.rewrite_metrics(trainer.history)
        return trainer

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, env: str | None = None) -> ESTrainer:
        """A trainer holding the state of one checkpoint file (for eval / render).

        ``env`` evaluates on another env id; its networks must have the same shapes (the
        checkpoint's structure is still checked leaf by leaf). The checkpoint is data: a
        ``"module:attr"`` env it names is imported only when the caller passes that id as
        ``env`` (:class:`UntrustedEnvError` otherwise)."""
        path = Path(path)
        config = _stored_config(path, checkpoint.read_metadata(path))
        same_env = env is None or env == config.env
        if env is not None:
            config = dataclasses.replace(config, env=env)
        resolved = resolve_stored_env(config.env, config.env_kwargs, config.imports, env, path)
        trainer = cls(config, path.parent, resolved=resolved)
        expect = trainer.checkpoint_expect() if same_env else None
        trainer._restore(*checkpoint.load(path, trainer.checkpoint_tree(), expect=expect))
        return trainer


def _stored_config(path: Path, meta: dict[str, Any]) -> TrainerConfig:
    if "config" not in meta:
        raise checkpoint.CheckpointError(f"{path} has no trainer config in its metadata")
    return TrainerConfig.from_dict(meta["config"])
