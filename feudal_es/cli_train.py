"""``feudal-es train`` and ``feudal-es demo``: the config from the command line, a run
with its progress bar and summary, resume checks, and what a failed write leaves behind
(the parser: :mod:`feudal_es.cli_parser`; the entry point: :mod:`feudal_es.cli`)."""

from __future__ import annotations

import argparse
import contextlib
import math
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feudal_es.config import TrainerConfig
    from feudal_es.trainer import ESTrainer


def _fmt(x: float | None, digits: int = 4) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


def train_config(args: argparse.Namespace, base: TrainerConfig | None = None
                 ) -> TrainerConfig:
    """The run's :class:`~feudal_es.config.TrainerConfig`: ``--config`` (or ``base``), then
    ``--env`` / ``--mode`` / ``--n-outer`` / ``--seed(s)`` and every ``--set`` on top."""
    from feudal_es.config import TrainerConfig, parse_assignment

    given = lambda name: getattr(args, name, None) is not None  # "" or 0 is given, too
    cfg = TrainerConfig.load(args.config) if given("config") else base or TrainerConfig()
    sets: dict[str, Any] = {}
    if given("env"):
        sets["env"] = args.env
    for name in ("mode", "n_outer", "seed"):
        if given(name):
            sets[name] = getattr(args, name)
    if given("seeds"):
        sets["seeds"] = list(args.seeds)
    if given("num_seeds"):
        if args.seeds:
            raise ValueError("--seeds and --num-seeds: give one of them")
        first = sets.get("seed", cfg.seed)
        sets["seeds"] = list(range(first, first + args.num_seeds))
    for text in args.set or ():
        k, v = parse_assignment(text)
        sets[k] = v
    if getattr(args, "imports", None):  # recorded, so eval / resume can say what to pass
        sets["imports"] = sorted({*cfg.imports, *args.imports})
    return cfg.override(sets) if sets else cfg


def list_keys(args: argparse.Namespace, base: Any = None) -> int:
    """``--list-keys``: every ``--set`` key with its type, value and doc
    (:func:`feudal_es.cli_args.format_config_keys`), the values those of the config the
    command would run (``base``: the command's own default config, e.g. the demo's)."""
    from feudal_es.cli_args import format_config_keys

    source = (f"{args.config}'s" if getattr(args, "config", None)
              else "demo_config()'s" if base is not None else "the built-in defaults")
    if args.set:
        source += ", after --set"
    print(format_config_keys(train_config(args, base), source))
    return 0


