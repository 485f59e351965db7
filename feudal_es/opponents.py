"""What the agent groups other than the team play (``TrainerConfig.others``).

In a mixed cooperative / competitive env (``TrainerConfig.team`` names the team's group)
every other group either trains too, on its own group's fitness (``"train"``), or plays a
fixed policy: uniformly random actions (``"random"``, the default), a scripted JAX policy
(``"module:function"``), or a saved run's actor, frozen (a run directory or checkpoint
file). This module turns the setting into what :func:`agents.make_actor` takes, and puts a
saved run's group actors into a fresh actor (:func:`with_others`): they are copied into
this run's actor, so its checkpoints hold them and resume, eval and render never read the
source again.

Code and files a run directory names are data: a stored ``"module:function"`` is called
only when the user imported its module on this command line (``--import MODULE``;
:func:`check_stored`), and a checkpoint's template is built without reading the saved
run (:func:`templates`: the checkpoint's own leaves replace it).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["check_settings", "check_stored", "is_function", "load_function", "make_others",
           "templates", "with_others"]

_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_TEMPLATE = contextvars.ContextVar("feudal_es_opponents_template", default=False)


def is_function(others: str) -> bool:
    """Whether ``others`` names a scripted policy, ``"module:function"`` (a path that
    exists is a saved run, whatever its spelling)."""
    return bool(_FUNCTION.match(others)) and not Path(others).exists()


def load_function(spec: str) -> Callable:
    """The callable ``spec`` (``"module:function"``) names, imported now: a scripted
    policy ``fn(key, obs[n, obs_size]) -> actions`` ([n] ints for a Discrete action
    space, [n, A] floats for a Box), traced with JAX inside the rollouts."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"others={spec!r}: cannot import module {module_name!r} ({e})"
                         ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"others={spec!r}: module {module_name!r} has no function {attr!r}")
    return fn


def make_others(others: str) -> str | Callable:
    """What :func:`agents.make_actor` takes for ``TrainerConfig.others``: "random" or
    "train" as they are, the scripted policy's callable, or "actor" for a saved run."""
    if others in ("random", "train"):
        return others
    if is_function(others):
        return load_function(others)
    if not Path(others).exists() and not _TEMPLATE.get():  # a template needs no source
        raise ValueError(f"others={others!r} is neither 'random', 'train', a "
                         "'module:function' nor a saved run (no such file or directory)")
    return "actor"


def check_stored(others: str, source: str | Path) -> None:
    """Refuse to call the scripted policy a stored config (of ``source``) names unless
    the user imported its module on this command line (``--import``)."""
    if is_function(others):
        module = others.partition(":")[0]
        if module not in sys.modules:
            raise ValueError(
                f"{source} is a run whose other groups play {others!r}, a function of "
                f"module {module!r}; a run directory never imports code itself: pass "
                f"--import {module} to call it")


@contextlib.contextmanager
def templates() -> Iterator[None]:
    """Within: actors are built as checkpoint templates (:func:`with_others` leaves the
    groups that play a saved run's actor as built; the checkpoint's leaves replace them)."""
    token = _TEMPLATE.set(True)
    try:
        yield
    finally:
        _TEMPLATE.reset(token)


def with_others(actor: Any, others: str) -> Any:
    """``actor`` with the saved run ``others`` names playing every group that does not
    train (``GroupedActor.trains``); ``actor`` itself for any other setting, or when
    building a checkpoint template (:func:`templates`)."""
    if others in ("random", "train") or is_function(others) or _TEMPLATE.get():
        return actor
    from feudal_es.evaluate import load_trainer

    source, path = load_trainer(others)
    saved = source.state.learner.actor
    if source.config.plan.migrates:  # the run's result is the ES mean, not the learner
        from feudal_es.theta import set_es_theta

        saved = set_es_theta(saved, source.state.es.mean, source.config.es_params)
    names = getattr(saved, "names", None)
    if names != actor.names:
        raise ValueError(f"others={others!r} ({path}) is not a run of this env's agent "
                         f"groups: its groups are {names}, this run's {actor.names}")
    return actor.with_group_actors([None if trains else a for a, trains in
                                    zip(saved.actors, actor.trains, strict=True)])


def check_settings(config: Any) -> None:
    """Check a ``TrainerConfig``'s agent-group settings (``groups``, ``team``, ``others``;
    ``TypeError`` / ``ValueError`` naming the field) and store ``groups`` as plain lists."""
    c, groups, others = type(config).__name__, config.groups, config.others
    if not isinstance(config.team, str):
        raise TypeError(f"{c}.team must be a group's name (a string), got {config.team!r}")
    if not isinstance(groups, Mapping) or not all(
            isinstance(k, str) and isinstance(v, list | tuple) and v
            and all(isinstance(a, str) for a in v) for k, v in groups.items()):
        raise TypeError(f"{c}.groups must map group names to non-empty lists of agent "
                        f"names, got {groups!r}")
    object.__setattr__(config, "groups", {k: list(v) for k, v in groups.items()})
    if groups and config.pad_agents:
        raise ValueError(f"{c}.groups puts agents in groups, one actor each; "
                         "pad_agents=true gives every agent one shared actor: choose one")
    if not isinstance(others, str) or not others.strip():
        raise TypeError(f"{c}.others must be 'random', 'train', 'module:function' or a "
                        f"saved run's path, got {others!r}")
    if others != "random" and not config.team:
        raise ValueError(f"{c}.others={others!r} says what the groups other than the team "
                         "do: name the team too (team=<group>)")
    if others == "train":  # each group on its own fitness: which ES kinds and modes fit
        from feudal_es.group_fitness import check_config

        try:
            check_config(config)
        except ValueError as e:
            raise ValueError(f"{c}: {e}") from None
