"""``ESConfig``: the hyper-parameters of the reference ES API, frozen and validated."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

__all__ = ["KINDS", "OPTIMIZERS", "ESConfig"]

KINDS = ("nes", "cem", "ga")
EVOSAX = "evosax:"  # kind="evosax:CMA_ES" etc.: see feudal_es.evolution.evosax_kind
OPTIMIZERS = ("sgd", "adam")


@dataclasses.dataclass(frozen=True)
class ESConfig:
    """Hyper-parameters of the ES step and the coexistence loop (frozen, validated).

    Attributes:
      pop_size: population size; with antithetic sampling ``2 * (pop_size // 2)``
        candidates are evaluated per generation.
      sigma: Gaussian perturbation std (search radius around the mean θ).
      lr: NES learning rate (``kind='nes'`` only).
      kind: ``'nes'`` (OpenAI-ES, rank-shaped gradient estimate), ``'cem'`` (elite mean
        and σ shrink), ``'ga'`` (MERL's genetic algorithm: elites, tournament selection,
        crossover, Gaussian mutation of std ``sigma``, the learner migrated in;
        :mod:`feudal_es.evolution.ga`), or an evosax strategy, ``'evosax:CMA_ES'``,
        ``'evosax:SNES'``, ... (:mod:`feudal_es.evolution.evosax_kind`; ``sigma`` its
        initial step size).
      elite_frac: fraction of the candidates kept as elites (``kind='cem'`` and ``'ga'``),
        in (0, 1].
      crossover_prob: ``kind='ga'``: the share of children that are a uniform crossover of
        two tournament winners (the others mutate a copy of one), in [0, 1].
      weight_decay: L2 pull of θ toward 0 added to the NES step (``-lr·wd·θ``); 0 disables.
      optimizer: how the NES gradient estimate moves the mean: ``'sgd'`` is the plain
        reference step; ``'adam'`` uses ``optax.adam(lr)`` as in most ES practice (its
        moments persist only where the ES state is threaded: ``generation``, ``evolve``,
        ``merl_coexist``).
    """

    pop_size: int = 16
    sigma: float = 0.05
    lr: float = 0.05
    kind: str = "nes"
    elite_frac: float = 0.25
    weight_decay: float = 0.0
    optimizer: str = "sgd"
    crossover_prob: float = 0.5

    def __post_init__(self) -> None:
        _check_int("pop_size", self.pop_size, minimum=2)
        _check_real("sigma", self.sigma, positive=True)
        _check_real("lr", self.lr, positive=True)
        _check_real("weight_decay", self.weight_decay, positive=False)
        _check_real("elite_frac", self.elite_frac, positive=True)
        if self.elite_frac > 1.0:
            raise ValueError(f"ESConfig.elite_frac must be in (0, 1], got {self.elite_frac}")
        _check_real("crossover_prob", self.crossover_prob, positive=False)
        if self.crossover_prob > 1.0:
            raise ValueError(f"ESConfig.crossover_prob must be in [0, 1], got "
                             f"{self.crossover_prob}")
        if isinstance(self.kind, str) and self.kind.startswith(EVOSAX):
            from feudal_es.evolution.evosax_kind import check_kind

            check_kind(self.kind)
        elif self.kind not in KINDS:
            raise ValueError(f"ESConfig.kind must be one of {KINDS} or '{EVOSAX}<strategy>' "
                             f"(e.g. '{EVOSAX}CMA_ES'), got {self.kind!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"ESConfig.optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}"
            )

    @property
    def is_evosax(self) -> bool:
        """Whether ``kind`` names an evosax strategy."""
        return self.kind.startswith(EVOSAX)

    @property
    def num_candidates(self) -> int:
        """``P = 2 * (pop_size // 2)``: the antithetic population actually evaluated."""
        return 2 * max(1, self.pop_size // 2)

    @property
    def num_elites(self) -> int:
        """Elites kept by CEM and the GA: ``max(1, round(elite_frac * P))``."""
        return max(1, round(self.elite_frac * self.num_candidates))


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"ESConfig.{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"ESConfig.{name} must be >= {minimum}, got {value}")


def _check_real(name: str, value: Any, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"ESConfig.{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f"ESConfig.{name} must be finite and {'> 0' if positive else '>= 0'}, got {value}"
        )
