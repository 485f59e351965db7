"""The settings a config leaves open, filled by the env's observation kind and skills.

A vector-observation env gets the vector actor and a MAPPO budget per round that learns
(the settings of ``configs/rover.json``), an image one the CNN; an env that names no
skills gets one option. Only settings the user left open (``TrainerConfig.auto``) are
filled: an explicit value always wins. :func:`feudal_es.resolve.apply_env_defaults`
calls :func:`with_env_defaults` once the env is known.
"""

from __future__ import annotations

import dataclasses
import json

from feudal_es.config import (
    _BUDGET,
    OBSERVATION_DEFAULTS,
    OBSERVATION_KINDS,
    TrainerConfig,
    _class_default,
    _value,
)

__all__ = ["EnvDefaults", "mappo_steps_per_round", "with_env_defaults"]


def mappo_steps_per_round(config: TrainerConfig) -> int:
    """Env steps MAPPO collects per round: train steps x env copies x steps per copy
    (0 in a mode without MAPPO)."""
    if not config.trains_executor:
        return 0
    return config.grad_steps_per_outer * config.mappo.num_envs * config.mappo.num_steps


@dataclasses.dataclass(frozen=True)
class EnvDefaults:
    """What :func:`with_env_defaults` chose for a run, for the banner to say."""

    observation: str  # the env's observation kind (one of OBSERVATION_KINDS)
    # the settings the env's defaults decided (open ones of AUTO_SETTINGS; for an image
    # env most keep their class default)
    filled: tuple[str, ...]
    # where the selector's options come from: "env" (the env's skill_names), "config"
    # (num_skills as given) or "default" (an env without skill_names: one option)
    options_from: str

    def describe(self, config: TrainerConfig, options: tuple[str, ...]) -> str:
        """One line: which actor and MAPPO budget, and why; the selector's options
        (``options``: their names) and whether it is idle."""
        kind = "CNN" if self.observation == "image" else "vector"
        why = f"the defaults for {self.observation} observations"
        actor = any(p.startswith(("actor.", "critic.")) for p in self.filled)
        budget = any(p.startswith("mappo.") or p in _BUDGET for p in self.filled)
        parts = [f"{kind} actor" + ("" if actor else " (as configured)")]
        steps = mappo_steps_per_round(config)
        if steps:
            parts.append(f"{steps} MAPPO env steps/round" + ("" if budget else
                                                              " (as configured)"))
        text = f"{self.observation} observations -> {', '.join(parts)}"
        if actor or budget:
            text += f" ({why})"
        if len(options) == 1:
            cause = {"default": "the env names no skills (skill_names) to choose from",
                     "config": "num_skills=1",
                     "env": f"the env's only skill, {options[0]!r}"}[self.options_from]
            text += f"; one option ({cause}): the selector is idle"
        else:
            text += f"; {len(options)} options ({', '.join(options)})"
        return text


def with_env_defaults(config: TrainerConfig, observation: str,
                      skill_channels: int | None = None, named_skills: bool = False
                      ) -> tuple[TrainerConfig, EnvDefaults]:
    """``config`` with each setting it leaves open (:attr:`TrainerConfig.auto`) taken
    from the defaults of the env's ``observation`` kind (:data:`OBSERVATION_DEFAULTS`),
    and ``num_skills`` from ``skill_channels`` (the env's skill-reward channels; None:
    it has none, one option) unless the env names its skills (``named_skills``: then
    ``num_skills`` is not read). A setting whose value differs from its class default is
    the user's (e.g. set by ``dataclasses.replace``) and is kept. The result has every
    setting given (``auto == ()``); applying it again changes nothing, so a run's saved
    config is what a resumed run trains."""
    if observation not in OBSERVATION_KINDS:
        raise ValueError(f"observation kind must be one of {OBSERVATION_KINDS}, got "
                         f"{observation!r}")
    auto = config.auto
    chosen = dict(OBSERVATION_DEFAULTS[observation])
    if not named_skills:
        chosen["num_skills"] = skill_channels or 1
    # the open settings still at their class default: the env's defaults decide them
    # (the kind's value, or the class default where the kind has none)
    sets = {p: chosen.get(p, _class_default(p)) for p in auto
            if _value(config, p) == _class_default(p)}
    options_from = ("env" if named_skills or (skill_channels and "num_skills" in sets)
                    else "default" if "num_skills" in sets else "config")
    data = config.to_dict()
    for path, value in sets.items():
        head, _, leaf = path.partition(".")
        if leaf:
            data[head] = {**data[head], leaf: value}
        else:
            data[head] = value
    try:
        filled = TrainerConfig.from_dict(data)
    except (TypeError, ValueError) as e:  # a default that does not fit a given setting
        given = ", ".join(f"{p}={json.dumps(v)}" for p, v in sorted(sets.items()))
        raise type(e)(f"{e} (settings not given take the defaults for {observation} "
                      f"observations: {given}; give the ones that conflict, e.g. with "
                      "--set)") from None
    return filled, EnvDefaults(observation, tuple(sorted(sets)), options_from)
