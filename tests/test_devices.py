"""``feudal_es.use_cpu_cores()`` gives JAX one CPU device per core, unless the count was
chosen; ``import feudal_es`` alone changes nothing (no import side effects).

Each case runs in a fresh interpreter (the device count is fixed once JAX starts), with
the environment conftest pins (``JAX_NUM_CPU_DEVICES=1``) removed or replaced."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def devices_after(code: str, **env_vars: str) -> int:
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env.update(env_vars, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code + "\nprint(len(jax.devices()))"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return int(proc.stdout.split()[-1])


USE = "import feudal_es, jax\nassert feudal_es.use_cpu_cores() is {}"


def test_one_cpu_device_per_core_and_the_user_choice_wins():
    from feudal_es.devices import cpu_cores

    assert cpu_cores() == len(os.sched_getaffinity(0))
    assert devices_after(USE.format(True)) == cpu_cores()
    assert devices_after(USE.format(False), JAX_NUM_CPU_DEVICES="1") == 1
    # XLA_FLAGS chooses the count
    flag = "--xla_force_host_platform_device_count=3"
    assert devices_after(USE.format(False), XLA_FLAGS=flag) == 3
    # JAX already ran something: the count cannot change any more, and importing is fine
    code = ("import jax; jax.numpy.zeros(1).block_until_ready()\n"
            "from feudal_es.devices import use_cpu_cores\n"
            "import feudal_es\nassert not use_cpu_cores(2)")
    assert devices_after(code) == 1


def test_importing_feudal_es_leaves_the_device_count_alone():
    """No import side effects: importing the package (and what a user script touches
    through it) leaves JAX at its default count, one CPU device."""
    code = ("import feudal_es, jax\nfrom feudal_es.trainer import ESTrainer\n"
            "from feudal_es import es\nassert jax.config.jax_num_cpu_devices == -1")
    assert devices_after(code) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_use_cpu_cores_refuses_a_bad_count(bad):
    from feudal_es.devices import use_cpu_cores

    with pytest.raises(ValueError, match="positive int"):
        use_cpu_cores(bad)
