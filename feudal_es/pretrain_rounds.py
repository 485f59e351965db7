"""An imitation's completed rounds, kept so that a stopped one goes on where it stopped.

An imitation at LPAC's sizes runs for tens of minutes, most of it in its data rounds
(collection, then training to early stopping). With a rounds file,
:func:`feudal_es.pretrain.imitate` writes after every round what the next one starts
from: the actor and its optimizer state, the data and validation sets gathered so far
(their filled part), the key, the curve and losses, and with ``select_episodes`` the
actor chosen so far. A later call with the same file, inputs and config loads it and
begins at the next round, and reaches the actor an unstopped run reaches, bit for bit
(one machine, one program). The file is an ordinary checkpoint (:mod:`feudal_es.checkpoint`:
safetensors, atomic, verified), of kind ``"imitation_rounds"``; one made by another config
or other inputs is refused naming the difference, never silently mixed in. It is left in
place when the imitation ends: the caller removes it once the result is safe
(``feudal-es pretrain`` does after saving the actor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from feudal_es import checkpoint
from feudal_es.pretrain_curve import beside

if TYPE_CHECKING:
    from feudal_es.pretrain_config import PretrainConfig

__all__ = ["KIND", "Rounds", "load_rounds", "rounds_path", "save_rounds"]

KIND = "imitation_rounds"


def rounds_path(path: str | Path) -> Path:
    """Where ``feudal-es pretrain`` keeps the rounds of the actor it writes at ``path``:
    ``NAME.rounds.safetensors`` beside ``NAME.safetensors``."""
    return beside(path, f"rounds{checkpoint.SUFFIX}")


class Rounds(NamedTuple):
    """What a rounds file holds."""

    done: int  # the rounds completed: the next round's index
    # "actor", "opt", "data" and "val" (the filled rows), "key", and "chosen" (the actor
    # chosen so far) where ``select_episodes`` chooses
    tree: dict[str, Any]
    losses: list[float]
    curve: list[dict[str, float]]
    team_returns: list[float]
    val_loss: float  # the last round's actor's validation loss
    chosen_val_loss: float | None  # the chosen actor's


def _made_by(cfg: PretrainConfig, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"kind": KIND, "pretrain": dataclasses.asdict(cfg), "inputs": dict(inputs or {})}


def save_rounds(path: str | Path, cfg: PretrainConfig, inputs: Mapping[str, Any] | None,
                state: Rounds) -> Path:
    """Write ``state`` (its ``done`` rounds of the imitation ``cfg``, made from
    ``inputs``: whatever else decides it, e.g. the env and actor) atomically to ``path``."""
    return checkpoint.save(path, state.tree, {
        **_made_by(cfg, inputs), "done": state.done, "losses": state.losses,
        "curve": state.curve, "team_returns": state.team_returns,
        "val_loss": state.val_loss, "chosen_val_loss": state.chosen_val_loss})


def load_rounds(path: str | Path, cfg: PretrainConfig, inputs: Mapping[str, Any] | None,
                template: Callable[[int], Any]) -> Rounds:
    """The rounds at ``path``, made by ``cfg`` and ``inputs`` (else
    :class:`~feudal_es.checkpoint.CheckpointError` naming what differs); ``template(done)``
    gives the tree's structure once the number of completed rounds is read."""
    try:
        meta = checkpoint.read_metadata(path)
    except checkpoint.CheckpointError as e:  # damaged: truncated, edited, not safetensors
        raise checkpoint.CheckpointError(f"{e} (remove {path} to start the imitation "
                                         "over)") from None
    if meta.get("kind") != KIND:
        raise checkpoint.CheckpointError(
            f"{path} is not an imitation's rounds file (its kind: {meta.get('kind')!r}); "
            "give another path or remove it")
    done = meta.get("done")
    if not isinstance(done, int) or isinstance(done, bool) or not 1 <= done <= cfg.rounds:
        raise checkpoint.CheckpointError(f"{path} holds {done!r} completed rounds: expected "
                                         f"1 to {cfg.rounds}")
    try:
        tree, meta = checkpoint.load(path, template(done), expect=_made_by(cfg, inputs))
    except checkpoint.CheckpointError as e:
        raise checkpoint.CheckpointError(f"{e} (remove {path} to start the imitation "
                                         "over)") from None
    losses, curve = meta.get("losses"), meta.get("curve")
    team_returns, chosen = meta.get("team_returns"), meta.get("chosen_val_loss")
    val_loss = meta.get("val_loss")
    if not (isinstance(losses, list) and isinstance(curve, list)
            and isinstance(team_returns, list) and all(isinstance(p, dict) for p in curve)
            and isinstance(val_loss, float) and (chosen is None or isinstance(chosen, float))):
        raise checkpoint.CheckpointError(f"{path}: its losses, curve or team returns are "
                                         "not what an imitation writes")
    return Rounds(done, tree, losses, curve, team_returns, val_loss, chosen)
