"""What each training mode does, decided once.

A mode says which learner runs each round and what ES evolves; everything else (the
round's functions, the run directory's plot, the banner, the CLI's help) reads these
fields instead of comparing mode names.
"""

from __future__ import annotations

import dataclasses

__all__ = ["MODES", "Mode", "mode"]


@dataclasses.dataclass(frozen=True)
class Mode:
    """One training mode.

    Attributes:
      name: the config's ``mode`` string.
      trains_executor: MAPPO trains the executor each round.
      runs_es: each round runs one ES generation on team fitness.
      es_params: what ES evolves: ``"selector"`` (the selector's leaves) or ``"actor"``
        (every leaf: whole-policy evolution).
      summary: one line for the CLI's help.
      frozen: what the learning curve says in the panel of a learner that does not run.
      migrates: ES evolves the whole actor and the MAPPO learner is migrated into it
        (:mod:`feudal_es.migration`); the run's result is then the ES mean, not the
        learner's actor.
    """

    name: str
    trains_executor: bool
    runs_es: bool
    es_params: str
    summary: str
    frozen: str = ""
    migrates: bool = False


MODES: dict[str, Mode] = {m.name: m for m in (
    Mode("merl", True, True, "selector",
         "ES on the selector + MAPPO on the executor, interleaved (MERL)"),
    Mode("merl-actor", True, True, "actor",
         "ES on the whole actor + MAPPO, the learner migrated in when its team fitness is "
         "higher (after TrainerConfig.selector_stage_rounds rounds of merl)",
         migrates=True),
    Mode("es", False, True, "actor", "ES on the whole actor, no MAPPO (MERL's EA-only)",
         "executor evolved by ES, no MAPPO (mode es)"),
    Mode("es-selector", False, True, "selector",
         "ES on the selector over a frozen executor (no MAPPO)",
         "executor frozen: no MAPPO (mode es-selector)"),
    Mode("mappo", True, False, "selector",
         "MAPPO on the executor; the selector is not evolved (see ActorConfig.options)",
         "selector not evolved (mode mappo)"),
)}


def mode(name: str) -> Mode:
    """The :class:`Mode` called ``name``; ``ValueError`` listing the modes otherwise."""
    try:
        return MODES[name]
    except (KeyError, TypeError):
        raise ValueError(f"mode must be one of {tuple(MODES)}, got {name!r}") from None
