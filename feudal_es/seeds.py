"""Many seeds of one config trained in one program, as purejaxrl does.

The train state and ES state of every seed are stacked along a leading seed axis; the
MAPPO train step, the ES generation and the evaluation episodes are ``vmap``-ped over it
and jitted once, and with several devices (``import feudal_es`` gives one CPU device per
core) the seeds are split over them (:func:`feudal_es.sharding.shard_batched`), so a
2-core CPU trains two seeds in about the time of one. Each seed is still its own run:
:class:`MultiSeedTrainer` keeps one :class:`~feudal_es.trainer.ESTrainer` per seed for
its run directory ``run_dir/seed_<s>/`` (config, metrics, checkpoints, best selector,
GIF), which ``feudal-es eval``, ``render`` and ``--resume`` read like any single run.
Every round is exactly the single-seed round of each seed (same keys, same order of
steps); results equal one-by-one runs up to float reassociation (another program).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from agents import es_theta, set_es_theta
from feudal_es import checkpoint, es, mappo, sharding
from feudal_es.atomic import atomic_write_text
from feudal_es.config import TrainerConfig
from feudal_es.keys import round_key
from feudal_es.resolve import resolve_env
from feudal_es.rollout import make_population_rollouts, population_chunk
from feudal_es.rundir import LABELS, check_new_run_dir, default_run_dir
from feudal_es.signals import StopOnSignals
from feudal_es.trainer import ESTrainer

__all__ = ["MultiSeedTrainer", "SeedFunctions", "seed_dirs", "seed_functions"]

_SEED_DIR = re.compile(r"^seed_(\d+)$")


@dataclasses.dataclass
class SeedFunctions:
    """The jitted, seed-batched functions of one setup (every argument and result has a
    leading seed axis)."""

    guarded_step: Callable  # ts -> (ts, metrics, skipped): mappo.guarded's, batched
    generation: Callable  # (key, es_state, actor) -> (es_state, info)
    returns: Callable  # (actor, thetas[P, D], keys[E]) -> (team_return[P, E], metrics)
    selector: Callable  # actor -> theta[D] (what ES evolves: config.es_params)
    with_selector: Callable  # (ts, theta[D]) -> ts with theta written into its actor
    place: Callable  # a stacked pytree -> where the seeds live (split over the mesh)
    unstack: Callable  # a stacked pytree -> one tree per seed (one jitted call)
    devices: int  # devices the seeds are split over


def _seed_devices(num_seeds: int) -> int:
    """The most devices (of ``jax.devices()``) that split ``num_seeds`` evenly."""
    return max(d for d in range(1, len(jax.devices()) + 1) if num_seeds % d == 0)


_CACHE: dict[str, SeedFunctions] = {}


def seed_functions(config: TrainerConfig, core: Any, num_seeds: int) -> SeedFunctions:
    """The seed-batched functions for ``config`` (cached per process like
    :func:`feudal_es.rollout.jax_functions`). The train step is one sharded jit when the
    MAPPO update is fused; the split update (a CNN actor) is vmapped piece by piece."""
    c = config.to_dict()
    key = json.dumps({**{k: c[k] for k in ("env", "env_kwargs", "mappo", "es", "episodes",
                                           "deterministic_eval")},
                      "seeds": num_seeds, "chunk": population_chunk(config),
                      "params": config.es_params,
                      "fused": mappo.uses_fused_update(config.mappo, core.observation_space,
                                                       config.actor)}, sort_keys=True)
    if key in _CACHE:
        return _CACHE[key]
    mcfg, es_cfg, eps = config.mappo, config.es, config.episodes
    params = config.es_params
    rollouts = make_population_rollouts(core, mcfg.selector_period, config.deterministic_eval,
                                        population_chunk(config), params)

    def generation(key: jax.Array, state: es.ESState, actor: Any):
        def fitness(thetas: jax.Array, k: jax.Array) -> jax.Array:
            return rollouts(actor, thetas, jax.random.split(k, eps))[0].mean(axis=1)

        return es.generation(key, state, fitness, es_cfg)

    fused = mappo.uses_fused_update(mcfg, core.observation_space, config.actor)
    devices = _seed_devices(num_seeds) if fused else 1  # the split update: one device
    mesh = (sharding.population_mesh(jax.devices()[:devices], axis=sharding.SEED_AXIS)
            if devices > 1 else None)

    def batched(fn: Callable) -> Callable:
        fn = eqx.filter_vmap(fn)
        return eqx.filter_jit(fn if mesh is None else sharding.shard_batched(fn, mesh))

    # the step and its non-finite guard: one program with the fused update
    guarded_step = (batched(mappo.guarded(lambda ts: mappo.fused_train_step(core, ts, mcfg)))
                    if fused else mappo.guarded(
                        eqx.filter_vmap(mappo.make_train_step(core, mcfg, config.actor)),
                        batched(mappo.keep_finite)))
    if mesh is None:
        place = lambda tree: tree
    else:
        where = sharding.batch_sharding(mesh)
        place = lambda tree: jax.tree.map(
            lambda x: jax.device_put(x, where) if eqx.is_array(x) else x, tree)
    fns = SeedFunctions(
        guarded_step=guarded_step,
        generation=batched(generation), returns=batched(rollouts),
        selector=batched(lambda actor: es_theta(actor, params)),
        with_selector=batched(lambda ts, th: ts._replace(actor=set_es_theta(ts.actor, th,
                                                                            params))),
        place=place, unstack=eqx.filter_jit(lambda tree: [
            jax.tree.map(lambda x, i=i: x[i], tree) for i in range(num_seeds)]),
        devices=devices)
    _CACHE[key] = fns
    return fns


def seed_dirs(run_dir: str | Path) -> dict[int, Path]:
    """The seed subdirectories ``seed_<s>`` of a many-seed run directory, by seed."""
    run_dir = Path(run_dir)
    found = {}
    if run_dir.is_dir():
        for p in run_dir.iterdir():
            m = _SEED_DIR.match(p.name)
            if m and p.is_dir():
                found[int(m.group(1))] = p
    return dict(sorted(found.items()))


def _stack(trees: list[Any]) -> Any:
    arrays = [eqx.filter(t, eqx.is_array) for t in trees]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *arrays)
    return eqx.combine(stacked, eqx.filter(trees[0], eqx.is_array, inverse=True))


class MultiSeedTrainer:
    """Trains every seed of ``config.seeds`` in one program (see the module docstring).

    Attributes: ``config`` (with ``seeds``), ``run_dir`` (``seed_<s>/`` below it),
    ``trainers`` (one :class:`ESTrainer` per seed: its run directory, history, the slices
    of the state after each round), ``ts`` and ``es_state`` (stacked over seeds).
    """

    def __init__(self, config: TrainerConfig, run_dir: str | Path | None = None,
                 trainers: list[ESTrainer] | None = None):
        if len(config.run_seeds) < 2:
            raise ValueError("MultiSeedTrainer trains two or more seeds (TrainerConfig.seeds);"
                             " use ESTrainer for one")
        self.config = config
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir(
            config.env, config.mode)
        if trainers is None:
            resolved = resolve_env(config.env, config.env_kwargs)
            if resolved.kind != "jax":
                raise ValueError(
                    f"env {config.env!r} runs on the host path (a Python PettingZoo env): "
                    "many seeds in one program need a functional (JAX) env; train its seeds "
                    "one at a time (TrainerConfig.seed)")
            trainers = [ESTrainer(config.for_seed(s), self.run_dir / f"seed_{s}", resolved)
                        for s in config.run_seeds]
        self.trainers = trainers
        self.fns = seed_functions(config, trainers[0].runtime.core, len(trainers))
        self.ts = self.fns.place(_stack([t.ts for t in trainers]))
        self.es_state = self.fns.place(_stack([t.es_state for t in trainers]))
        self._stop = StopOnSignals(lambda: self.round)

    @property
    def round(self) -> int:
        return self.trainers[0].round

    @property
    def histories(self) -> list[list[dict]]:
        """One history (the rows of its ``metrics.jsonl``) per seed."""
        return [t.history for t in self.trainers]

    # --- run -------------------------------------------------------------------------
    def run(self, rounds: int | None = None, progress: bool = False,
            on_round: Callable[[list[dict]], None] | None = None) -> list[list[dict]]:
        """Run up to ``rounds`` more rounds of every seed (default: to ``n_outer``), each
        seed writing its own run directory; ``on_round(rows)`` gets the seeds' rows.
        Signals stop all seeds after the round, checkpointed (see ESTrainer.run)."""
        cfg = self.config
        start = self.round
        end = cfg.n_outer if rounds is None else min(cfg.n_outer, start + int(rounds))
        if end <= start:
            return self.histories
        if start == 0:
            self._start_fresh()
        for t in self.trainers:
            t.start_rounds(end)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=cfg.n_outer, initial=start, unit="round", dynamic_ncols=True,
                       desc=f"{cfg.mode} x{len(self.trainers)} seeds")
        try:
            with self._stop:
                for r in range(start, end):
                    rows = self._round(r)
                    if bar is not None:
                        fit = np.mean([row["selector_fitness"] for row in rows])
                        best = np.mean([t.best_fitness for t in self.trainers])
                        bar.set_postfix({f"{LABELS['selector_fitness']} (seed mean)":
                                         f"{fit:.3g}", LABELS["best_selector"]: f"{best:.3g}"})
                        bar.update(1)
                    if on_round is not None:
                        on_round(rows)
                    if self._stop.signum is not None and self.round < end:
                        for t in self.trainers:
                            t.save_checkpoint_if_new()
                        self._stop.stop(self.round)
        except KeyboardInterrupt:
            for t in self.trainers:
                t.keep_completed(start)
            raise
        except FloatingPointError as e:
            raise self.trainers[0].unwritten_round(e) from None
        finally:
            if bar is not None:
                bar.close()
            for t in self.trainers:
                t.stop_rounds()
        for t in self.trainers:
            t.final_gif()
        return self.histories

    def _start_fresh(self) -> None:
        check_new_run_dir(self.run_dir)
        self.write_config()

    def write_config(self) -> None:
        """``run_dir/config.json``: the config with every seed (each seed directory holds
        its own one-seed config)."""
        atomic_write_text(self.run_dir / "config.json",
                          json.dumps(self.config.to_dict(), indent=2) + "\n")

    def _round(self, r: int) -> list[dict]:
        """Round ``r`` of every seed: what ``merl_coexist`` does for one, batched."""
        cfg, fns, trainers = self.config, self.fns, self.trainers
        t0 = time.perf_counter()
        ts, es_state, info = self.ts, self.es_state, None
        if cfg.trains_executor:  # dispatch every step, then fetch the metrics once
            pending = []
            for _ in range(cfg.grad_steps_per_outer):
                ts, metrics, skipped = fns.guarded_step(ts)
                pending.append((metrics, skipped))
            pending = jax.device_get(pending)
            sps = len(pending) * cfg.mappo.batch_size / (time.perf_counter() - t0)
            for metrics, skipped in pending:
                for i, t in enumerate(trainers):
                    t.record_mappo({**{k: float(v[i]) for k, v in metrics.items()},
                                    "skipped_updates": float(skipped[i]), "sps": sps})
        if cfg.runs_es:
            es_state = es_state._replace(mean=fns.selector(ts.actor))
            keys = fns.place(jnp.stack([round_key(t.keys, r) for t in trainers]))
            es_state, dev_info = fns.generation(keys, es_state, ts.actor)
            dev_info = jax.device_get(dev_info)
            failed = [t.config.seed for i, t in enumerate(trainers)
                      if int(dev_info["num_invalid"][i]) == cfg.es.num_candidates]
            if failed:
                raise FloatingPointError(f"ES round {r}: every candidate returned non-finite "
                                         f"fitness (seeds {failed})")
            info = [{k: (int if k == "num_invalid" else float)(v[i])
                     for k, v in dev_info.items()} for i in range(len(trainers))]
            ts = fns.with_selector(ts, es_state.mean)
        keys = fns.place(jnp.stack([jax.random.split(t.keys.eval, cfg.episodes)
                                    for t in trainers]))
        ret, env_metrics = jax.device_get(fns.returns(ts.actor, fns.selector(ts.actor)[:, None],
                                                      keys))
        self.ts, self.es_state = ts, es_state
        states = fns.unstack((ts, es_state))
        seconds = time.perf_counter() - t0
        return [t.finish_round(*states[i], None if info is None else info[i],
                               evaluation=(ret[i], {k: v[i] for k, v in env_metrics.items()}),
                               seconds=seconds)
                for i, t in enumerate(trainers)]

    # --- resume ---------------------------------------------------------------------------
    @classmethod
    def resume(cls, run_dir: str | Path, n_outer: int | None = None,
               env: str | None = None) -> MultiSeedTrainer:
        """Continue a many-seed run from its seeds' checkpoints. Seeds interrupted at
        different rounds (a kill between their checkpoint writes) all restart from the
        latest round every seed has a checkpoint of."""
        run_dir = Path(run_dir)
        dirs = seed_dirs(run_dir)
        if len(dirs) < 2:
            raise ValueError(f"{run_dir} is not a many-seed run (no seed_<s>/ directories)")
        latest = {s: checkpoint.CheckpointManager(d).latest() for s, d in dirs.items()}
        missing = [s for s, p in latest.items() if p is None]
        if missing:
            raise ValueError(f"cannot resume {run_dir}: seeds {missing} have no checkpoint")
        common = min(int(p.stem.split("_")[1]) for p in latest.values())
        trainers = [ESTrainer.resume(d, n_outer=n_outer, env=env, at_round=common)
                    for d in dirs.values()]
        config = dataclasses.replace(trainers[0].config, seeds=tuple(dirs))
        for s, t in zip(dirs, trainers, strict=True):
            if t.config != config.for_seed(s):
                raise ValueError(f"cannot resume {run_dir}: seed {s}'s config differs from "
                                 f"seed {next(iter(dirs))}'s beyond the seed")
        group = cls(config, run_dir, trainers)
        group.write_config()
        return group

