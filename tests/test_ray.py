"""Ray back-end oracles (skipped when Ray is not installed): population returns on Ray
workers equal the serial host evaluator's exactly, also when a worker process dies in the
middle of a member's episode (Ray restarts it and re-runs its members), and a host-env
trainer with ``backend="ray"`` reproduces the serial trainer's history.

One local Ray instance per module."""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.flatten_util
import numpy as np
import pettingzoo
import pytest
from line_envs import Line

ray = pytest.importorskip("ray")

from helpers import TINY_ACTOR, stable  # noqa: E402

from agents import FeudalActor, executor_filter  # noqa: E402
from feudal_es.host import HostEnvSpec, HostEvaluator  # noqa: E402
from feudal_es.ray_backend import RayEvaluator, init_local  # noqa: E402
from feudal_es.theta import selector_theta  # noqa: E402
from feudal_es.trainer import ESTrainer, TrainerConfig  # noqa: E402


class RayLine(Line):
    """``Line`` whose worker can be killed: once ``<crash_file>.armed`` exists, the first
    process to step such an env creates ``crash_file`` and dies at once (``os._exit``), as
    a worker killed mid-episode would."""

    metadata = {"name": "ray_line_v0"}  # noqa: RUF012

    def __init__(self, max_cycles: int = 6, crash_file: str | None = None):
        super().__init__(max_cycles)
        self.crash_file = crash_file

    def step(self, actions):
        if self.crash_file is not None and os.path.exists(self.crash_file + ".armed"):
            try:
                os.close(os.open(self.crash_file, os.O_CREAT | os.O_EXCL))
                os._exit(1)  # the first step anywhere: this worker process dies
            except FileExistsError:
                pass
        return super().step(actions)

pettingzoo.register("parallel", "tests/RayLine-v0", entry_point=RayLine)

CFG = TrainerConfig(env="tests/RayLine-v0", mode="es-selector", n_outer=2, episodes=2, num_skills=2,
                    es=dict(pop_size=6, sigma=0.5), actor={**TINY_ACTOR, "selector_period": 2},
                    critic=dict(hidden=[32]),
                    mappo=dict(num_envs=2, num_steps=6, epochs=1, minibatches=1),
                    gif=False, backend="ray", ray_workers=2)


@pytest.fixture(scope="module")
def local_ray():
    # Workers import from this process's sys.path (test modules). 4 logical CPUs: the
    # module's evaluator (2 workers) lives while the trainer test starts its own 2.
    # ray.init replaces the driver's SIGINT/SIGTERM handlers and shutdown() leaves them
    # replaced: put the previous ones back so later tests (signal handling) see this
    # process as it was.
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    init_local(num_cpus=4)
    yield
    ray.shutdown()
    for s, handler in handlers.items():
        signal.signal(s, handler)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A randomised executor (so members differ), a population, the serial returns, and
    one Ray evaluator (2 workers) whose envs can be told to kill their worker."""
    spec = HostEnvSpec(RayLine(), num_skills=2)
    actor = FeudalActor(jax.random.key(0), spec.observation_space, spec.action_space,
                        spec.num_skills, CFG.actor)
    params, rest = eqx.partition(actor, executor_filter(actor))
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    actor = eqx.combine(unravel(flat + 0.1 * jax.random.normal(jax.random.key(1), flat.shape)),
                        rest)
    theta = selector_theta(actor)
    thetas = np.asarray(theta + 3 * jax.random.normal(jax.random.key(2), (5, theta.size)))
    key = jax.random.key(3)
    serial = HostEvaluator(RayLine, spec, 2, True, 100).returns(actor, thetas, 7, key)
    assert np.unique(serial).size > 2  # members differ
    crash = tmp_path_factory.mktemp("ray") / "crashed"
    make = functools.partial(RayLine, crash_file=str(crash))
    ev = RayEvaluator(functools.partial(HostEvaluator, make, spec, 2, True, 100),
                      episodes=2, num_workers=2)
    yield actor, thetas, key, serial, ev, crash
    ev.close()


@pytest.mark.heavy
def test_ray_returns_equal_serial(local_ray, setup):
    actor, thetas, key, serial, ev, _ = setup
    np.testing.assert_array_equal(ev.returns(actor, thetas, 7, key), serial)
    assert ev.failures == []


@pytest.mark.heavy
def test_dead_worker_is_replaced_and_its_members_rerun(local_ray, setup):
    actor, thetas, key, serial, ev, crash = setup
    before = set(ev.pids())
    Path(str(crash) + ".armed").touch()
    np.testing.assert_array_equal(ev.returns(actor, thetas, 7, key), serial)
    assert crash.exists()  # a worker did die mid-episode ...
    after = set(ev.pids())
    assert len(after) == 2 and len(before & after) == 1  # ... and was replaced


@pytest.mark.slow  # a whole run twice (~60 s); the evaluator itself: test_ray_returns_equal_serial
def test_trainer_ray_backend_equals_serial(local_ray, tmp_path):
    serial = ESTrainer(dataclasses.replace(CFG, backend="serial"), tmp_path / "serial").run()
    trainer = ESTrainer(CFG, tmp_path / "ray")
    assert isinstance(trainer.runtime.population_evaluator, RayEvaluator)
    try:
        on_ray = trainer.run()
    finally:
        trainer.runtime.population_evaluator.close()
    assert stable(on_ray) == stable(serial)
    assert all(r["fitness_best"] is not None for r in on_ray)


@pytest.mark.heavy
def test_workers_that_cannot_be_scheduled_raise_instead_of_hanging(local_ray, setup):
    """The module's evaluator holds 2 of the 4 CPUs: 3 more 1-CPU workers cannot all be
    placed, and the evaluator says so after ``start_timeout`` (a generation used to wait
    forever on them)."""
    spec = HostEnvSpec(RayLine(), num_skills=2)
    make = functools.partial(HostEvaluator, RayLine, spec, 2, True, 100)
    with pytest.raises(RuntimeError, match=r"of 3 Ray workers started within 2 s"):
        RayEvaluator(make, episodes=2, num_workers=3, start_timeout=2.0)
    deadline = time.monotonic() + 30  # the partial workers were stopped (freed lazily)
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) >= 2
