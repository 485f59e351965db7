"""CTDE-MAPPO for the executor: decentralized actor, centralized critic, selector untouched.

Follows Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
Games": clipped surrogate, value normalization, clipped (Huber) value loss, GAE,
advantage normalization, death masking, gradient-norm clipping, and an agent-specific
global state for the critic (global state + agent id + current skill).

The feudal twist: each agent's reward is the dense channel of the skill it currently
pursues (``skill_rewards[i, skill_i]``), skills are chosen by the selector every
``ActorConfig.selector_period`` steps, and the optimizer is partitioned with
:func:`agents.executor_filter` so the selector's leaves (owned by ES) receive no gradient
and hold no optimizer state.

Two ways to collect, one update:

* :func:`make_train_step` — pure-JAX envs: ``num_steps x num_envs`` collected with
  ``lax.scan`` over time and ``vmap`` over envs, then the update, all in one ``jit``;
* ``feudal_es.host`` — any PettingZoo ``ParallelEnv`` via a Python loop, producing the
  same :class:`Batch` and calling the same :func:`update`.

The pieces, one concept per module: :mod:`~feudal_es.mappo.config` (``MAPPOConfig``),
:mod:`~feudal_es.mappo.state` (train state, batch, the non-finite guard),
:mod:`~feudal_es.mappo.update` (GAE, the clipped-PPO update, fused or split) and
:mod:`~feudal_es.mappo.collect` (JAX-path collection and train steps) and
:mod:`~feudal_es.mappo.parallel` (one seed's step data-parallel over devices).
"""

from feudal_es.mappo.collect import (
    collect,
    fused_train_step,
    guarded,
    make_guarded_train_step,
    make_rollout,
    make_train_step,
    repeated,
)
from feudal_es.mappo.config import UPDATE_MODES, MAPPOConfig
from feudal_es.mappo.parallel import (
    DATA_AXIS,
    data_devices,
    data_parallel_seeds_step,
    data_parallel_step,
    place_train_state,
)
from feudal_es.mappo.state import (
    LOSS_KEYS,
    Batch,
    Learned,
    RolloutState,
    TrainState,
    ValueNorm,
    all_finite,
    init_learner,
    init_rollout,
    init_train_state,
    keep_finite,
    learned,
    make_optimizers,
    option_skills,
    trainable,
    uses_sequences,
)
from feudal_es.mappo.update import (
    FUSED_MAX_CONV_MACS,
    anchor_distance,
    conv_macs,
    gae,
    loss,
    update,
    update_fused,
    uses_fused_update,
)

__all__ = ["DATA_AXIS", "FUSED_MAX_CONV_MACS", "LOSS_KEYS", "UPDATE_MODES", "Batch",
           "Learned", "MAPPOConfig", "RolloutState", "TrainState", "ValueNorm", "all_finite",
           "anchor_distance",
           "collect", "conv_macs", "data_devices", "data_parallel_seeds_step",
           "data_parallel_step", "fused_train_step",
           "gae", "guarded", "init_learner", "init_rollout", "init_train_state",
           "keep_finite", "learned", "loss", "make_guarded_train_step", "make_optimizers",
           "make_rollout", "make_train_step", "option_skills", "place_train_state",
           "repeated", "trainable", "update", "update_fused", "uses_fused_update", "uses_sequences"]
