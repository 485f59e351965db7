# mympe.py
"""MPE's speaker-listener and adversary (the mpe2 package) under ids of our own."""

import pettingzoo
from mpe2 import simple_adversary_v3, simple_speaker_listener_v4

pettingzoo.register("parallel", "mympe/speaker_listener-v4",
                    entry_point=simple_speaker_listener_v4.parallel_env)
pettingzoo.register("parallel", "mympe/adversary-v3",
                    entry_point=simple_adversary_v3.parallel_env)


def stand_still(key, obs):
    """A scripted policy for the groups other than the team (``--set others=mympe:
    stand_still``): MPE's no-op (action 0) for each of the group's agents. ``obs`` is the
    group's observations [n, obs_size] (JAX arrays; the function is traced with JAX)."""
    import jax.numpy as jnp

    return jnp.zeros(obs.shape[0], jnp.int32)
