"""The arms every study compares and the env-step budget that makes them comparable.

Arms (:data:`ARMS`): MERL, the MERL paper's ablations (MAPPO-only with a uniformly random
or a fixed option, ES-only on the whole actor), each a ``TrainerConfig`` override of one
base config per env, so every arm shares every hyperparameter it uses.

Env-step accounting (the same for every arm): one env step = one step of one swarm env
copy. A round of ``ESTrainer`` spends ``grad_steps_per_outer * mappo.batch_size`` steps on
MAPPO rollouts (modes ``merl``, ``merl-actor``, ``mappo``) and
``es.num_candidates * episodes * max_steps`` steps on ES fitness episodes (modes ``merl``,
``merl-actor``, ``es``), plus ``2 * episodes * max_steps`` for ``merl-actor``'s elitist
comparison of the mean and the learner. The trainer's per-round logging
episodes (the current policy's fitness, used only to draw the curves) are a measurement,
not training, and are counted for no arm. Each arm runs ``budget / steps_per_round``
rounds, so all arms end at the same budget (the budget is rounded up to a common multiple
of the arms' round sizes).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

from feudal_es.migration import migration_env_steps

__all__ = ["ABLATION_ARMS", "ARMS", "ARM_LABELS", "arm_config", "equal_budget", "merge",
           "round_sizes", "steps_per_round"]

# arm -> TrainerConfig overrides of the study's base config (nested dicts are merged)
ARMS: dict[str, dict[str, Any]] = {
    "merl": {"mode": "merl"},
    "mappo_uniform": {"mode": "mappo", "actor": {"options": "uniform"}},
    "mappo_fixed": {"mode": "mappo", "actor": {"options": "fixed"}},
    "es": {"mode": "es"},
    "mappo": {"mode": "mappo"},  # MAPPO alone (the selector frozen; envs without options)
    # issue 31: team fitness that reaches the executor (feudal_es.migration) ...
    "merl_actor": {"mode": "merl-actor"},  # the learner migrated in from round 0
    "merl_two_stage": {"mode": "merl-actor"},  # its study sets selector_stage_rounds
    # ... and the MERL paper's gradient baselines (one fixed option: plain MAPPO)
    "mappo_mixed": {"mode": "mappo", "actor": {"options": "fixed"},
                    "mappo": {"reward": "mixed"}},
    "mappo_team": {"mode": "mappo", "actor": {"options": "fixed"},
                   "mappo": {"reward": "team"}},
    # issue 32: ES on the selector over a frozen (pretrained) executor, which it cannot
    # move away from its imitation
    "es_selector": {"mode": "es-selector"},
}
ABLATION_ARMS = ("merl", "mappo_uniform", "mappo_fixed", "es")  # the MERL paper's set
ARM_LABELS = {"merl": "MERL (ES selector + MAPPO executor)",
              "mappo_uniform": "MAPPO-only, uniform-random options",
              "mappo_fixed": "MAPPO-only, fixed option",
              "es": "ES-only (whole actor)",
              "mappo": "MAPPO (frozen selector)",
              "merl_actor": "MERL-actor (whole-actor ES, learner migrated in)",
              "merl_two_stage": "MERL two-stage (selector ES, then whole-actor + migration)",
              "mappo_mixed": "MAPPO, mixed reward (local + team)",
              "mappo_team": "MAPPO, team reward",
              "es_selector": "ES on the selector, executor frozen"}


def merge(base: dict, over: dict) -> dict:
    """A copy of ``base`` with ``over`` written in, nested dicts merged key by key."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out.get(k, {}), v) if isinstance(v, dict) else v
    return out


def arm_config(base: dict, arm: str, extra: dict | None = None) -> dict:
    """The TrainerConfig dict of ``arm``: ``base`` with :data:`ARMS`'s overrides (and the
    study's ``extra`` ones for this arm, e.g. which option the fixed arm holds)."""
    return merge(merge(base, ARMS[arm]), extra or {})


def steps_per_round(config: Any, max_steps: int) -> int:
    """Training env steps one round of ``config`` spends (see the module docstring)."""
    mcfg, ecfg = config.mappo, config.es
    steps = 0
    if config.trains_executor:
        steps += config.grad_steps_per_outer * mcfg.batch_size
    if config.runs_es:
        steps += ecfg.num_candidates * config.episodes * max_steps
        if config.plan.migrates:  # the elitist comparison's episodes
            steps += migration_env_steps(config.episodes, max_steps)
    return steps


def round_sizes(base: dict, max_steps: int, arms: Sequence[str],
                extra: dict[str, dict] | None = None) -> dict[str, int]:
    """Env steps per round of each arm."""
    from feudal_es.config import TrainerConfig

    extra = extra or {}
    return {a: steps_per_round(TrainerConfig.from_dict(arm_config(base, a, extra.get(a))),
                               max_steps) for a in arms}


def equal_budget(base: dict, max_steps: int, budget: int, arms: Sequence[str] = ABLATION_ARMS,
                 extra: dict[str, dict] | None = None, within_round: bool = False
                 ) -> tuple[int, dict[str, int]]:
    """Round ``budget`` up to a multiple of every arm's round size; rounds per arm.

    ``within_round``: each arm instead takes the fewest whole rounds that reach ``budget``
    (returned as asked), so the arms spend within one round of each other and of it. For
    settings whose round sizes have a common multiple far above the budget (2 x 64 ES
    episodes beside a 200-step migration: every 832,000 steps).
    """
    sizes = round_sizes(base, max_steps, arms, extra)
    if within_round:
        return budget, {a: -(-budget // s) for a, s in sizes.items()}
    lcm = math.lcm(*sizes.values())
    budget = max(lcm, -(-budget // lcm) * lcm)
    return budget, {a: budget // s for a, s in sizes.items()}
