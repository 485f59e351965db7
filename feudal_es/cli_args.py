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
from typing import Any, NoReturn

__all__ = ["HelpFormatter", "Parser", "at_least", "config_keys", "field_docs", "format_config_keys",
           "seed", "text"]


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage error is one line, ``<prog>: error: <cause>``,
    pointing at ``--help`` for the usage (subcommands' parsers are of this class too),
    and whose help is formatted by :class:`HelpFormatter` unless another is given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

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


# ---------------------------------------------------------------------------------------
# help texts that read the config (imported only when a help text is printed)
# ---------------------------------------------------------------------------------------
class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, filling ``%(config_default)s`` and ``%(demo_default)s`` in
    an option's help with the value of the option's field (its ``dest``) in
    :class:`~feudal_es.config.TrainerConfig` and :func:`~feudal_es.config.demo_config`.
    The defaults a help text states are the code's own, so they cannot drift from it;
    the config (which imports JAX, seconds) is read only when help is printed."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        for token, make in (("%(config_default)s", "TrainerConfig"),
                            ("%(demo_default)s", "demo_config")):
            if token in text:
                from feudal_es import config

                value = getattr(getattr(config, make)(), action.dest)
                text = text.replace(token, str(value).replace("%", "%%"))
        return text


def _comment_lines(source: str) -> tuple[dict[int, str], dict[int, str]]:
    """``(trailing, whole)``: the text of each comment of ``source`` by line number
    (1-based), split into comments after code on their line and comment-only lines."""
    import io
    import tokenize

    lines = source.splitlines()
    trailing, whole = {}, {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            text = tok.string.lstrip("#").strip()
            (whole if not lines[row - 1][:col].strip() else trailing)[row] = text
    return trailing, whole


def _docstring_attributes(doc: str | None) -> dict[str, str]:
    """The entries of a Google-style ``Attributes:`` section: ``{name: text}``."""
    import re

    out: dict[str, str] = {}
    section, name, indent = False, None, 0
    for line in (doc or "").splitlines():
        stripped = line.strip()
        if stripped == "Attributes:":
            section = True
            continue
        if not section:
            continue
        if not stripped:
            break
        depth = len(line) - len(line.lstrip())
        m = re.match(r"(\w+):\s*(.*)", stripped)
        if m and (name is None or depth <= indent):
            name, indent = m.group(1), depth
            out[name] = m.group(2)
        elif name is not None and depth > indent:
            out[name] += " " + stripped
        else:
            break
    return out


def field_docs(cls: type) -> dict[str, str]:
    """Each dataclass field's doc where ``cls`` keeps it: the comment on the field's
    line, else the comment lines right above it (a ``# --- section ---`` header is not a
    doc), else its entry in the class docstring's ``Attributes:`` section. A field
    without any is missing (tests/test_cli_help.py wants one for every ``--set`` key)."""
    import ast
    import dataclasses
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(cls))
    trailing, whole = _comment_lines(source)
    attributes = _docstring_attributes(cls.__doc__)
    names = {f.name for f in dataclasses.fields(cls)}
    docs: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id in names):
            continue
        name = node.target.id
        own = [trailing[r] for r in range(node.lineno, node.end_lineno + 1) if r in trailing]
        above, row = [], node.lineno - 1
        while row in whole and not whole[row].startswith("---"):
            above.insert(0, whole[row])
            row -= 1
        text = " ".join(own or above) or attributes.get(name, "")
        if text:
            docs[name] = text
    return docs


def config_keys(config: Any = None) -> list[tuple[str, str, Any, str]]:
    """Every ``--set`` key of a :class:`~feudal_es.config.TrainerConfig` as ``(dotted
    key, type, value in ``config`` (default: the built-in defaults), doc)``, from the
    dataclasses themselves: their fields, annotations and :func:`field_docs`. A nested
    config (``es``, ``mappo``, ``actor``, ``critic``) gives one key per field of it;
    ``env_kwargs`` one key, ``env_kwargs.NAME``, for the env's own keyword arguments."""
    import dataclasses

    from feudal_es.config import TrainerConfig

    config = TrainerConfig() if config is None else config
    rows: list[tuple[str, str, Any, str]] = []

    def walk(obj: Any, prefix: str) -> None:
        docs = field_docs(type(obj))
        for f in dataclasses.fields(obj):
            value, doc = getattr(obj, f.name), docs.get(f.name, "")
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            elif f.name == "env_kwargs" and not prefix:
                rows.append((f"{f.name}.NAME", "JSON", value,
                             f"{doc} (each keyword argument of the env, e.g. "
                             "env_kwargs.num_agents=4)"))
            else:
                rows.append((prefix + f.name, str(f.type), value, doc))

    walk(config, "")
    return rows


def format_config_keys(config: Any = None, source: str = "built-in defaults") -> str:
    """:func:`config_keys` as the text ``--list-keys`` prints: one line per key, ``KEY
    (TYPE, VALUE): doc``; ``source`` says where the values come from. A key the config
    leaves to the env (its ``auto`` settings, chosen by observation kind when the run
    starts) shows ``VALUE or auto``, so the listed value is not taken for the one a run
    uses."""
    import json

    from feudal_es.config import TrainerConfig

    config = TrainerConfig() if config is None else config
    rows, auto = config_keys(config), getattr(config, "auto", None) or ()
    lines = [f"--set KEY=VALUE keys (VALUE is JSON, else a plain string); values: {source}"
             + ("; 'or auto': chosen for the env (by its observation kind) when the run "
                "starts, unless given" if auto else "")]
    for key, kind, value, doc in rows:
        shown = json.dumps(value, ensure_ascii=False, default=str)
        if key in auto:
            shown += " or auto"
        lines.append(f"{key} ({kind}, {shown}): {doc}" if doc else f"{key} ({kind}, {shown})")
    return "\n".join(lines)
