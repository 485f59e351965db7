"""The command line's value types and its one-line usage error, for ``feudal_es.cli``.

A value that would silently read as "not given" is refused where it is parsed: an empty
or blank id, path or name (``--env ""`` would otherwise train the default env), a count
of 0 (``eval --episodes 0`` would otherwise evaluate the default 16), a seed that
``jax.random.key`` cannot take whole. A bad command line is one line on stderr, like
every other error of ``feudal-es`` (:mod:`feudal_es.errors`), exit status 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

__all__ = ["Parser", "at_least", "seed", "text"]


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage error is one line, ``<prog>: error: <cause>``,
    pointing at ``--help`` for the usage (subcommands' parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def text(value: str) -> str:
    """An id, path or name; an empty or blank one is refused."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"must not be empty, got {value!r}")
    return value


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None


def seed(value: str) -> int:
    """A seed in the range :func:`feudal_es.config.check_seed` accepts."""
    from feudal_es.config import check_seed

    try:
        return check_seed("the seed", _integer(value))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def at_least(low: int) -> Callable[[str], int]:
    """The type of an integer >= ``low``."""
    def count(value: str) -> int:
        n = _integer(value)
        if n < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {n}")
        return n

    count.__name__ = f"integer >= {low}"
    return count