def run_training(trainer: ESTrainer, progress: bool) -> int:
    """Run an ``ESTrainer`` (one seed or many) and print where everything went."""
    cfg = trainer.config
    seeds = f", seeds {list(trainer.seeds)} in one program" if trainer.many else ""
    es = (f"population {cfg.es.num_candidates} x {cfg.episodes} episodes, ES on "
          f"{trainer.theta_size} parameters ({cfg.es_params})" if cfg.runs_es
          else "MAPPO only (nothing evolved)")
    # which actor and MAPPO budget (the env's defaults or the config's), the options
    chosen = trainer.defaults.describe(cfg, trainer.skill_names) + _groups(trainer)
    print(f"feudal-es: training {cfg.env} ({trainer.env.kind} path), mode {cfg.mode}, "
          f"{cfg.n_outer} rounds from round {trainer.round}, {es}{seeds}\n  {chosen}",
          flush=True)
    t0 = time.perf_counter()
    gif_reasons: list[str] = []
    try:
        with _no_gif_reasons(gif_reasons):
            trainer.run(progress=progress)
    except KeyboardInterrupt as e:
        import signal

        signum = getattr(e, "signum", signal.SIGINT)
        from feudal_es.write_errors import next_step

        how = ("finished the round in progress and checkpointed"
               if getattr(e, "graceful", False) else "interrupted; completed rounds are saved")
        argv = sys.argv[1:] if sys.argv[1:2] in (["train"], ["demo"]) else None
        print(f"\nfeudal-es: {how}: {trainer.round} rounds done; "
              f"{next_step(trainer.run_dir, argv)}", file=sys.stderr)
        return 128 + int(signum)
    except OSError as e:
        if not _is_write_failure(e, trainer.run_dir):
            raise
        from feudal_es.write_errors import run_failure

        argv = sys.argv[1:] if sys.argv[1:2] in (["train"], ["demo"]) else None
        print(f"feudal-es: {run_failure(e, trainer.run_dir, argv)}", file=sys.stderr)
        return 1
    if trainer.many:
        print(f"done in {time.perf_counter() - t0:.1f}s: {trainer.round} rounds of "
              f"{len(trainer.seeds)} seeds; run dir: {trainer.run_dir}")
        for rec, history in zip(trainer.recorders, trainer.histories, strict=True):
            print(f"seed {rec.config.seed}: {_summary(history, rec.best_fitness)}; "
                  f"{rec.rundir.path}")
        return 0
    rd = trainer.rundir
    written = lambda p: p if p.exists() else "(not written)"
    gif = (rd.gif if rd.gif.exists()
           else "(not written: the config's gif is false; `feudal-es render "
                f"{shlex.quote(str(rd.path))} --out FILE` writes one)" if not cfg.gif
           else f"(not written: {gif_reasons[-1]})" if gif_reasons else "(not written)")
    steps = (trainer.history[-1] if trainer.history else {}).get("env_steps", 0)
    print(f"done in {time.perf_counter() - t0:.1f}s: {trainer.round} rounds, "
          f"{_summary(trainer.history, trainer.best_fitness)}, {steps} MAPPO env steps")
    print(f"run dir:        {rd.path}")
    print(f"metrics:        {rd.metrics}")
    print(f"learning curve: {written(rd.plot)}")
    print(f"best selector:  {written(rd.best_selector)}")
    print(f"checkpoint:     {rd.checkpoints.latest() or '(none)'}")
    print(f"episode GIF:    {gif}")
    print(f"evaluate:       {eval_command(cfg, rd.path)}")
    return 0


def _groups(trainer: Any) -> str:
    """``"; agents in groups: ..."`` for a grouped actor (one actor per group), else ``""``."""
    actor = trainer.ts.actor
    if not hasattr(actor, "names"):  # a FeudalActor: one shared actor
        return ""
    sizes = ", ".join(f"{n} ({len(g)})" for n, g in zip(actor.names, actor.groups,
                                                        strict=True))
    return f"; agents in groups, one actor each: {sizes}"


def eval_command(cfg: Any, run_dir: Path) -> str:
    """The ``feudal-es eval`` command line of a finished run, as this process was started
    (its console script's path), with the ``--import`` / ``--env`` it needs (the module
    of the other groups' scripted policy included)."""
    from feudal_es import opponents
    from feudal_es.resolve import is_code_reference

    prog = sys.argv[0] if Path(sys.argv[0]).name == "feudal-es" else "feudal-es"
    argv = [prog, "eval", str(run_dir)]
    modules = list(cfg.imports)
    if opponents.is_function(cfg.others):  # the other groups' scripted policy
        modules.append(cfg.others.partition(":")[0])
    for module in dict.fromkeys(modules):
        argv += ["--import", module]
    if is_code_reference(cfg.env):
        argv += ["--env", cfg.env]
    return shlex.join(argv)


