"""feudal-es command line: train, evaluate and render feudal swarms.

Subcommands:
  train   MERL training (ES selector + MAPPO executor) on a bundled or registered env
  eval    compare saved selectors on identical episodes (table or JSON)
  envs    list trainable env ids (bundled and PettingZoo-registered)
  zoo     list the trained swarms shipped in zoo/ (eval / render zoo:NAME)
  render  write an episode GIF of a run or checkpoint
  demo    a CPU-sized training run on a bundled env (what `make demo` runs)
  pretrain imitate a reference policy (behaviour cloning + DAgger) before training
  convert rewrite a checkpoint of an older feudal-es (.npz) as .safetensors

Every command takes ``--import MODULE`` (repeatable): the module is imported before env
ids are resolved, so envs it registers with ``pettingzoo.register`` can be named.

A mistake (in the command line, the config, a file, the env) is one line on stderr,
``feudal-es <command>: error: <cause>``, exit status 2 (FEUDAL_ES_TRACEBACK=1 adds the
traceback, e.g. to debug an env); a bug in feudal-es shows its traceback (exit status 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from feudal_es.cli_parser import build_parser

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every exception that ends it is reported by
    :func:`feudal_es.errors.report`: the user's in one line (exit 2), a bug in feudal-es
    with its traceback (exit 1), Ctrl-C outside training in one line (exit 130; the
    program itself, ``argv`` None, then ends at once: :func:`feudal_es.errors.exit_now`)."""
    command = None
    try:
        from feudal_es.devices import use_cpu_cores
        from feudal_es.startup import prepare

        use_cpu_cores()  # before JAX runs anything: one CPU device per core
        args = build_parser().parse_args(argv)
        command = args.command
        _join(args)
        prepare(getattr(args, "imports", None))
        return args.func(args)
    except SystemExit:
        raise
    except BaseException as err:
        from feudal_es.errors import exit_now, report

        status = report(err, command)
        if isinstance(err, KeyboardInterrupt) and argv is None:
            exit_now(status)
        return status


def _join(args: Any) -> None:
    """``--coordinator``: join a ``jax.distributed`` run before JAX runs anything."""
    given = [getattr(args, k, None) is not None
             for k in ("coordinator", "num_processes", "process_id")]
    if not any(given):
        return
    if not all(given):
        raise ValueError("several processes need --coordinator, --num-processes and "
                         "--process-id together")
    from feudal_es.distributed import initialize

    initialize(args.coordinator, args.num_processes, args.process_id)


if __name__ == "__main__":
    raise SystemExit(main())
