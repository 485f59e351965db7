"""``ESTrainer``: one run of a config, one seed or many seeds in one program.

Each round is :func:`feudal_es.loop.merl_round` — gradient steps on the executor, the
learner's ES leaves injected into the ES mean, one ES generation on team fitness, the
evolved leaves written back — over functions chosen once from the config
(:meth:`ESTrainer.round_fns`): the runtime's for one seed (:mod:`feudal_es.runtime`: the
pure-JAX path for functional envs, the host path for any PettingZoo ``ParallelEnv``), or
the same pieces ``vmap``-ped over a leading seed axis for many (the purejaxrl way: seeds
as a batch axis, split over the devices; :func:`feudal_es.functions.seed_functions`).
Each seed's part of a round goes to its :class:`~feudal_es.recorder.RunRecorder` (rows,
best selector, plot, checkpoints); many seeds write ``run_dir/seed_<s>/``, complete runs.

Keys come from each seed by a fixed derivation (:mod:`feudal_es.keys`): a resumed run
repeats the uninterrupted one exactly (same program and machine); many seeds equal the
same seeds one by one up to float reassociation (another program).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from agents import FeudalActor
from feudal_es import distributed, es, mappo
from feudal_es.atomic import atomic_write
from feudal_es.config import MODES, TrainerConfig, parse_assignment
from feudal_es.functions import SeedFunctions, seed_functions
from feudal_es.keys import KeySchedule, chain_key, root_keys
from feudal_es.loop import EveryCandidateFailed, RoundFns, RoundState, merl_round
from feudal_es.padding import padded
from feudal_es.recorder import Progress, RunRecorder, round_row, step_metrics
from feudal_es.resolve import ResolvedEnv, UntrustedEnvError, apply_env_defaults, resolve_env
from feudal_es.round_fns import round_fns
from feudal_es.rundir import check_new_run_dir, clean, default_run_dir, write_config
from feudal_es.runlock import RunLock
from feudal_es.runtime import make_runtime
from feudal_es.sharding import committed
from feudal_es.signals import StopOnSignals, TrainingInterrupted
from feudal_es.theta import es_theta, selector_theta, set_es_theta

__all__ = ["MODES", "ESTrainer", "KeySchedule", "ResolvedEnv", "TrainerConfig",
           "TrainingInterrupted", "UntrustedEnvError", "chain_key", "parse_assignment",
           "resolve_env", "root_keys"]

log = logging.getLogger("feudal_es.trainer")


def stack(trees: list[Any]) -> Any:
    """Pytrees stacked along a new leading (seed) axis; non-array leaves from the first."""
    arrays = [eqx.filter(t, eqx.is_array) for t in trees]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *arrays)
    return eqx.combine(stacked, eqx.filter(trees[0], eqx.is_array, inverse=True))


class ESTrainer:
    """Builds everything a run needs from a :class:`TrainerConfig` and runs it.

    ``config.seeds`` with two or more seeds trains them all in one program (JAX path
    only); otherwise the one seed ``config.seed`` (or ``config.seeds[0]``).

    Attributes: ``config`` (filled by the env's defaults), ``seeds``, ``env``, ``defaults``
    (:class:`~feudal_es.env_defaults.EnvDefaults`: what was filled, and why), ``runtime``
    (its path's :class:`~feudal_es.runtime.JaxRuntime` or
    :class:`~feudal_es.runtime.HostRuntime`), ``state`` (:class:`RoundState`: the MAPPO
    train state, whose actor holds the current selector, and the ES state; stacked over
    seeds when there are several), ``round`` (rounds completed), ``histories`` (per seed,
    one dict per round: the rows of ``metrics.jsonl``), ``recorders`` (per seed),
    ``run_dir``. One seed also has ``ts``, ``es_state``, ``keys``, ``history``,
    ``best_fitness`` and ``rundir``; ``env_overrides`` and ``stored_trainer``: see
    :meth:`from_checkpoint` (``{}`` and None otherwise).
    """

    def __init__(self, config: TrainerConfig, run_dir: str | os.PathLike | None = None,
                 resolved: ResolvedEnv | None = None):
        if not isinstance(config, TrainerConfig):
            raise TypeError(f"config must be a TrainerConfig, got {type(config).__name__}")
        if len(config.seeds) == 1:  # one seed listed: a one-seed run of that seed
            config = config.for_seed(config.seeds[0])
        self.seeds = config.run_seeds
        self.many = len(self.seeds) > 1
        self.env = padded(resolved or resolve_env(config.env, config.env_kwargs), config)
        # the settings the config leaves open, by the env's observation kind and skills
        config, self.defaults = apply_env_defaults(config, self.env)
        self.config = config
        if self.many and self.env.kind != "jax":
            raise ValueError(
                f"env {config.env!r} runs on the host path (a Python PettingZoo env): many "
                "seeds in one program need a functional (JAX) env; train its seeds one at "
                "a time (TrainerConfig.seed)")
        configs = [config.for_seed(s) for s in self.seeds] if self.many else [config]
        self.runtime = make_runtime(configs[0], self.env, len(self.seeds))
        self.run_dir = distributed.own_run_dir(Path(run_dir) if run_dir is not None else
                                               default_run_dir(config.env, config.mode))
        self._keys = [root_keys(s) for s in self.seeds]
        states = [self._initial_state(k) for k in self._keys]
        actor = states[0].learner.actor
        self.selector_size = int(selector_theta(actor).shape[0])
        self.theta_size = int(self.theta_of(actor).shape[0])  # what ES evolves
        self.batched: SeedFunctions | None = None
        if self.many:
            self.batched = seed_functions(configs[0], self.runtime.core, len(self.seeds))
            states = [self.batched.place(stack(states))]
        self.state = states[0]
        self.recorders = [RunRecorder(c, self.run_dir / f"seed_{c.seed}" if self.many
                                      else self.run_dir) for c in configs]
        self.round = 0
        self.histories: list[list[dict]] = [[] for _ in self.seeds]
        self._fresh = True  # built from a config, not restored from a checkpoint
        self.env_overrides, self.stored_trainer = {}, None  # see from_checkpoint
        self._chain: tuple[int, list[jax.Array]] = (0, [k.es for k in self._keys])
        self._t_start, self._end, self._pbar = 0.0, 0, None  # _pbar: a Progress
        self._stop = StopOnSignals(lambda: self.round)
        self.fns = self.round_fns()

    def _initial_state(self, keys: KeySchedule) -> RoundState:
        ts = committed(self.runtime.init_train_state(keys.init))
        return RoundState(ts, committed(es.init(self.theta_of(ts.actor), self.config.es)))

    # --- one seed's view -------------------------------------------------------------
    def _one(self, what: str) -> None:
        if self.many:
            raise ValueError(f"{what} is one seed's; this trainer has seeds "
                             f"{list(self.seeds)} (see histories, recorders, seed_states())")

    @property
    def ts(self) -> mappo.TrainState:
        """The MAPPO train state (stacked over seeds when there are several)."""
        return self.state.learner

    @ts.setter
    def ts(self, value: mappo.TrainState) -> None:
        self.state = self.state._replace(learner=value)

    @property
    def es_state(self) -> es.ESState:
        """The ES state (stacked over seeds when there are several)."""
        return self.state.es

    @property
    def keys(self) -> KeySchedule:
        self._one("keys")
        return self._keys[0]

    @property
    def history(self) -> list[dict]:
        self._one("history")
        return self.histories[0]

    @property
    def best_fitness(self) -> float:
        self._one("best_fitness")
        return self.recorders[0].best_fitness

    @property
    def rundir(self) -> Any:
        self._one("rundir")
        return self.recorders[0].rundir

    def seed_states(self) -> list[RoundState]:
        """The current state of each seed (one jitted unstack when batched)."""
        if not self.many:
            return [self.state]
        return [RoundState(*s) for s in self.batched.unstack(tuple(self.state))]

    # --- fitness (one seed, or any actor) ---------------------------------------------------
    def theta_of(self, actor: FeudalActor) -> jax.Array:
        """What ES evolves (``config.es_params``: the selector, or the whole actor)."""
        return es_theta(actor, self.config.es_params)

    def result_theta(self, state: RoundState | None = None) -> jax.Array:
        """What ES evolves of the run's *result* (``state``: one seed's; default: the
        current state, stacked over seeds when batched): the learner's actor's
        (:meth:`theta_of`), or the ES mean in a mode that migrates the learner into
        whole-actor ES (the learner only a source of candidates: :mod:`~.migration`)."""
        stacked = state is None and self.many
        state = self.state if state is None else state
        if self.config.plan.migrates:
            return state.es.mean
        if stacked:
            return self.batched.selector(state.learner.actor)
        return self.theta_of(state.learner.actor)

    @property
    def skill_names(self) -> tuple[str, ...]:
        return tuple(self.runtime.skill_names)

    def round_eval_key(self, round_: int | None = None) -> jax.Array:
        """The key of round ``round_``'s fitness episodes on the host path."""
        return jax.random.fold_in(self.keys.eval, self.round if round_ is None else round_)

    def rollout_stats(self, thetas: jax.Array, key: jax.Array, actor: FeudalActor | None = None,
                      episodes: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Team returns ``[P, E]`` and final-step env metrics ``{name: [P, E]}`` of
        ``thetas[P, D]`` on the ``E`` episodes derived from ``key`` (same for all)."""
        if actor is None:
            self._one("the default actor")
            actor = self.ts.actor
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

    def evaluate(self, key: jax.Array, episodes: int) -> tuple[np.ndarray, dict]:
        """Every seed's current selector on the ``episodes`` episodes of
        ``split(key, episodes)`` (the same for every seed): team returns ``[S, E]`` and
        final env metrics ``{name: [S, E]}``."""
        if not self.many:
            ret, metrics = self.rollout_stats(self.result_theta()[None], key,
                                              episodes=episodes)
        else:
            b = self.batched
            self.runtime.check_evaluation(len(self.seeds), episodes, len(self.seeds))
            keys = b.place(jnp.stack([jax.random.split(key, episodes)] * len(self.seeds)))
            ret, metrics = jax.device_get(b.returns(self.ts.actor,
                                                    self.result_theta()[:, None], keys))
            ret, metrics = ret[:, 0], {k: v[:, 0] for k, v in metrics.items()}
        return np.asarray(ret), {k: np.asarray(v) for k, v in metrics.items()}

    # --- the round's functions, chosen once ---------------------------------------------
    def round_fns(self) -> RoundFns:
        """The pieces of :func:`~feudal_es.loop.merl_round` for this trainer
        (:func:`feudal_es.round_fns.round_fns`)."""
        return round_fns(self.config, self.runtime, self.batched,
                         [k.eval for k in self._keys])

    def round_keys(self, round_: int) -> tuple[Any, jax.Array | None]:
        """Round ``round_``'s keys: its ES generation's (each seed's ES key chain advanced
        ``round_`` times, then split; stacked over seeds) and, for one seed, the host
        path's fitness episodes' (:meth:`round_eval_key`)."""
        at, chain = self._chain
        if at != round_:
            chain = [chain_key(k.es, round_) for k in self._keys]
        pairs = [jax.random.split(c) for c in chain]
        self._chain = (round_ + 1, [p[0] for p in pairs])
        if self.many:
            return self.batched.place(jnp.stack([p[1] for p in pairs])), None
        return pairs[0][1], jax.random.fold_in(self._keys[0].eval, round_)

    # --- run ---------------------------------------------------------------------------
    def run(self, rounds: int | None = None, progress: bool = False,
            on_round: Callable[[Any], None] | None = None) -> Any:
        """Run up to ``rounds`` more outer rounds (default: until ``config.n_outer``).

        Writes ``config.json``, one ``metrics.jsonl`` row per round, the learning curve,
        checkpoints every ``checkpoint_every`` rounds and at the end, the best selector
        whenever the selector's fitness improves, and (when the run reaches ``n_outer``)
        the final episode GIF; per seed with several. ``on_round`` gets each round's row
        (a list of rows, one per seed, with several). Returns :attr:`history` (one seed)
        or :attr:`histories`.

        Ctrl-C (SIGINT) or SIGTERM, on the main thread: the current round is finished and
        checkpointed, then :class:`TrainingInterrupted` (a ``KeyboardInterrupt``) is
        raised; a second signal stops at once, keeping every completed round. A fresh
        trainer refuses a run directory that already holds checkpoints (resume it); its
        lock is held while rounds run (:class:`~feudal_es.runlock.RunDirInUse` if taken).
        """
        start = self.round
        end = self.config.n_outer if rounds is None else min(self.config.n_outer,
                                                              start + int(rounds))
        if end > start:
            with RunLock(self.run_dir):  # one writer per run directory
                self._start(end, progress)
                try:
                    with self._stop:
                        for r in range(start, end):
                            rows = self._round(r)
                            if on_round is not None:
                                on_round(rows if self.many else rows[0])
                            if self._stop.signum is not None and self.round < end:
                                self.save_checkpoint(if_new=True)
                                self._stop.stop(self.round)
                except KeyboardInterrupt:
                    if self.round > start:
                        self.save_checkpoint(if_new=True)
                    raise
                except FloatingPointError as e:  # every ES member non-finite: none written
                    raise self._unwritten(e) from None
                finally:
                    self._stop_clock()
                self._final_gifs()
        return self.histories if self.many else self.history

    def _start(self, end: int, progress: bool) -> None:
        fresh = self._fresh and self.round == 0
        if fresh and self.many:
            check_new_run_dir(self.run_dir)
            self.write_config()
        for rec in self.recorders:
            rec.start(fresh)
        self._fresh, self._end = False, end
        self._t_start = time.perf_counter()
        if progress:
            many = f" x{len(self.seeds)} seeds" if self.many else ""
            self._pbar = Progress(self.config.n_outer, self.round, self.config.mode + many)

    def _stop_clock(self) -> None:
        wall = time.perf_counter() - self._t_start
        for rec in self.recorders:
            rec.wall_offset += wall
            rec.rundir.flush()
        self._t_start = 0.0
        if self._pbar is not None:
            self._pbar.close()
            self._pbar = None

    def _wall(self, rec: RunRecorder) -> float:
        return rec.wall_offset + (time.perf_counter() - self._t_start if self._t_start else 0.0)

    def _round(self, r: int) -> list[dict]:
        """Round ``r``: :func:`merl_round`, then each seed's row committed and written."""
        cfg, t0 = self.config, time.perf_counter()
        state, out = merl_round(self.fns, self.state, self.round_keys(r))
        states = [state] if not self.many else [
            RoundState(*s) for s in self.batched.unstack(tuple(state))]
        dt = time.perf_counter() - t0
        grad = len(out.steps) * cfg.mappo.batch_size
        env_steps = self.runtime.round_env_steps(grad, 0 if out.info is None
                                                 else cfg.es.num_candidates)
        failures = None
        if self.runtime.kind == "host":
            failures, self.runtime.failures = self.runtime.failures, []
        rows = []
        for i, rec in enumerate(self.recorders):
            pick = (lambda v: v) if not self.many else (lambda v, i=i: v[i])
            steps = step_metrics(out.steps, i if self.many else None,
                                 grad / max(out.seconds["gradient"], 1e-9))
            rec.warn_skipped(r, steps)
            info = None if out.info is None else {
                k: (int if k == "num_invalid" else float)(pick(v)) for k, v in out.info.items()}
            ret, metrics = out.evaluation
            if failures is not None:
                rec.rundir.log_failures(r, failures)
            rows.append(round_row(
                r, states[i].learner.env_steps, (pick(ret), jax.tree.map(pick, metrics)),
                info, steps, None if failures is None
                else sum(f["phase"] == "population" for f in failures),
                env_steps / dt if env_steps else None, dt, self._wall(rec)))
        histories = [[*h, row] for h, row in zip(self.histories, rows, strict=True)]
        # commit the round in one statement (an interrupt sees all of it or none)
        self.state, self.round, self.histories = state, r + 1, histories
        last = self.round >= self._end
        for i, rec in enumerate(self.recorders):
            rec.record(histories[i], self.result_theta(states[i]),
                       self.checkpoint_metadata(i),
                       lambda i=i: self._save(i, states[i]), last)
        if self._pbar is not None:
            self._pbar.update(rows, self.recorders)
        return rows

    def _unwritten(self, err: FloatingPointError) -> FloatingPointError:
        """The error for a round that stopped before writing (every ES member
        non-finite), naming the last checkpoint."""
        cause = str(err)
        if isinstance(err, EveryCandidateFailed) and self.many:
            cause += f" (seeds {[self.seeds[i] for i in err.batch]})"
        latest = self.recorders[0].rundir.checkpoints.latest()
        return FloatingPointError(
            f"round {self.round}: {cause}. The run stopped without writing this round; "
            f"{'the last checkpoint is ' + str(latest) if latest else 'no checkpoint yet'}")

    def _final_gifs(self) -> None:
        if self.round >= self.config.n_outer and self.config.gif:
            for i, rec in enumerate(self.recorders):
                try:
                    self.write_gif(rec.rundir.gif, index=i)
                except OSError as e:  # the run is complete and saved; the picture is not
                    log.warning("no GIF: cannot write %s (%s); render it with: feudal-es "
                                "render %s --out %s", e.filename, e.strerror,
                                rec.rundir.path, rec.rundir.gif)

    # --- checkpoints -----------------------------------------------------------------------
    def write_config(self) -> None:
        """``run_dir/config.json`` of a many-seed run: the config with every seed (each
        seed directory holds its own one-seed config)."""
        write_config(self.run_dir / "config.json", self.config.to_dict())

    def checkpoint_metadata(self, index: int = 0) -> dict[str, Any]:
        """What every checkpoint and selector file of seed ``index`` records about it."""
        cfg = self.recorders[index].config
        return {"env": cfg.env, "config": cfg.to_dict(), "selector_size": self.selector_size,
                "es_params": cfg.es_params, "skill_names": list(self.skill_names)}

    def checkpoint_expect(self, index: int = 0) -> dict[str, Any]:
        """The metadata a checkpoint must match to be loaded as seed ``index``."""
        c = self.recorders[index].config.to_dict()
        keep = ("env", "env_kwargs", "seed", "es", "mappo", "actor", "critic", "num_skills")
        return {"env": c["env"], "config": {k: c[k] for k in keep}}

    def checkpoint_tree(self, index: int = 0, state: RoundState | None = None
                        ) -> dict[str, Any]:
        """The state a checkpoint of seed ``index`` holds (also the template a load
        fills); a collective under ``jax.distributed`` (:func:`distributed.gather`)."""
        state = distributed.gather(self.seed_states()[index] if state is None else state)
        return {"train_state": state.learner, "es_state": state.es, "round": int(self.round),
                "best_fitness": float(self.recorders[index].best_fitness)}

    def _save(self, index: int, state: RoundState | None = None) -> Path:
        rec = self.recorders[index]
        rec.rundir.ensure(rec.config.to_dict())
        meta = {**self.checkpoint_metadata(index), "history": clean(self.histories[index]),
                "wall_time": self._wall(rec)}
        return rec.rundir.save_checkpoint(self.round, self.checkpoint_tree(index, state), meta)

    def save_checkpoint(self, if_new: bool = False) -> Path | list[Path]:
        """Checkpoint every seed's whole state (TrainState, ESState, round, best fitness,
        history); ``if_new``: only seeds whose newest checkpoint is not this round's.
        Returns the path (one seed) or the paths."""
        states = self.seed_states()
        paths = [rec.rundir.checkpoints.path(self.round)
                 if if_new and rec.rundir.has_checkpoint(self.round) else self._save(i, s)
                 for i, (rec, s) in enumerate(zip(self.recorders, states, strict=True))]
        return paths if self.many else paths[0]

    def restore(self, index: int, tree: dict[str, Any], meta: dict[str, Any]) -> RoundState:
        """Take seed ``index``'s round, best fitness, history and wall time from a loaded
        checkpoint; returns its state (the caller puts it in place)."""
        rec = self.recorders[index]
        self.round, rec.best_fitness = int(tree["round"]), float(tree["best_fitness"])
        self.histories[index] = list(meta.get("history", []))
        rec.wall_offset = float(meta.get("wall_time") or 0.0)
        self._fresh = False
        return RoundState(committed(tree["train_state"]), committed(tree["es_state"]))

    # --- episodes to pictures ------------------------------------------------------------
    def episode_frames(self, theta: jax.Array | None = None, seed: int | None = None,
                       actor: FeudalActor | None = None, index: int = 0
                       ) -> list[np.ndarray]:
        """Frames of one deterministic episode with ``actor`` (default: seed ``index``'s
        current one) and ES parameters ``theta`` (default: the actor's)."""
        return self.episode_record(theta, seed, actor, index)[0]

    def episode_record(self, theta: jax.Array | None = None, seed: int | None = None,
                       actor: FeudalActor | None = None, index: int = 0
                       ) -> tuple[list[np.ndarray], dict[str, list[float | None]]]:
        """:meth:`episode_frames` and each frame's header values (running team reward,
        env metrics: :func:`envs.gif.episode_info`)."""
        if actor is None:
            state = self.seed_states()[index]
            actor = state.learner.actor
            if theta is None and self.config.plan.migrates:
                theta = state.es.mean
        if theta is not None:
            actor = set_es_theta(actor, jnp.asarray(theta), self.config.es_params)
        seed = self.seeds[index] if seed is None else seed
        return self.runtime.episode_record(actor, jax.random.key(seed), seed)

    def write_gif(self, path: str | os.PathLike, theta: jax.Array | None = None,
                  seed: int | None = None, index: int = 0) -> Path | None:
        """Deterministic episode GIF of seed ``index``: title env · mode · run, and per frame
        the step, the running team reward and the env's metrics, legend below; None
        (logged) if the env cannot render."""
        from envs.render import encode_gif

        try:
            frames, info = self.episode_record(theta, seed, index=index)
        except (ValueError, NotImplementedError, AttributeError) as e:
            log.warning("no GIF: %s", e)
            return None
        run, core = self.recorders[index].rundir.path.name, self.env.core
        return atomic_write(path, lambda f: encode_gif(
            frames, f, title=f"{self.config.env} · {self.config.mode} · {run}",
            legend=getattr(core, "render_legend", None), info=info))

    # --- resume ---------------------------------------------------------------------------
    @classmethod
    def resume(cls, run_dir: str | os.PathLike, n_outer: int | None = None,
               env: str | None = None, at_round: int | None = None) -> ESTrainer:
        """A trainer continuing ``run_dir`` (one seed, or a many-seed run's ``seed_<s>/``
        directories) from its newest checkpoint (:func:`feudal_es.restore.resume`)."""
        from feudal_es.restore import resume

        return resume(cls, run_dir, n_outer=n_outer, env=env, at_round=at_round)

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, env: str | None = None,
                        env_kwargs: dict[str, Any] | None = None) -> ESTrainer:
        """A one-seed trainer of one checkpoint file, for eval and render (on other
        ``env_kwargs``; :func:`feudal_es.restore.from_checkpoint`)."""
        from feudal_es.restore import from_checkpoint

        return from_checkpoint(cls, path, env=env, env_kwargs=env_kwargs)