@contextlib.contextmanager
def _no_gif_reasons(reasons: list[str]) -> Iterator[None]:
    """Collect into ``reasons`` why the run's final GIF was not written, as the trainer
    logs it (``no GIF: <reason>``, the reason `feudal-es render` gives too), so the run
    summary says why instead of a bare "(not written)"."""
    import logging

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if text.startswith("no GIF: "):
                reasons.append(text[len("no GIF: "):])

    logger, handler = logging.getLogger("feudal_es"), Keep(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _summary(history: list[dict], best: float) -> str:
    """The last round in the progress bar's and the plot's names (rundir.LABELS)."""
    from feudal_es.rundir import LABELS

    if not history:
        return "no rounds"
    last = history[-1]
    scored = [(h["selector_fitness"], i) for i, h in enumerate(history)
              if h.get("selector_fitness") is not None]
    at = max(scored, key=lambda x: x[0])[1] if scored else None  # first round of the best
    text = (f"{LABELS['selector_fitness']} {_fmt(last.get('selector_fitness'))}, "
            f"{LABELS['best_selector']} {_fmt(best)}"
            + (f" (round {history[at]['round'] + 1})" if at is not None else ""))
    if last.get("fitness_best") is not None:
        text += f", {LABELS['fitness_best']} {_fmt(last['fitness_best'])}"
    return text + " (team fitness, higher is better)"


def _is_write_failure(err: OSError, run_dir: Path | None) -> bool:
    """A full / read-only / failing disk, or any OS error on a file of the run directory
    (as opposed to an error raised inside a user's env): see
    :func:`feudal_es.write_errors.is_run_write_failure`."""
    from feudal_es.write_errors import is_run_write_failure

    return is_run_write_failure(err, run_dir)


def cmd_train(args: argparse.Namespace) -> int:
    from feudal_es.distributed import is_writer
    from feudal_es.rundir import check_new_run_dir
    from feudal_es.runlock import RunLock
    from feudal_es.trainer import ESTrainer

    if args.list_keys:
        return list_keys(args)
    if args.resume:
        if (args.config or args.set or args.mode or args.out or args.seeds or args.num_seeds
                or args.seed is not None):
            raise ValueError("--resume continues a run with its own config; only --n-outer "
                             "(and --env repeating the run's env) may be given with it")
        _check_resume_path(Path(args.resume))
    else:
        config = train_config(args)
        if args.out and is_writer():  # before any banner or compilation
            check_new_run_dir(args.out)
    # locked before anything is written into it (by process 0 alone of jax.distributed's)
    run_dir = (args.resume or args.out) if is_writer() else None
    advice = ("wait for it to end, then resume it" if args.resume
              else "wait for it to end or choose another --out")
    try:
        with RunLock(run_dir, advice) if run_dir else contextlib.nullcontext():
            if not args.resume:
                return run_training(ESTrainer(config, args.out), not args.no_progress)
            trainer = ESTrainer.resume(args.resume, n_outer=args.n_outer, env=args.env)
            if trainer.round >= trainer.config.n_outer:
                print(f"feudal-es: nothing to do: {args.resume} has completed "
                      f"{trainer.round} of its {trainer.config.n_outer} rounds; pass "
                      f"--n-outer N with N > {trainer.round} to extend it")
                return 0
            return run_training(trainer, progress=not args.no_progress)
    except OSError as e:  # the lock or the resume's rewrite of the run directory
        if not (run_dir and _is_write_failure(e, Path(run_dir))):
            raise
        from feudal_es.write_errors import run_failure

        argv = sys.argv[1:] if sys.argv[1:2] == ["train"] else None
        print(f"feudal-es: {run_failure(e, run_dir, argv)}", file=sys.stderr)
        return 1


def _check_resume_path(path: Path) -> None:
    """Refuse a ``--resume`` that is not a directory, saying what it is and what
    ``--resume`` takes: a run directory (a checkpoint file is evaluated or rendered, and
    its run directory resumed)."""
    if path.is_dir():
        return
    if not path.exists():
        raise ValueError(f"cannot resume {path}: no such directory (--resume takes the run "
                         "directory a `feudal-es train` wrote)")
    from feudal_es.checkpoint import CheckpointManager

    hint = ""
    if CheckpointManager(path.parent).latest() is not None:
        hint += f"; to continue its run: feudal-es train --resume {shlex.quote(str(path.parent))}"
    if path.name.startswith("ckpt_"):
        hint += f"; to evaluate this checkpoint: feudal-es eval {shlex.quote(str(path))}"
    raise ValueError(f"cannot resume {path}: it is a file, not a run directory (--resume "
                     f"takes the directory a `feudal-es train` wrote){hint}")


def cmd_demo(args: argparse.Namespace) -> int:
    from feudal_es.config import demo_config
    from feudal_es.trainer import ESTrainer

    args.config = None
    if args.list_keys:
        return list_keys(args, demo_config())
    cfg = train_config(args, demo_config())
    print("feudal-es demo: MERL on a bundled swarm env with a compact actor sized for a CPU "
          "(feudal_es.config.demo_config); `feudal-es train --help` for the full tool.")
    return run_training(ESTrainer(cfg, args.out), progress=not args.no_progress)
