"""``feudal-es eval``, ``envs``, ``render``, ``pretrain`` and ``convert``: the commands
that use a run or an env rather than train one (train: :mod:`feudal_es.cli_train`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from feudal_es.cli_train import list_keys, train_config

# ---------------------------------------------------------------------------------------
# eval
# ---------------------------------------------------------------------------------------
ENV_KWARGS = "env_kwargs."


def env_overrides(sets: list[str] | None) -> dict[str, Any] | None:
    """``--set env_kwargs.KEY=VALUE`` of eval / render as ``{KEY: VALUE}`` (VALUE read as
    train's --set reads it); any other key is refused: only the env can change at
    evaluation (the actor and the rest of the config are the checkpoint's). None: none
    given."""
    from feudal_es.config import parse_assignment

    out: dict[str, Any] = {}
    for text in sets or ():
        key, value = parse_assignment(text)
        name = key[len(ENV_KWARGS):] if key.startswith(ENV_KWARGS) else ""
        if not name:
            raise ValueError(f"--set {key}: only env_kwargs.* can change at evaluation "
                             "(e.g. --set env_kwargs.num_agents=8); the rest of the config "
                             "is the checkpoint's")
        out[name] = value
    return out or None


EXPORTS = ("marl-eval",)  # what `eval --export FORMAT PATH` writes


def cmd_eval(args: argparse.Namespace) -> int:
    from feudal_es.evaluate import compare_runs, compare_selectors, load_trainer, robust_stats

    if args.export:  # refused before any work
        if args.export[0] not in EXPORTS:
            raise ValueError(f"--export {args.export[0]!r}: unknown format; one of {EXPORTS}")
        from feudal_es.atomic import check_writable

        check_writable(args.export[1])
    overrides = env_overrides(args.set)
    if len(args.run) > 1:
        if args.selector:
            raise ValueError("--selector compares the selectors of one run; with several runs "
                             "each plays its final selector")
        result = compare_runs(args.run, env=args.env, env_kwargs=overrides,
                              episodes=args.episodes, seed=args.seed)
        trainer, source = None, f"{len(args.run)} runs, each its executor and final selector"
    else:
        trainer, ckpt = load_trainer(args.run[0], env=args.env, env_kwargs=overrides)
        result = compare_selectors(trainer, ckpt, args.selector, args.episodes, args.seed,
                                   args.force)
        source = f"executor of {ckpt}"
    robust_stats(result)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "metrics"}, indent=2))
    else:
        _print_eval(result, args.seed, source, trainer is None)
    if args.export:  # after the results are shown: a failed write loses nothing printed
        from feudal_es.marl_eval import marl_eval_data, write_marl_eval

        rows = [{"name": r["selector"], "step_count": r.get("env_steps", result.get(
            "env_steps", 0)), "returns": r["returns"], "metrics": r["per_episode"]}
            for r in result["selectors"]]
        path = write_marl_eval(args.export[1], marl_eval_data(result["env"], rows))
        print(f"wrote {path} ({args.export[0]})", file=sys.stderr)  # stdout: the results
    return 0


def _print_eval(result: dict[str, Any], seed: int, source: str, runs: bool) -> None:
    """The table of ``feudal-es eval``: a row per selector (or run), then P(A > B)."""
    rows, metric_names, episodes = result["selectors"], result["metrics"], result["episodes"]
    better = result["metric_better"]
    what = "runs" if runs else ("selector" if len(rows) == 1 else "selectors")
    print(f"{result['env']}: {len(rows)} {what} on the same {episodes} episodes "
          f"(seed {seed}), {source}; team fitness: higher is better")
    if "env_kwargs" in result:
        print(f"env_kwargs: {json.dumps(result['env_kwargs'])} (the run's, with "
              f"{json.dumps(result['env_kwargs_overrides'])} changed)")
    robust = "robust_stats" not in result
    header = ["run" if runs else "selector", "team fitness (mean ± std)",
              "95% CI", *(["IQM [95% bootstrap CI]"] if robust else []),
              *[f"{m} ({better[m]} is better)" if m in better else m for m in metric_names]]
    table = [[r["selector"], f"{r['fitness_mean']:.4f} ± {r['fitness_std']:.4f}",
              f"[{r['ci95'][0]:.4f}, {r['ci95'][1]:.4f}]",
              *([f"{r['iqm'][0]:.4f} [{r['iqm'][1]:.4f}, {r['iqm'][2]:.4f}]"] if robust
                else []),
              *[f"{r[m]:.4f}" for m in metric_names]] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=True)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))
    print(line(header))
    print(line(["-" * w for w in widths]))
    for t in table:
        print(line(t))
    for imp in result.get("improvement", ()):
        p, lo, hi = imp["p"]
        print(f"P({imp['a']} > {imp['b']}) = {p:.3f} [{lo:.3f}, {hi:.3f}] (team fitness, "
              "per episode; 0.5: no difference)")
    if not robust:
        print(f"(no IQM or P(A > B): {result['robust_stats']})")


# ---------------------------------------------------------------------------------------
# envs / render
# ---------------------------------------------------------------------------------------
def cmd_envs(args: argparse.Namespace) -> int:
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
        print("JaxMARL (pure-JAX path; flat observations, agents with different spaces in "
              "groups):")
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


def cmd_zoo(args: argparse.Namespace) -> int:
    from feudal_es import zoo

    found = zoo.entries()
    if args.json:
        print(json.dumps([{k: str(v) if k == "path" else v for k, v in e.items()}
                          for e in found], indent=2))
        return 0
    if not found:
        print(f"the zoo is empty ({zoo.ZOO} has no entries)")
        return 0
    print(f"trained swarms in {zoo.ZOO} (evaluate: feudal-es eval zoo:NAME; render: "
          "feudal-es render zoo:NAME --out NAME.gif):")
    for e in found:
        s = e["score"]
        print(f"  {zoo.PREFIX}{e['name']:<12} {e['env']}, {e['env_steps']:,} env steps; "
              f"team fitness {s['mean']:.3f} over {s['episodes']} episodes (seed "
              f"{s['seed']})\n      {e['description']}\n      trained by: {e['command']}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from feudal_es.atomic import check_writable
    from feudal_es.evaluate import load_trainer, selector_theta
    from feudal_es.write_errors import output_failure

    try:
        check_writable(args.out)  # before any work
    except OSError as e:
        raise ValueError(output_failure(e, args.out)) from None
    trainer, ckpt = load_trainer(args.run, env=args.env, env_kwargs=env_overrides(args.set))
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


def cmd_pretrain(args: argparse.Namespace) -> int:
    from feudal_es.pretrain import PretrainConfig, curve_paths, pretrain
    from feudal_es.resolve import resolve_env

    if args.list_keys:
        return list_keys(args)
    cfg = train_config(args)
    recipe = PretrainConfig.load(args.recipe) if args.recipe else PretrainConfig()
    env = resolve_env(cfg.env, cfg.env_kwargs)
    names = list(env.core.skill_names) if env.kind == "jax" else []
    option = recipe.option
    if recipe.schedule and (args.option is not None or args.expert is not None):
        raise ValueError(f"{args.recipe} imitates one expert per option on a schedule "
                         f"(experts {list(recipe.experts)}, schedule "
                         f"{list(recipe.schedule)}); --expert and --option name a single "
                         "one: leave them out, or use a recipe without experts")
    if args.option is None:
        pass
    elif args.option in names:
        option = names.index(args.option)
    elif args.option.isdigit():
        option = int(args.option)
    else:
        raise ValueError(f"--option {args.option!r}: name an option of the env "
                         f"({', '.join(names) or 'none'}) or give its index")
    given = {k: v for k, v in (("expert", args.expert), ("rounds", args.rounds),
                               ("episodes", args.episodes), ("steps_per_round", args.steps),
                               ("final_steps", args.final_steps))
             if v is not None}
    pcfg = dataclasses.replace(recipe, option=option, seed=cfg.seed, **given)
    try:
        out, rows, result = pretrain(cfg, pcfg, args.out, args.eval_episodes,
                                     args.eval_seed, log=lambda msg: print(msg, flush=True),
                                     progress=not args.no_progress)
    except OSError as e:  # the output cannot be written (refused before any work)
        from feudal_es.write_errors import output_failure

        raise ValueError(output_failure(e, args.out or e.filename)) from None
    print(f"loss {result.losses[0]:.4g} -> {result.losses[-1]:.4g} in {len(result.losses)} "
          f"steps, validation loss {result.val_loss:.4g}; on {args.eval_episodes} held-out "
          f"episodes (seed {args.eval_seed}):")
    width = max(20, *map(len, rows))
    for who, row in rows.items():
        print(f"  {who:{width}s} " + ", ".join(f"{k} {v:.4g}" for k, v in row.items()))
    print(f"validation curve: {', '.join(str(p) for p in curve_paths(out) if p.exists())}")
    print(f"pretrained actor: {out} (start a run from it with --set init_from={out})")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
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
