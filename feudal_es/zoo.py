"""The zoo: small trained swarms shipped in the repository, so a newcomer can evaluate and
render one before training anything (``feudal-es zoo``, ``feudal-es eval zoo:rover``,
``feudal-es render zoo:rover --out rover.gif``).

An entry is a folder ``zoo/<name>/`` holding one training checkpoint
(``ckpt_<round>.safetensors``, as a run directory holds it) and ``entry.json``: what it
is, the command that trained it, the env steps it trained for and its score on held-out
episodes (``score``: the team fitness' mean over ``episodes`` episodes of seed ``seed``,
the numbers ``feudal-es eval zoo:<name> --selector final --episodes E --seed S``
prints). ``entry.json`` is data: its fields are read and shown, never imported or called,
and the checkpoint is found by the folder's own listing, not by a path the file names.
``experiments/zoo.py`` (re)builds the entries.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

__all__ = ["PREFIX", "ZOO", "entries", "entry", "is_zoo", "resolve"]

PREFIX = "zoo:"  # what names a zoo entry where a run directory is expected
ZOO = Path(__file__).resolve().parent.parent / "zoo"  # the repository's zoo folder
ENTRY = "entry.json"
_NAME = re.compile(r"[a-z0-9][a-z0-9_\-]*")
_FIELDS = {"name": (str, "a string"), "env": (str, "a string"),
           "description": (str, "a string"), "command": (str, "a string"),
           "env_steps": (int, "an int"), "score": (dict, "an object")}


def is_zoo(spec: Any) -> bool:
    """Whether ``spec`` names a zoo entry (``"zoo:<name>"``)."""
    return isinstance(spec, str) and spec.startswith(PREFIX)


def entries(root: Path = ZOO) -> list[dict[str, Any]]:
    """Every entry of the zoo at ``root``, by name (each as :func:`entry` reads it)."""
    if not root.is_dir():
        return []
    return [entry(p.name, root) for p in sorted(root.iterdir())
            if p.is_dir() and (p / ENTRY).is_file()]


def entry(name: str, root: Path = ZOO) -> dict[str, Any]:
    """The entry ``name``: its ``entry.json`` checked field by field, plus ``"path"`` (its
    folder). An unknown name is refused with the closest names."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"zoo entry names are lower-case letters, digits, '_' and '-'; got "
                         f"{name!r}")
    folder = root / name
    if not (folder / ENTRY).is_file():
        known = [p.name for p in sorted(root.iterdir())] if root.is_dir() else []
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"no zoo entry {name!r} in {root} (feudal-es zoo lists them: "
                         f"{', '.join(known) or 'none'}){hint}")
    try:
        data = json.loads((folder / ENTRY).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"zoo entry {name!r}: {folder / ENTRY} is not readable JSON ({e})"
                         ) from None
    if not isinstance(data, dict):
        raise ValueError(f"zoo entry {name!r}: {ENTRY} must hold a JSON object")
    for field, (kind, what) in _FIELDS.items():
        if not isinstance(data.get(field), kind) or isinstance(data.get(field), bool):
            raise ValueError(f"zoo entry {name!r}: {ENTRY} field {field!r} must be {what}, "
                             f"got {data.get(field)!r}")
    if data["name"] != name:
        raise ValueError(f"zoo entry {name!r}: {ENTRY} names itself {data['name']!r}")
    score = data["score"]
    for field in ("mean", "tolerance"):
        if not isinstance(score.get(field), (int, float)) or isinstance(score[field], bool):
            raise ValueError(f"zoo entry {name!r}: score.{field} must be a number")
    for field in ("episodes", "seed"):
        if not isinstance(score.get(field), int) or isinstance(score[field], bool):
            raise ValueError(f"zoo entry {name!r}: score.{field} must be an int")
    return {**data, "path": folder}


def resolve(spec: str, root: Path = ZOO) -> Path:
    """The folder of the entry ``spec`` names (``"zoo:<name>"``): a run directory that
    :func:`feudal_es.evaluate.load_trainer` reads like any other."""
    if not is_zoo(spec):
        raise ValueError(f"{spec!r} does not name a zoo entry ({PREFIX}<name>)")
    return entry(spec[len(PREFIX):], root)["path"]
