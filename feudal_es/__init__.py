"""feudal-es: ES-evolved selectors over MAPPO-trained executors for multi-agent swarms.

Importing the package gives JAX one CPU device per core (:mod:`feudal_es.devices`) when
nothing has chosen the count yet, so the ES population uses every core of a CPU host;
``JAX_NUM_CPU_DEVICES=1`` keeps JAX's single CPU device.
"""

from feudal_es.devices import use_cpu_cores

use_cpu_cores()
