"""Equinox networks of the feudal actor and the centralized critic.

- :class:`FeudalActor` — LPAC backbone, selector heads (ES), executor head (gradient).
- :class:`GroupedActor` — one feudal actor per group of agents that share their spaces;
  :func:`make_actor` picks it for an env with ``agent_groups``.
- :class:`CentralCritic` — MAPPO's centralized value function.
- :func:`selector_filter` — the one definition of the selector's leaves; with
  :func:`executor_filter` and :func:`es_filter` (what ES evolves).

``python -m agents.params`` prints parameter counts at default and LPAC-paper sizes.
"""

from agents.actor import FeudalActor, GoalOption, RecurrentOption
from agents.backbone import GraphFilter, LPACBackbone, normalize_adjacency
from agents.config import ActorConfig, CriticConfig
from agents.critic import CentralCritic
from agents.grouped import GroupedActor, make_actor
from agents.heads import (
    ActOut,
    CategoricalHead,
    Executor,
    GaussianHead,
    GoalSelector,
    Selector,
    SkillSelector,
)
from agents.layers import count_params
from agents.partition import ES_PARAMS, es_filter, executor_filter, selector_filter

__all__ = [
    "ES_PARAMS",
    "ActOut",
    "ActorConfig",
    "CategoricalHead",
    "CentralCritic",
    "CriticConfig",
    "Executor",
    "FeudalActor",
    "GaussianHead",
    "GoalOption",
    "GoalSelector",
    "GraphFilter",
    "GroupedActor",
    "LPACBackbone",
    "RecurrentOption",
    "Selector",
    "SkillSelector",
    "count_params",
    "es_filter",
    "executor_filter",
    "make_actor",
    "normalize_adjacency",
    "selector_filter",
]
