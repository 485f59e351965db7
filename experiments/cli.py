"""What every study's command line shares: the options (``--scale``, ``--seeds``,
``--out``) and the ``configs/`` recipes a study starts from, so each study script only
adds its own options.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.report import RESULTS
from experiments.training import SEEDS

__all__ = ["diagnostic_main", "diagnostic_parser", "load_config", "study_main"]


def study_main(run: Callable[..., Any], doc: str, argv: list[str] | None = None,
               options: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    """The command line every study shares: ``--scale``, ``--seeds``, ``--out``,
    ``--resume``;
    ``options(parser)`` adds a study's own, passed to ``run`` as keywords. JAX gets one
    CPU device per core first, as the trainer's CLI gives it (many seeds split over
    them)."""
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the env-step budget")
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--resume", action="store_true",
                   help="keep the arms an interrupted run of this study finished (their run "
                        "directories hold exactly their configs) and continue the one it "
                        "stopped in")
    if options is not None:
        options(p)
    a = vars(p.parse_args(argv))
    run(a.pop("scale"), tuple(a.pop("seeds")), a.pop("out"), **a)


def diagnostic_main(run: Callable[[Path, int], dict], markdown: Callable[[dict], str],
                    doc: str, episodes: int, argv: list[str] | None = None) -> None:
    """The command line of a diagnostic that trains nothing (``--episodes``, ``--out``):
    ``run(out, episodes)`` writes its report, whose markdown is printed."""
    a = diagnostic_parser(doc, episodes).parse_args(argv)
    print(markdown(run(a.out, a.episodes)), end="")


def diagnostic_parser(doc: str, episodes: int) -> argparse.ArgumentParser:
    """A diagnostic's parser with ``--episodes`` and ``--out`` (add its own flags)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--episodes", type=int, default=episodes)
    p.add_argument("--out", type=Path, default=RESULTS)
    return p


def load_config(name: str) -> dict[str, Any]:
    """A recipe of ``configs/`` (the settings a study shares across its arms)."""
    path = Path(__file__).resolve().parent.parent / "configs" / f"{name}.json"
    return json.loads(path.read_text())
