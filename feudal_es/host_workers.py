"""MAPPO's host-path env copies spread over worker processes (``host_workers > 0``).

:class:`WorkerPool` splits the collector's ``E`` env copies into ``N`` contiguous shares
(sizes differ by one at most); each worker builds its share from the run's env factory
and keeps it in a :class:`~feudal_es.host_copies.CopyGroup`, exactly as the in-process
collector does. The main process keeps the batched jitted policy: per step it sends each
worker its copies' actions (and the agents' options), every worker steps its copies at
the same time and answers with their rewards, done flags and next observations (as
:class:`~feudal_es.host_copies.CopyView`: obs, alive mask, comm graph, global state);
copies whose episode ended are reset on the next request with the seeds the collector
chose. So a collection over workers is the in-process collection, only faster: same
actions, same env outputs, same batch (tests/test_host_workers.py checks it leaf by leaf).

Why no library: Gymnasium's ``AsyncVectorEnv`` steps Gymnasium envs with one fixed
observation space, its own autoreset and reset seeds, one process per copy, and it
neither replaces a dead worker nor keeps an env error's type (it logs the remote
traceback and re-raises a new exception); a PettingZoo ``ParallelEnv`` has per-agent
dicts, agents that leave, ``state()`` and ``comm_graph()``, and the collector must choose
the reset seeds. So workers are ``multiprocessing`` processes, each with one standard
duplex ``Pipe`` (a request, then its answer), waited on with
``multiprocessing.connection.wait`` alongside the process sentinels, which is how a dead
worker is noticed at once. With ``backend="ray"`` the workers are Ray actors instead
(same requests, as actor calls; Ray is imported only then).

Start method: ``spawn``. ``fork`` is unsafe once JAX has started its threads; a spawned
worker is a fresh interpreter, which imports the env factory by reference, so the
factory must pickle: a registered id or ``"module:attr"`` (resolved envs carry picklable
factories, :mod:`feudal_es.env_factory`, with the registry entry itself for ids that an
``--import`` or a script registered) or a module-level class or function. The worker
gets the parent's ``sys.path`` (``spawn`` passes it on), so the user's modules import
there as they do in the parent. As with any ``spawn``, a script that starts training
must do it under ``if __name__ == "__main__":``.

Faults. A worker that dies (SIGKILL, a crash in C code) is seen as soon as it is waited
on: it is replaced by a new process that rebuilds its copies, and
:class:`~feudal_es.host_copies.CopiesRestarted` tells the collector, which restarts every
copy's episode and redoes the collection in progress (see
:class:`~feudal_es.host_collect.HostCollector`); the run's log names the worker, the
signal and what was redone. An exception inside a worker (the env's own, or the
checks' :class:`~feudal_es.pettingzoo_host.EnvOutputError` /
:class:`~feudal_es.pettingzoo_host.EnvTimeout`) is sent back and raised in the main
process as the same exception (type and message), its ``__cause__`` a
:class:`RemoteTraceback` holding the worker's traceback (which is how the command line
still names the line of the user's env that raised). Warnings about the env (cut
episodes, non-finite outputs) come back with the answers and are logged once by the
run's :class:`~feudal_es.pettingzoo_host.EnvNotices`.

Shutdown. Workers ignore SIGINT (Ctrl-C reaches the whole process group; the trainer
finishes its round, which needs the workers), exit when their pipe closes (so also when
the main process is killed), are daemonic (ended when the main process exits) and are
stopped by :meth:`WorkerPool.close` (``HostRuntime.close``), or when the pool is
garbage-collected. A daemonic worker cannot start processes of its own: an env that
does needs ``host_workers=0``, or the Ray backend.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import signal
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import wait
from typing import Any, NamedTuple

import numpy as np

from feudal_es.host_copies import CopiesLost, CopiesRestarted, CopyStep, CopyView
from feudal_es.host_worker import RayWorker, WorkerInit, serve, unpack_error
from feudal_es.pettingzoo_host import EnvNotices, HostEnvSpec

__all__ = ["WorkerPool", "check_picklable", "shares"]

START_METHOD = "spawn"  # see the module docstring


def shares(num_copies: int, num_workers: int) -> list[range]:
    """Worker ``w``'s env copies: ``num_copies`` split into ``num_workers`` contiguous
    ranges whose sizes differ by one at most (the first ones larger)."""
    if not 0 < num_workers <= num_copies:
        raise ValueError(f"{num_workers} host workers for {num_copies} env copies: each "
                         "worker needs at least one copy")
    base, extra = divmod(num_copies, num_workers)
    starts = [w * base + min(w, extra) for w in range(num_workers + 1)]
    return [range(starts[w], starts[w + 1]) for w in range(num_workers)]


def check_picklable(make: Callable[..., Any], env_id: str) -> None:
    """``ValueError`` naming the fix if ``make`` cannot be sent to a worker process."""
    try:
        pickle.dumps(make)
    except Exception as e:
        raise ValueError(
            f"host_workers > 0 builds the env copies of {env_id!r} in worker processes, but "
            f"its factory {make!r} cannot be sent to one ({type(e).__name__}: {e}): name the "
            "env by a registry id or 'module:attr', or give a module-level class or "
            "function (a functools.partial of one), not a lambda or closure; or set "
            "host_workers=0") from None


# --- the main process's side -----------------------------------------------------------
class _Died(NamedTuple):
    """A worker that died before answering, and how (``"died (signal 9, SIGKILL)"``)."""

    how: str


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while a worker is started: the spawned interpreter inherits the
    ignored disposition (so a Ctrl-C during its imports cannot kill it either)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _ProcessLink:
    """One worker process and the main process's end of its pipe."""

    def __init__(self, index: int, init: WorkerInit):
        ctx = multiprocessing.get_context(START_METHOD)
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child, init), daemon=True,
                                   name=f"feudal-es host worker {index}")
        with _sigint_ignored():
            self.process.start()
        child.close()  # only the worker holds its end: its death closes the pipe
        self.pid = self.process.pid
        self.pending = True  # its first message: ("ready", pid) or ("error", ...)

    def submit(self, request: tuple) -> None:
        try:
            self.conn.send(request)
        except OSError:  # a dead worker's pipe: seen by gather
            pass
        self.pending = True

    def how(self) -> str:
        self.process.join(5.0)
        code = self.process.exitcode
        if code is None:
            return "stopped answering"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"died (signal {-code}, {signal.Signals(-code).name})"
            return f"died (signal {-code})"
        return f"exited with code {code}"

    @staticmethod
    def gather(links: dict[int, _ProcessLink]) -> dict[int, Any]:
        """Each pending link's answer, or :class:`_Died` for a worker that died first."""
        out: dict[int, Any] = {}
        waiting = {w: link for w, link in links.items() if link.pending}
        while waiting:
            ready = set(wait([x for link in waiting.values()
                              for x in (link.conn, link.process.sentinel)]))
            for w, link in list(waiting.items()):
                if link.conn in ready:
                    try:
                        out[w] = link.conn.recv()
                    except (EOFError, OSError):
                        out[w] = _Died(link.how())
                elif link.process.sentinel in ready and not link.conn.poll():
                    out[w] = _Died(link.how())
                else:
                    continue
                link.pending = False
                del waiting[w]
        return out

    def stop(self) -> None:
        """Ask the worker to close its envs and exit; end it if it does not."""
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(("close",))
            self.process.join(5.0)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(2.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class _RayLink:
    """One worker as a Ray actor (``num_cpus=0``: collection and the ES evaluators' work
    alternate, so the workers need no CPUs of their own reserved)."""

    def __init__(self, index: int, init: WorkerInit):
        import ray

        self.actor = ray.remote(num_cpus=0, max_restarts=0)(RayWorker).remote(init)
        self.ref: Any = self.actor.ready.remote()
        self.pending, self.pid = True, None

    def submit(self, request: tuple) -> None:
        self.ref, self.pending = self.actor.handle.remote(request), True

    @staticmethod
    def gather(links: dict[int, _RayLink]) -> dict[int, Any]:
        import ray
        from ray.exceptions import RayActorError

        out: dict[int, Any] = {}
        for w, link in links.items():
            if not link.pending:
                continue
            try:
                out[w] = ray.get(link.ref)
            except RayActorError as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                out[w] = _Died(f"died (Ray actor lost: {first})")
            link.pending = False
        return out

    def stop(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.kill(self.actor)


def _stop_all(links: list[Any]) -> None:
    for link in links:
        with contextlib.suppress(Exception):
            link.stop()
    links.clear()


class WorkerPool:
    """``num_copies`` env copies over ``num_workers`` workers (see the module docstring);
    an :class:`~feudal_es.host_copies.EnvCopies` for
    :class:`~feudal_es.host_collect.HostCollector`.

    Args:
      make: the env factory (picklable for processes: :func:`check_picklable`).
      spec: the env's :class:`~feudal_es.pettingzoo_host.HostEnvSpec`.
      num_copies, num_workers: ``E`` copies, ``1 <= N <= E`` workers.
      reward, step_timeout, max_episode_steps: as :class:`~feudal_es.host_copies.CopyGroup`.
      env_id: how warnings name the env.
      notices: the run's :class:`~feudal_es.pettingzoo_host.EnvNotices`, through which
        the workers' warnings are logged once.
      backend: ``"process"`` (``multiprocessing``, ``spawn``) or ``"ray"`` (Ray actors).
    """

    def __init__(self, make: Callable[..., Any], spec: HostEnvSpec, num_copies: int,
                 num_workers: int, reward: str = "option", step_timeout: float = 0.0,
                 max_episode_steps: int = 0, env_id: str = "",
                 notices: EnvNotices | None = None, backend: str = "process"):
        if backend not in ("process", "ray"):
            raise ValueError(f"backend must be 'process' or 'ray', got {backend!r}")
        self.shares = shares(int(num_copies), int(num_workers))
        self.num_copies = int(num_copies)
        if backend == "process":
            check_picklable(make, env_id)
        else:
            try:
                import ray
            except ImportError:
                raise ImportError("host_workers with backend='ray' needs Ray: from the "
                                  "feudal-es checkout, pip install -e \".[ray]\" (or: pip "
                                  "install 'ray>=2.9')") from None
            if not ray.is_initialized():
                from feudal_es.ray_backend import init_local

                init_local()
        self.backend = backend
        self._link_cls = _ProcessLink if backend == "process" else _RayLink
        self._inits = [WorkerInit(make, spec, reward, r, float(step_timeout),
                             int(max_episode_steps), env_id) for r in self.shares]
        self.notices = notices if notices is not None else EnvNotices(env_id)
        self.restarts = 0  # workers replaced so far
        self._links: list[Any] = []
        self._finalize = weakref.finalize(self, _stop_all, self._links)
        self._busy = False  # a request is out whose answers were not all read
        try:
            self._links.extend(self._link_cls(w, init) for w, init in enumerate(self._inits))
            self._await_ready(range(len(self._links)))
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int | None]:
        """The worker processes' ids (a replaced worker has a new one; None: not known)."""
        return [link.pid for link in self._links]

    def _await_ready(self, workers: Sequence[int]) -> None:
        answers = self._link_cls.gather({w: self._links[w] for w in workers})
        for w in workers:
            answer = answers[w]
            if isinstance(answer, _Died):
                raise CopiesLost(f"host worker {w} could not start: it {answer.how} while "
                                 f"building its {len(self.shares[w])} env copies")
            if answer[0] == "error":
                raise unpack_error(answer[1], w)
            self._links[w].pid = answer[1]

    def _replace(self, w: int) -> None:
        """Worker ``w`` anew (its copies rebuilt, not reset)."""
        self._links[w].stop()
        self._links[w] = self._link_cls(w, self._inits[w])
        self._await_ready([w])
        self.restarts += 1

    def _copies_text(self, w: int) -> str:
        r = self.shares[w]
        return f"its {len(r)} env copies ({r.start}-{r.stop - 1})" if len(r) > 1 else \
            f"its env copy ({r.start})"

    def _call(self, requests: dict[int, tuple]) -> dict[int, Any]:
        """Send each worker its request, then read every answer: the results by worker;
        the first env error raised; a dead worker replaced, then
        :class:`~feudal_es.host_copies.CopiesRestarted`."""
        if self._busy:  # answers of an interrupted call may still be in the pipes
            _stop_all(self._links)
            self._links.extend(self._link_cls(w, init) for w, init in enumerate(self._inits))
            self._await_ready(range(len(self._links)))
            self._busy = False
            raise CopiesRestarted("host workers restarted, all env copies rebuilt: the "
                                  "previous request to them was interrupted (e.g. by "
                                  "Ctrl-C) before they answered")
        self._busy = True
        for w, request in requests.items():
            self._links[w].submit(request)
        answers = self._link_cls.gather({w: self._links[w] for w in requests})
        self._busy = False
        died = {w: a.how for w, a in answers.items() if isinstance(a, _Died)}
        for answer in answers.values():
            if not isinstance(answer, _Died) and answer[0] == "ok" and answer[2] is not None:
                self.notices.absorb(*answer[2])
        what = []
        for w, how in sorted(died.items()):
            pid = self._links[w].pid
            self._replace(w)
            what.append(f"host worker {w} (pid {pid}) {how}; restarted, "
                        f"{self._copies_text(w)} rebuilt")
        errors = [(w, a[1]) for w, a in sorted(answers.items())
                  if not isinstance(a, _Died) and a[0] == "error"]
        if errors:
            w, packed = errors[0]
            raise unpack_error(packed, w)
        if what:
            raise CopiesRestarted("; ".join(what))
        return {w: answers[w][1] for w in requests}

    def reset_copies(self, seeds: Sequence[tuple[int, int]]) -> dict[int, CopyView]:
        """Reset copy ``i`` with ``seed`` for each ``(i, seed)`` (by its worker, all
        workers at once); their views."""
        by_worker: dict[int, list[tuple[int, int]]] = {}
        for i, seed in seeds:
            w = next(w for w, r in enumerate(self.shares) if i in r)
            by_worker.setdefault(w, []).append((int(i), int(seed)))
        views: dict[int, CopyView] = {}
        for part in self._call({w: ("reset", s) for w, s in by_worker.items()}).values():
            views.update(part)
        return views

    def step_copies(self, actions: np.ndarray, skills: np.ndarray) -> list[CopyStep]:
        """Step every copy (each worker its share, all at once)."""
        answers = self._call({w: ("step", actions[r.start:r.stop], skills[r.start:r.stop])
                              for w, r in enumerate(self.shares)})
        return [step for w in range(len(self.shares)) for step in answers[w]]

    def close(self) -> None:
        """Stop every worker (each closes its envs); idempotent."""
        self._finalize()
