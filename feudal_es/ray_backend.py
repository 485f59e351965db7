"""Ray back-end for host (PettingZoo) envs: population members evaluated by Ray actors.

Envs that are plain Python (any PettingZoo ``ParallelEnv``) cannot be ``vmap``-ed, so the
population is spread over processes instead. Each Ray actor (a *worker*) owns its own env
instances and its own copy of the host evaluator (the jitted executor policy); a
generation ships the current executor once (``ray.put``), then one small task per member
(its selector ``theta``, the env seed and key) through :class:`ray.util.ActorPool`; only
the member's ``E`` episode returns (and any failure records) come back.

Fault tolerance is Ray's own: workers are actors with ``max_restarts`` and
``max_task_retries``, so a worker process that dies is restarted (its ``__init__`` rebuilds
the envs and the evaluator) and the tasks it held are re-run, so no member's fitness is
lost; only when the restarts are used up does :meth:`RayEvaluator.returns` raise, naming
the cause. Results equal the serial path for the same seeds: every member runs the same
episodes (env seeds ``seed + e``, keys ``fold_in(key, e)``) with the same code. What a
worker's evaluator would warn about (an episode cut at the time limit, a non-finite env
output) comes back with its results and is logged once by the driver, since workers'
logs do not reach it.

Install with ``pip install -e ".[ray]"`` from the feudal-es checkout (or ``pip install
'ray>=2.9'``). To use a cluster, call ``ray.init(address=...)`` (or set ``RAY_ADDRESS``)
before building the trainer; otherwise a local Ray instance is started.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

__all__ = ["RayEvaluator", "RayWorkersLost", "init_local", "registry_specs"]


def registry_specs(env_id: str) -> dict[tuple[str, str], Any]:
    """The PettingZoo registry entries of ``env_id`` (``{(kind, id): EnvSpec}``), so a
    worker process can register an env that the driver registered at run time (e.g. by
    ``--import``) before building it."""
    import pettingzoo

    out = {}
    for kind, registry in (("parallel", pettingzoo.parallel_registry),
                           ("aec", pettingzoo.aec_registry)):
        if env_id in registry:
            out[(kind, env_id)] = registry[env_id]
    return out


def init_local(num_cpus: int | None = None, **kwargs: Any) -> None:
    """``ray.init`` of a local instance (or of ``RAY_ADDRESS``) whose workers import from
    the driver's ``sys.path``, so envs from the user's own modules load in them."""
    import ray

    path = os.pathsep.join(p for p in sys.path if p)
    env_vars = {"PYTHONPATH": path + os.pathsep + os.environ.get("PYTHONPATH", "")}
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("log_to_driver", False)
    ray.init(num_cpus=num_cpus, runtime_env={"env_vars": env_vars}, **kwargs)



class RayWorkersLost(RuntimeError, ValueError):
    """The Ray workers could not start or died for good: a fault of the cluster the user
    runs on, not of feudal-es (a ``ValueError`` too, so the CLI prints it as one line)."""

class _Worker:
    """One Ray actor: env instances + a host evaluator, evaluating one member per call."""

    def __init__(self, make_evaluator: Callable[[], Any], specs: dict[tuple[str, str], Any]):
        import pettingzoo

        for (kind, env_id), spec in specs.items():
            registry = (pettingzoo.parallel_registry if kind == "parallel"
                        else pettingzoo.aec_registry)
            registry.setdefault(env_id, spec)
        self.evaluator = make_evaluator()
        self._version = -1
        self._actor = None

    def pid(self) -> int:
        return os.getpid()

    def evaluate(self, version: int, actor_box: list, member: int, theta: np.ndarray,
                 seed: int, key_data: np.ndarray, episodes: int, groups: bool = False
                 ) -> tuple[np.ndarray, list[dict], tuple[dict, str | None]]:
        """``(returns[E], failures, notices)`` of one member (``notices``: the worker's
        warnings so far, for the driver to log once); ``actor_box = [ObjectRef]`` of the
        executor, fetched only when ``version`` changes (once per generation).
        ``groups``: ``returns[E, G]``, every group's (``others="train"``)."""
        import ray

        if version != self._version:
            self._actor = ray.get(actor_box[0])
            self._version = version
        key = jax.random.wrap_key_data(np.asarray(key_data))
        extra = {"groups": True} if groups else {}
        row = self.evaluator.returns(self._actor, theta[None], seed, key, episodes=episodes,
                                     **extra)[0]
        failures = [{**f, "member": member} for f in getattr(self.evaluator, "failures", [])]
        notices = getattr(self.evaluator, "notices", None)
        return row, failures, ((dict(notices.seen), notices.source) if notices is not None
                               else ({}, None))


