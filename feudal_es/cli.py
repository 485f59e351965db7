"""feudal-es command line: train, evaluate and render feudal swarms.

Subcommands:
  train   MERL training (ES selector + MAPPO executor) on a bundled or registered env
  eval    compare saved selectors on identical episodes (table or JSON)
  envs    list trainable env ids (bundled and PettingZoo-registered)
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

import argparse
import contextlib
import json
import math
import shlex
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


# ---------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------
def _fmt(x: float | None, digits: int = 4) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


# ---------------------------------------------------------------------------------------
# train / demo
# ---------------------------------------------------------------------------------------
def _train_config(args: argparse.Namespace, base: Any = None):
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


def _list_keys(args: argparse.Namespace, base: Any = None) -> int:
    """``--list-keys``: every ``--set`` key with its type, value and doc
    (:func:`feudal_es.cli_args.format_config_keys`), the values those of the config the
    command would run (``base``: the command's own default config, e.g. the demo's)."""
    from feudal_es.cli_args import format_config_keys

    source = (f"{args.config}'s" if getattr(args, "config", None)
              else "demo_config()'s" if base is not None else "the built-in defaults")
    if args.set:
        source += ", after --set"
    print(format_config_keys(_train_config(args, base), source))
    return 0


def _run_training(trainer, progress: bool) -> int:
    """Run an ``ESTrainer`` (one seed or many) and print where everything went."""
    cfg = trainer.config
    seeds = f", seeds {list(trainer.seeds)} in one program" if trainer.many else ""
    es = (f"population {cfg.es.num_candidates} x {cfg.episodes} episodes, ES on "
          f"{trainer.theta_size} parameters ({cfg.es_params})" if cfg.runs_es
          else "MAPPO only (nothing evolved)")
    # which actor and MAPPO budget (the env's defaults or the config's), the options
    chosen = trainer.defaults.describe(cfg, trainer.skill_names)
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
    return 0


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


def _train(args: argparse.Namespace) -> int:
    from feudal_es.rundir import check_new_run_dir
    from feudal_es.runlock import RunLock
    from feudal_es.trainer import ESTrainer

    if args.list_keys:
        return _list_keys(args)
    if args.resume:
        if (args.config or args.set or args.mode or args.out or args.seeds or args.num_seeds
                or args.seed is not None):
            raise ValueError("--resume continues a run with its own config; only --n-outer "
                             "(and --env repeating the run's env) may be given with it")
        _check_resume_path(Path(args.resume))
    else:
        config = _train_config(args)
        if args.out:  # before any banner or compilation
            check_new_run_dir(args.out)
    run_dir = args.resume or args.out  # locked before anything is written into it
    advice = ("wait for it to end, then resume it" if args.resume
              else "wait for it to end or choose another --out")
    try:
        with RunLock(run_dir, advice) if run_dir else contextlib.nullcontext():
            if not args.resume:
                return _run_training(ESTrainer(config, args.out), not args.no_progress)
            trainer = ESTrainer.resume(args.resume, n_outer=args.n_outer, env=args.env)
            if trainer.round >= trainer.config.n_outer:
                print(f"feudal-es: nothing to do: {args.resume} has completed "
                      f"{trainer.round} of its {trainer.config.n_outer} rounds; pass "
                      f"--n-outer N with N > {trainer.round} to extend it")
                return 0
            return _run_training(trainer, progress=not args.no_progress)
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


def _demo(args: argparse.Namespace) -> int:
    from feudal_es.config import demo_config
    from feudal_es.trainer import ESTrainer

    args.config = None
    if args.list_keys:
        return _list_keys(args, demo_config())
    cfg = _train_config(args, demo_config())
    print("feudal-es demo: MERL on a bundled swarm env with a compact actor sized for a CPU "
          "(feudal_es.config.demo_config); `feudal-es train --help` for the full tool.")
    return _run_training(ESTrainer(cfg, args.out), progress=not args.no_progress)


# ---------------------------------------------------------------------------------------
# eval
# ---------------------------------------------------------------------------------------
def _eval(args: argparse.Namespace) -> int:
    from feudal_es.evaluate import compare_selectors, load_trainer

    trainer, ckpt = load_trainer(args.run, env=args.env)
    result = compare_selectors(trainer, ckpt, args.selector, args.episodes, args.seed,
                               args.force)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "metrics"}, indent=2))
        return 0
    rows, metric_names, episodes = result["selectors"], result["metrics"], result["episodes"]
    better = getattr(getattr(trainer.runtime, "core", None), "metric_better", {})
    what = "selector" if len(rows) == 1 else "selectors"
    print(f"{trainer.config.env}: {len(rows)} {what} on the same {episodes} episodes "
          f"(seed {args.seed}), executor of {ckpt}; team fitness: higher is better")
    header = ["selector", "team fitness (mean ± std)", "95% CI",
              *[f"{m} ({better[m]} is better)" if m in better else m for m in metric_names]]
    table = [[r["selector"], f"{r['fitness_mean']:.4f} ± {r['fitness_std']:.4f}",
              f"[{r['ci95'][0]:.4f}, {r['ci95'][1]:.4f}]",
              *[f"{r[m]:.4f}" for m in metric_names]] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=True)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))
    print(line(header))
    print(line(["-" * w for w in widths]))
    for t in table:
        print(line(t))
    return 0


# ---------------------------------------------------------------------------------------
# envs / render
# ---------------------------------------------------------------------------------------
def _envs(args: argparse.Namespace) -> int:
    import envs
    from envs.jaxmarl_env import INSTALL_HINT, available, jaxmarl_ids
    from feudal_es.resolve import JAXMARL_PREFIX, importable_ids, trainable_ids

    bundled = sorted(envs.register_bundled_envs())
    # every id is made once and checked as training checks it: only what trains is
    # listed as trainable, the others apart with the reason training would give
    jaxmarl, jaxmarl_refused = trainable_ids([JAXMARL_PREFIX + n for n in jaxmarl_ids()])
    registered, missing = importable_ids()
    others, refused = trainable_ids([i for i in registered if i not in bundled])
    if args.json:
        rows = ([{"id": i, "path": "jax", "source": "bundled"} for i in bundled]
                + [{"id": i, "path": "jax", "source": "jaxmarl"} for i in jaxmarl]
                + [{"id": i, "path": "host", "source": "pettingzoo"} for i in others])
        print(json.dumps(rows, indent=2))
        return 0
    print("bundled (pure-JAX path):")
    for i in bundled:
        print(f"  {i}")
    if available():
        print("JaxMARL (pure-JAX path; envs whose agents share one observation and action "
              "space, flat observations):")
        for i in jaxmarl:
            print(f"  {i}")
    else:
        print(f"JaxMARL envs (jaxmarl/<name>, pure-JAX path): not installed; {INSTALL_HINT}")
    print("registered with PettingZoo (host path):")
    for i in others:
        print(f"  {i}")
    for namespace, ids in missing.items():
        print(f"  ({len(ids)} {namespace}/... ids need an extra: "
              f"pip install 'pettingzoo[{namespace}]')")
    if jaxmarl_refused or refused:
        print("installed but not trainable by feudal-es (made with default arguments; why):")
        for i, why in {**jaxmarl_refused, **refused}.items():
            print(f"  {i}: {why}")
    print("Also accepted: 'module:attr' naming a SwarmEnv class or a ParallelEnv factory "
          "(--import MODULE loads a module that registers envs).")
    return 0


def _render(args: argparse.Namespace) -> int:
    from feudal_es.atomic import check_writable
    from feudal_es.evaluate import load_trainer, selector_theta
    from feudal_es.write_errors import output_failure

    try:
        check_writable(args.out)  # before any work
    except OSError as e:
        raise ValueError(output_failure(e, args.out)) from None
    trainer, ckpt = load_trainer(args.run, env=args.env)
    theta = None  # the actor's own: the checkpoint's current ("final") selector
    if args.selector:
        theta = selector_theta(args.selector, trainer, ckpt, args.force)[1]
    try:
        out = trainer.write_gif(args.out, theta=theta, seed=args.seed)
    except OSError as e:
        raise ValueError(output_failure(e, args.out)) from None
    if out is None:
        return 1
    print(f"episode GIF: {out}")
    return 0


def _pretrain(args: argparse.Namespace) -> int:
    from feudal_es.pretrain import PretrainConfig, pretrain
    from feudal_es.resolve import resolve_env

    if args.list_keys:
        return _list_keys(args)
    cfg = _train_config(args)
    env = resolve_env(cfg.env, cfg.env_kwargs)
    names = list(env.core.skill_names) if env.kind == "jax" else []
    if args.option in names:
        option = names.index(args.option)
    elif args.option.isdigit():
        option = int(args.option)
    else:
        raise ValueError(f"--option {args.option!r}: name an option of the env "
                         f"({', '.join(names) or 'none'}) or give its index")
    pcfg = PretrainConfig(expert=args.expert, option=option, rounds=args.rounds,
                          episodes=args.episodes, steps_per_round=args.steps, seed=cfg.seed)
    try:
        out, rows, losses = pretrain(cfg, pcfg, args.out, args.eval_episodes,
                                     args.eval_seed, log=lambda msg: print(msg, flush=True))
    except OSError as e:  # the output cannot be written (refused before any work)
        from feudal_es.write_errors import output_failure

        raise ValueError(output_failure(e, args.out or e.filename)) from None
    print(f"loss {losses[0]:.4g} -> {losses[-1]:.4g}; on {args.eval_episodes} held-out "
          f"episodes (seed {args.eval_seed}):")
    for who, row in rows.items():
        print(f"  {who:20s} " + ", ".join(f"{k} {v:.4g}" for k, v in row.items()))
    print(f"pretrained actor: {out} (start a run from it with --set init_from={out})")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from feudal_es.checkpoint import convert_v1
    from feudal_es.write_errors import output_failure

    try:
        out = convert_v1(args.src, args.dst)
    except OSError as e:
        if e.filename is not None and Path(str(e.filename)) == Path(args.src):
            raise  # reading the source failed
        raise ValueError(output_failure(e, args.dst or e.filename, "DST")) from None
    print(f"converted {args.src} -> {out}")
    return 0


# ---------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from feudal_es.cli_args import Parser, at_least, seed, text
    from feudal_es.modes import MODES

    # what --selector of eval and render names (feudal_es.evaluate.selector_theta)
    selector_choices = ("a selector file (.safetensors, e.g. RUN/best_selector.safetensors), "
                        "'final' (the current selector of the checkpoint: a finished run's "
                        "final one) or a checkpoint file (ckpt_*.safetensors: its current "
                        "selector)")
    common = Parser(add_help=False)
    common.add_argument("--import", dest="imports", action="append", metavar="MODULE",
                        type=text, help="import MODULE first (repeatable), e.g. one that "
                                        "registers envs with pettingzoo.register")
    parser = Parser(prog="feudal-es", description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog=__doc__.split("\n\n", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)

    def training_args(p: argparse.ArgumentParser, command: str) -> None:
        """The options of a command that builds a TrainerConfig (train, demo, pretrain):
        each offers only those it uses, and says what an option left out falls back to."""
        fallback = ("%(demo_default)s, from feudal_es.config.demo_config" if command == "demo"
                    else "the --config file's, else %(config_default)s")
        p.add_argument("--env", type=text, help=(
            "env id: a PettingZoo registry id, jaxmarl/<name> or 'module:attr' (see "
            "`feudal-es envs`)" + ("" if command == "demo" else
                                   "; it overrides the --config file's env")
            + f" (default: {fallback})"
            + ("; with --resume, only the run's own env, repeated (how to trust a "
               "'module:attr' env read from the run)" if command == "train" else "")))
        if command != "pretrain":
            p.add_argument("--mode", choices=list(MODES), help=(
                "; ".join(f"{m.name}: {m.summary}" for m in MODES.values())
                + f" (default: {fallback})"))
            p.add_argument("--n-outer", type=int, help=(
                f"outer MERL rounds (default: {fallback})"
                + ("; with --resume, the rounds the run goes to (more than it has done "
                   "extends it)" if command == "train" else "")))
        p.add_argument("--seed", type=seed, help=(
            "seed of the run's random keys (network init, env episodes, ES noise), "
            f"0 .. 2**32 - 1 (default: {fallback})" if command != "pretrain" else
            "seed of the actor's initialisation and of the imitation episodes, "
            f"0 .. 2**32 - 1 (default: {fallback})"))
        if command != "pretrain":
            p.add_argument("--seeds", type=seed, nargs="+", metavar="SEED",
                           help="train these seeds in one program (vmapped, split over the "
                                "CPU devices), each in RUN_DIR/seed_<s>/")
            p.add_argument("--num-seeds", type=at_least(1), metavar="N",
                           help="train seeds SEED .. SEED+N-1 in one program (see --seeds)")
        p.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a config entry (repeatable), e.g. es.sigma=0.1, "
                            "env_kwargs.num_agents=4, actor.embed_dim=32; VALUE is JSON, "
                            "else a plain string; --list-keys lists every KEY")
        p.add_argument("--list-keys", action="store_true",
                       help="list every --set KEY (dotted path), its type, value and doc "
                            + ("(demo_config's values" if command == "demo" else
                               "(the built-in defaults, or the --config file's values")
                            + ", after any --set), then exit")
        if command != "pretrain":
            p.add_argument("--out", type=text,
                           help="run directory (default runs/<env>-<mode>-<time>)")
            p.add_argument("--no-progress", action="store_true", help="no progress bar")

    train = sub.add_parser("train", parents=[common], help="train a feudal swarm",
                           description="MERL training: MAPPO on the executor, ES on the "
                                       "selector, interleaved each outer round.")
    training_args(train, "train")
    train.add_argument("--config", type=text, help="TrainerConfig as a JSON file (fields of "
                                        "feudal_es.config.TrainerConfig; --list-keys lists "
                                        "them)")
    train.add_argument("--resume", metavar="RUN_DIR", type=text,
                       help="continue a run (its directory) from its newest checkpoint "
                            "(a checkpoint file is read by `feudal-es eval` / `render`)")
    train.set_defaults(func=_train)

    ev = sub.add_parser("eval", parents=[common], help="compare saved selectors",
                        description="Evaluate selectors with a run's executor on identical "
                                    "episodes: mean ± std and 95% CI of team fitness, plus "
                                    "the env's metrics at the end of each episode.")
    ev.add_argument("run", metavar="RUN_OR_CHECKPOINT", type=text,
                    help="a run directory (the executor of its newest checkpoint) or one "
                         "checkpoint file (ckpt_*.safetensors, the executor it holds)")
    ev.add_argument("--selector", nargs="+", action="extend", metavar="SELECTOR", type=text,
                    help=f"selectors to compare: {selector_choices} (default: the run's "
                         "best_selector.safetensors and 'final')")
    ev.add_argument("--env", type=text,
                    help="evaluate on this env id (another env of the same shapes, or the "
                         "run's own 'module:attr' env, which a run directory alone never "
                         "imports)")
    ev.add_argument("--episodes", type=at_least(2),
                    help="episodes (default: the run's config's episodes, at least 16)")
    ev.add_argument("--seed", type=seed, default=12345,
                    help="seed of the episodes (default: %(default)s)")
    ev.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ev.add_argument("--force", action="store_true",
                    help="evaluate selector files of another env or actor (a warning)")
    ev.set_defaults(func=_eval)

    en = sub.add_parser("envs", parents=[common], help="list trainable env ids",
                        description="List bundled and PettingZoo-registered env ids.")
    en.add_argument("--json", action="store_true")
    en.set_defaults(func=_envs)

    rd = sub.add_parser("render", parents=[common], help="episode GIF of a run",
                        description="Write a deterministic episode of a run's actor as a GIF.")
    rd.add_argument("run", metavar="RUN_OR_CHECKPOINT", type=text,
                    help="a run directory (the actor of its newest checkpoint) or one "
                         "checkpoint file (ckpt_*.safetensors)")
    rd.add_argument("--out", required=True, type=text, help="GIF path")
    rd.add_argument("--selector", metavar="SELECTOR", type=text,
                    help=f"the selector to play: {selector_choices} (default: 'final')")
    rd.add_argument("--env", type=text,
                    help="render on this env id (e.g. the run's own 'module:attr' env, which "
                         "a run directory alone never imports)")
    rd.add_argument("--seed", type=seed, default=0,
                    help="seed of the episode (default: %(default)s)")
    rd.add_argument("--force", action="store_true",
                    help="use a selector file of another env or actor (a warning)")
    rd.set_defaults(func=_render)

    demo = sub.add_parser("demo", parents=[common], help="CPU-sized training run "
                                                          "(what `make demo` runs)",
                          description="Train a feudal swarm on a bundled env with a compact "
                                      "actor and a small budget, then print the run "
                                      "directory, learning curve and GIF paths.")
    training_args(demo, "demo")
    demo.set_defaults(func=_demo)

    pt = sub.add_parser("pretrain", parents=[common], help="imitate a reference policy",
                        description="Behaviour cloning, then DAgger, of the executor from a "
                                    "bundled env's reference policy (e.g. clairvoyant Lloyd on "
                                    "Coverage), holding one option; writes a pretrained actor "
                                    "that a run starts from with --set init_from=PATH.")
    training_args(pt, "pretrain")
    pt.add_argument("--config", type=text,
                    help="TrainerConfig JSON (env, env_kwargs, actor sizes)")
    pt.add_argument("--out", type=text,
                    help="where to write the pretrained actor, a .safetensors file (default: "
                         "runs/<env>-<expert>-pretrained-<time>.safetensors)")
    pt.add_argument("--expert", default="reference", type=text,
                    help="reference policy name (envs.gif.POLICIES; Coverage: "
                         "lloyd_clairvoyant, lloyd, random)")
    pt.add_argument("--option", default="0", type=text,
                    help="option held while imitating (name or index, e.g. cover)")
    pt.add_argument("--rounds", type=at_least(1), default=3, help="1 = behaviour cloning only")
    pt.add_argument("--episodes", type=at_least(1), default=32, help="episodes per data round")
    pt.add_argument("--steps", type=at_least(1), default=300, help="gradient steps per round")
    pt.add_argument("--eval-episodes", type=at_least(2), default=16)
    pt.add_argument("--eval-seed", type=seed, default=4242)
    pt.set_defaults(func=_pretrain)
    cv = sub.add_parser("convert", help="rewrite an older (.npz) checkpoint as .safetensors",
                        description="Rewrite a format-1 .npz checkpoint or selector file of an "
                                    "older feudal-es in the current format (read with a "
                                    "guarded reader: stored members only, sizes checked "
                                    "first, no pickle).")
    cv.add_argument("src", type=text, help="the format-1 .npz file")
    cv.add_argument("dst", nargs="?", type=text,
                    help="where to write (default: SRC as .safetensors)")
    cv.set_defaults(func=_convert)
    return parser


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


if __name__ == "__main__":
    raise SystemExit(main())
