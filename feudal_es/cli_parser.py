"""The ``feudal-es`` argument parser: every command, its options and help (the commands
themselves: :mod:`feudal_es.cli_train`, :mod:`feudal_es.cli_tools`)."""

from __future__ import annotations

import argparse

from feudal_es.cli_tools import (
    cmd_convert,
    cmd_envs,
    cmd_eval,
    cmd_pretrain,
    cmd_render,
    cmd_zoo,
)
from feudal_es.cli_train import cmd_demo, cmd_train


def build_parser() -> argparse.ArgumentParser:
    """Every command with its options; ``args.func(args)`` runs the chosen one."""
    from feudal_es.cli_args import Parser, at_least, seed, text
    from feudal_es.modes import MODES

    # what --selector of eval and render names (feudal_es.evaluate.selector_theta)
    selector_choices = ("a selector file (.safetensors, e.g. RUN/best_selector.safetensors), "
                        "'final' (the current selector of the checkpoint: a finished run's "
                        "final one) or a checkpoint file (ckpt_*.safetensors: its current "
                        "selector)")
    # --set of eval and render: the env kwargs only (feudal_es.cli_tools.env_overrides)
    env_set = ("change an env kwarg of the run's config for this {what} (repeatable), e.g. "
               "env_kwargs.num_agents=8 or env_kwargs.world_size=1.414: the actor trained "
               "with N agents plays M; VALUE is JSON, else a plain string (as train's "
               "--set). Only env_kwargs.* keys, and only changes that keep the actor's "
               "parameter shapes (not e.g. map_size or obs_mode; those are refused)")
    common = Parser(add_help=False)
    common.add_argument("--import", dest="imports", action="append", metavar="MODULE",
                        type=text, help="import MODULE first (repeatable), e.g. one that "
                                        "registers envs with pettingzoo.register")
    from feudal_es import cli  # its docstring is the program's help

    parser = Parser(prog="feudal-es", description=cli.__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog=cli.__doc__.split("\n\n", 1)[1])
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
    several = train.add_argument_group(
        "several processes (jax.distributed; README: Scaling out)",
        "run the same command in every process, each with its --process-id; process 0 "
        "serves the coordinator and alone writes the run directory")
    several.add_argument("--coordinator", metavar="HOST:PORT", type=text,
                         help="process 0's address, e.g. 127.0.0.1:12355")
    several.add_argument("--num-processes", type=at_least(1), metavar="N",
                         help="processes in the run (with --coordinator)")
    several.add_argument("--process-id", type=at_least(0), metavar="I",
                         help="this process, 0 .. N-1 (with --coordinator)")
    train.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", parents=[common], help="compare saved selectors or runs",
                        description="Evaluate selectors with a run's executor, or several "
                                    "runs, on identical episodes: team fitness' mean ± std "
                                    "and 95%% t-interval, its IQM with a stratified bootstrap "
                                    "95%% interval, P(first > each other) with its interval "
                                    "(rliable), and the env's metrics at the end of each "
                                    "episode.")
    ev.add_argument("run", metavar="RUN_OR_CHECKPOINT", type=text, nargs="+",
                    help="a run directory (the executor of its newest checkpoint), one "
                         "checkpoint file (ckpt_*.safetensors, the executor it holds) or a "
                         "zoo entry (zoo:NAME); several: each run with its final selector")
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
    ev.add_argument("--set", action="append", metavar="env_kwargs.KEY=VALUE", type=text,
                    help=env_set.format(what="evaluation"))
    ev.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ev.add_argument("--export", nargs=2, metavar=("FORMAT", "PATH"), type=text,
                    help="also write the per-episode results for other tools; FORMAT: "
                         "marl-eval (the raw-data JSON of instadeepai/marl-eval)")
    ev.add_argument("--force", action="store_true",
                    help="evaluate selector files of another env or actor (a warning)")
    ev.set_defaults(func=cmd_eval)

    en = sub.add_parser("envs", parents=[common], help="list trainable env ids",
                        description="List bundled and PettingZoo-registered env ids.")
    en.add_argument("--json", action="store_true")
    en.set_defaults(func=cmd_envs)

    zo = sub.add_parser("zoo", parents=[common], help="list the trained swarms shipped in zoo/",
                        description="List the zoo: trained swarms to evaluate or render with "
                                    "no training (eval zoo:NAME, render zoo:NAME).")
    zo.add_argument("--json", action="store_true")
    zo.set_defaults(func=cmd_zoo)

    rd = sub.add_parser("render", parents=[common], help="episode GIF of a run",
                        description="Write a deterministic episode of a run's actor as a GIF.")
    rd.add_argument("run", metavar="RUN_OR_CHECKPOINT", type=text,
                    help="a run directory (the actor of its newest checkpoint), one "
                         "checkpoint file (ckpt_*.safetensors) or a zoo entry (zoo:NAME)")
    rd.add_argument("--out", required=True, type=text, help="GIF path")
    rd.add_argument("--selector", metavar="SELECTOR", type=text,
                    help=f"the selector to play: {selector_choices} (default: 'final')")
    rd.add_argument("--env", type=text,
                    help="render on this env id (e.g. the run's own 'module:attr' env, which "
                         "a run directory alone never imports)")
    rd.add_argument("--set", action="append", metavar="env_kwargs.KEY=VALUE", type=text,
                    help=env_set.format(what="episode"))
    rd.add_argument("--seed", type=seed, default=0,
                    help="seed of the episode (default: %(default)s)")
    rd.add_argument("--force", action="store_true",
                    help="use a selector file of another env or actor (a warning)")
    rd.set_defaults(func=cmd_render)

    demo = sub.add_parser("demo", parents=[common], help="CPU-sized training run "
                                                          "(what `make demo` runs)",
                          description="Train a feudal swarm on a bundled env with a compact "
                                      "actor and a small budget, then print the run "
                                      "directory, learning curve and GIF paths.")
    training_args(demo, "demo")
    demo.set_defaults(func=cmd_demo)

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
    pt.add_argument("--recipe", type=text,
                    help="the imitation recipe as a JSON file (fields of "
                         "feudal_es.pretrain.PretrainConfig, e.g. configs/"
                         "coverage_lpac_pretrain.json); the options below override it")
    pt.add_argument("--expert", type=text,
                    help="reference policy name (envs.gif.POLICIES; Coverage: "
                         "lloyd_clairvoyant, lloyd, lloyd_local, random; default: the "
                         "recipe's, else the env's first)")
    pt.add_argument("--option", type=text,
                    help="option held while imitating (name or index, e.g. cover; "
                         "default: the recipe's, else 0)")
    pt.add_argument("--rounds", type=at_least(1),
                    help="data rounds, 1 = behaviour cloning only (default: the recipe's, "
                         "else 3)")
    pt.add_argument("--episodes", type=at_least(1),
                    help="training episodes per data round (default: the recipe's, else 32)")
    pt.add_argument("--steps", type=at_least(1), help="gradient steps per round (default: "
                                                      "the recipe's, else 300)")
    pt.add_argument("--final-steps", type=at_least(0),
                    help="gradient steps of the final fit on all the rounds' data, 0 = none "
                         "(default: the recipe's, else 0)")
    pt.add_argument("--no-progress", action="store_true", help="no progress bar")
    pt.add_argument("--eval-episodes", type=at_least(2), default=16)
    pt.add_argument("--eval-seed", type=seed, default=4242)
    pt.set_defaults(func=cmd_pretrain)
    cv = sub.add_parser("convert", help="rewrite an older (.npz) checkpoint as .safetensors",
                        description="Rewrite a format-1 .npz checkpoint or selector file of an "
                                    "older feudal-es in the current format (read with a "
                                    "guarded reader: stored members only, sizes checked "
                                    "first, no pickle).")
    cv.add_argument("src", type=text, help="the format-1 .npz file")
    cv.add_argument("dst", nargs="?", type=text,
                    help="where to write (default: SRC as .safetensors)")
    cv.set_defaults(func=cmd_convert)
    return parser