class RayEvaluator:
    """Evaluates a population on Ray workers; drop-in for the serial host evaluator's
    :meth:`returns` (same arguments, same ``[P, E]`` result, ``failures`` likewise).

    Args:
      make_evaluator: picklable zero-argument factory of the serial host evaluator
        (built once in every worker, with that worker's env instances).
      episodes: episodes per member unless :meth:`returns` is told otherwise.
      env_id: the env id, to forward run-time PettingZoo registrations to the workers.
      num_workers: Ray actors; 0 = the CPUs Ray reports.
      max_restarts: restarts of a worker that dies (its tasks are re-run each time).
      start_timeout: seconds to wait for every worker to be scheduled and built; past it
        the workers are stopped and a ``RuntimeError`` says why (instead of a generation
        that waits forever on actors Ray cannot place, e.g. when other actors hold the
        cluster's CPUs).
      notices: the run's :class:`~feudal_es.pettingzoo_host.EnvNotices`, through which
        the workers' warnings are logged once (default: the evaluator's own).
    """

    def __init__(self, make_evaluator: Callable[[], Any], episodes: int, env_id: str = "",
                 num_workers: int = 0, max_restarts: int = 3, start_timeout: float = 300.0,
                 notices: Any = None):
        try:
            import ray
            from ray.util import ActorPool
        except ImportError:
            raise ImportError("TrainerConfig.backend='ray' needs Ray: "
                              "from the feudal-es checkout, pip install -e \".[ray]\" "
                              "(or: pip install 'ray>=2.9')") from None
        if not ray.is_initialized():
            init_local()
        n = int(num_workers) or max(1, int(ray.cluster_resources().get("CPU", 1)))
        remote = ray.remote(num_cpus=1, max_restarts=max_restarts,
                            max_task_retries=max_restarts)(_Worker)
        specs = registry_specs(env_id) if env_id else {}
        self.workers = [remote.remote(make_evaluator, specs) for _ in range(n)]
        ready, _ = ray.wait([w.pid.remote() for w in self.workers], num_returns=n,
                            timeout=start_timeout)
        if len(ready) < n:
            total = ray.cluster_resources().get("CPU", 0)
            free = ray.available_resources().get("CPU", 0)
            self.close()
            raise RayWorkersLost(
                f"only {len(ready)} of {n} Ray workers started within {start_timeout:g} s "
                f"(each needs 1 CPU; the cluster has {total:g}, {free:g} free): lower "
                "TrainerConfig.ray_workers or stop the actors holding the CPUs")
        self._pool_cls = ActorPool
        if notices is None:
            from feudal_es.pettingzoo_host import EnvNotices

            notices = EnvNotices(env_id)
        self.notices = notices
        self.episodes = int(episodes)
        self._version = 0
        self.failures: list[dict[str, Any]] = []

    def returns(self, actor: Any, thetas: np.ndarray, seed: int, key: jax.Array,
                episodes: int | None = None, groups: bool = False) -> np.ndarray:
        """``[P, E]`` team returns of ``thetas[P, D]`` with executor ``actor``; member
        ``p``'s row equals the serial evaluator's. A failed member's row is NaN (see
        ``failures``); a worker lost for good raises ``RuntimeError``. ``groups``:
        ``[P, E, G]``, every group's (``others="train"``)."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        thetas = np.asarray(thetas, np.float32)
        self._version += 1
        box = [ray.put(actor)]
        key_data = np.asarray(jax.random.key_data(key))
        eps = self.episodes if episodes is None else int(episodes)
        pool = self._pool_cls(self.workers)
        version = self._version
        try:
            results = list(pool.map(
                lambda w, p: w.evaluate.remote(version, box, p, thetas[p], seed, key_data,
                                               eps, groups),
                range(len(thetas))))
        except RayActorError as e:
            raise RayWorkersLost(
                f"a Ray worker could not start, or died more often than max_restarts allows, "
                f"while evaluating the population ({e}); no fitness of this generation was "
                "used") from None
        except RayTaskError as e:
            raise e.as_instanceof_cause() from None
        self.failures = [f for _, fails, _ in results for f in fails]
        for _, _, (seen, source) in results:
            self.notices.absorb(seen, source)
        return np.stack([row for row, _, _ in results]).astype(np.float64)

    def pids(self) -> list[int]:
        """The worker processes' ids (a restarted worker has a new one)."""
        import ray

        return ray.get([w.pid.remote() for w in self.workers])

    def close(self) -> None:
        """Stop the workers."""
        import ray

        for w in self.workers:
            ray.kill(w)
        self.workers = []
