"""Our MAPPO against JaxMARL's own baselines, on JaxMARL's env, in the same run.

    python -m bench.vs_jaxmarl               # ~20 min on 2 CPU cores
    python -m bench.vs_jaxmarl --quick       # 0.2M steps a side, a smoke run
    python bench/vs_jaxmarl.py --quick       # the same, run as a file

Both sides train on ``MPE_simple_spread_v3`` (3 agents, 26-step episodes) on this CPU:

1. **IPPO-FF's settings** (64-64 tanh MLP actor and critic, 16 envs x 128 steps, 4 epochs
   x 4 minibatches, lr 2.5e-4 annealed, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01,
   vf 0.5, grad norm 0.5, no value normalisation, MSE value loss): feudal-es's trainer
   (``--mode mappo``, ``jaxmarl/MPE_simple_spread_v3``: one skill, so the selector is
   idle and this is plain MAPPO with a centralized critic) for 1M env steps, one seed and
   two seeds in one program, against JaxMARL's ``ippo_ff_mpe.py`` through
   ``../shared/anchors/jaxmarl/run_anchor.sh`` (when that folder exists).
2. **Our best settings** (``BEST_PROBE`` of the listed ``SWEEP``, rerun with ``--sweep``)
   for 0.4M env steps, seeds 0 and 1 in one program, against JaxMARL's MAPPO-RNN
   (``ALGO=mappo_rnn``) at 0.4M; and the same settings with a recurrent executor
   (``actor.recurrent``, a GRU of MAPPO-RNN's 128 units, trained on 16-step sequences;
   nothing else changed or tuned).
   ``--recurrent-only`` runs just these two, and the recurrent executor with the
   matching recurrent critic (``critic.recurrent``, 128 units; not tuned either).
3. ``--speaker-listener``: ``MPE_simple_speaker_listener_v4`` (a speaker and a listener
   with different spaces) at IPPO-FF's settings and budget (1M env steps), 10 seeds in
   one program per arm: agent groups (one actor each, the default) against one padded
   shared actor (``pad_agents``, SuperSuit-style), and JaxMARL's IPPO-FF on it through
   the anchor (which reports why it cannot run there, if it cannot).

The speed comparison of 1. runs ``--repeats`` times (default 4), interleaved (anchor, one
seed, two seeds, anchor, ...), and each side keeps its fastest repeat (all are printed):
this shared CPU's speed drifts by tens of percent from one minute to the next, and a
one-device program (IPPO-FF's, ours with ``data_parallel=1``) uses the second core for
its larger ops only part of the time (XLA's intra-op threads; at 16 env copies our step
takes about 39 ms when it does and 55 ms when it does not, switching within a run), so
fewer repeats can catch a side only in its slow mode.

Units, as the anchor's README gives them: sps = env steps (one transition of one
vectorised env = 3 agent steps) per second of training, compile excluded (our side: the
time of every round after the first, which compiles, as the rounds' metrics rows record
it; the end of run's plot and checkpoint are in ``train_s_with_final_writes``); returns
are JaxMARL's logging units, the episode sum of ``3 x reward_i`` averaged over agents
(= 3 x our team return).
``final_return``: the training rollouts' finished episodes over the last 10% of the run;
``eval_return_1024eps``: the trained policy, sampling as in training, on 1024 fresh
episodes. One line per side in the anchor's format, then a markdown table and ``--json``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/vs_jaxmarl.py``: import from the repository
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # root, not from bench/

from bench.common import Report, add_json_arg, markdown_table, train_timed

ROOT = Path(__file__).resolve().parents[1]
ANCHOR = ROOT.parent / "shared" / "anchors" / "jaxmarl" / "run_anchor.sh"
ENV = "MPE_simple_spread_v3"
SPEAKER_LISTENER = "MPE_simple_speaker_listener_v4"  # two agents with different spaces

# JaxMARL IPPO-FF's settings (IPPO/config/ippo_ff_mpe.yaml), as feudal-es config fields
IPPO = dict(
    mappo=dict(num_envs=16, num_steps=128, epochs=4, minibatches=4, lr=2.5e-4,
               critic_lr=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95, clip_eps=0.2,
               ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, value_norm=False,
               huber_delta=0.0, value_clip_eps=0.2),
    actor=dict(vec_hidden=[], vec_out=64, gnn_layers=0, embed_hidden=[], embed_dim=64,
               executor_hidden=[], activation="tanh", selector_period=26),
    critic=dict(hidden=[64, 64], layer_norm=False))
# The sweep that chose the best settings (``--sweep``): each probe trains seeds 100 and 101
# (disjoint from the study's reported seeds 0-9) in one program for 0.4M env steps; a probe
# is the IPPO settings with these MAPPO fields (and "actor" / "critic" fields) changed.
# Ranked by the return on 1024 validation episodes (experiments.training.VALIDATION_SEED,
# not the study's held-out key), the training rollouts' final return beside it.
LR2 = {"lr": 2e-3, "critic_lr": 2e-3}
SWEEP: list[tuple[str, dict[str, Any]]] = [
    ("IPPO settings", {}),
    ("lr 1e-3", {"lr": 1e-3, "critic_lr": 1e-3}),
    ("lr 2e-3", LR2),
    ("lr 5e-3", {"lr": 5e-3, "critic_lr": 5e-3}),
    ("lr 2e-3, value norm, Huber", {**LR2, "value_norm": True, "huber_delta": 10.0}),
    ("lr 2e-3, 2 minibatches", {**LR2, "minibatches": 2}),
    ("lr 2e-3, 16 envs x 64 steps", {**LR2, "num_steps": 64}),
    ("lr 2e-3, no entropy bonus", {**LR2, "ent_coef": 0.0}),
    ("lr 3e-3, 32 envs x 32 steps", {"lr": 3e-3, "critic_lr": 3e-3, "num_envs": 32,
                                     "num_steps": 32}),
    ("lr 2e-3, 8 epochs", {**LR2, "epochs": 8}),
    ("lr 2e-3, 16 epochs", {**LR2, "epochs": 16}),
    ("lr 1e-3, 10 epochs, 1 minibatch", {"lr": 1e-3, "critic_lr": 1e-3, "epochs": 10,
                                         "minibatches": 1}),
    ("lr 2e-3, 8 epochs, 2 minibatches", {**LR2, "epochs": 8, "minibatches": 2}),
    ("lr 2e-3, 128 units", {**LR2, "actor": {"vec_out": 128, "embed_dim": 128},
                            "critic": {"hidden": [128, 128]}}),
    ("lr 2e-3, 8 epochs, 128 units", {**LR2, "epochs": 8, "actor": {"vec_out": 128,
                                      "embed_dim": 128}, "critic": {"hidden": [128, 128]}}),
    ("lr 2e-3, 8 epochs, relu", {**LR2, "epochs": 8, "actor": {"activation": "relu"}}),
    ("lr 2e-3, 8 epochs, relu, 128 units", {**LR2, "epochs": 8, "actor": {
        "activation": "relu", "vec_out": 128, "embed_dim": 128}, "critic": {
        "hidden": [128, 128]}}),
    ("lr 2e-3, 8 epochs, 8 envs", {**LR2, "epochs": 8, "num_envs": 8}),
    ("lr 2e-3, 8 epochs, critic layer norm", {**LR2, "epochs": 8,
                                             "critic": {"layer_norm": True}}),
    # the critic told the episode's elapsed time (CriticConfig.time_input): MPE's value
    # depends on the steps left, which its observations do not show (a GRU critic, as
    # MAPPO-RNN's, can count them)
    ("IPPO settings, critic sees time", {"critic": {"time_input": True}}),
    ("lr 2e-3, critic sees time", {**LR2, "critic": {"time_input": True}}),
    ("lr 2e-3, 8 epochs, critic sees time", {**LR2, "epochs": 8,
                                            "critic": {"time_input": True}}),
    ("lr 2e-3, 8 epochs, 128 units, critic sees time", {
        **LR2, "epochs": 8, "actor": {"vec_out": 128, "embed_dim": 128},
        "critic": {"hidden": [128, 128], "time_input": True}}),
    ("lr 2e-3, 16 epochs, critic sees time", {**LR2, "epochs": 16,
                                             "critic": {"time_input": True}}),
]
# Our best settings for 0.4M steps: the sweep's best probe (by validation return);
# configs/mpe.json holds the same settings (tests/test_jaxmarl.py checks it)
BEST_PROBE = "lr 2e-3, 8 epochs, 128 units, critic sees time"


# a recurrent executor's training sequences: 16-step pieces of the 128-step collection
# (the MAPPO paper's data_chunk_length is 10; 16 is the nearest length that divides
# 128), set before any run, not swept
SEQUENCE_LENGTH = 16


def recurrent(settings: dict[str, Any], over: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """``settings`` with a recurrent executor: a GRU of MAPPO-RNN's 128 units, trained on
    :data:`SEQUENCE_LENGTH`-step sequences; ``over``: MAPPO fields (and an "actor" dict)
    changed on top (a :data:`RECURRENT_SWEEP` probe)."""
    over = dict(over or {})
    actor = {**settings["actor"], "recurrent": True, "gru_hidden": 128, **over.pop("actor", {})}
    return {**settings, "mappo": {**settings["mappo"], "sequence_length": SEQUENCE_LENGTH,
                                  **over}, "actor": actor}


# The recurrent executor's own sweep (``--sweep --recurrent``): the best probe's settings
# with the GRU, and these changes; seeds 100-101 and the validation key, as SWEEP
RECURRENT_SWEEP: list[tuple[str, dict[str, Any]]] = [
    ("best probe + GRU", {}),
    ("+ GRU, lr 1e-3", {"lr": 1e-3, "critic_lr": 1e-3}),
    ("+ GRU, 4 epochs", {"epochs": 4}),
    ("+ GRU, 32-step sequences", {"sequence_length": 32}),
    ("+ GRU, a 128-unit layer after it", {"actor": {"executor_hidden": [128]}}),
    ("+ GRU, lr 1e-3, 4 epochs", {"lr": 1e-3, "critic_lr": 1e-3, "epochs": 4}),
]
# the recurrent row's probe: the recurrent sweep's best (bench/results/jaxmarl_recurrent_sweep.json)
RECURRENT_PROBE = "+ GRU, 4 epochs"


def probe(name: str) -> dict[str, Any]:
    """The settings of a SWEEP probe: MAPPO fields, and "actor" / "critic" dicts."""
    over = dict(dict(SWEEP)[name])
    nets = {k: {**IPPO[k], **over.pop(k, {})} for k in ("actor", "critic")}
    return {"mappo": {**IPPO["mappo"], **over}, **nets}


def trainer_config(settings: dict[str, Any], rounds: int, grad_steps: int,
                   seeds: tuple[int, ...], data_parallel: int = 0, env: str = ENV,
                   pad: bool = False) -> Any:
    """``--mode mappo`` on ``jaxmarl/<env>`` (``MPE_simple_spread_v3``) with ``settings``
    (a :func:`probe`'s or :data:`IPPO`), ``rounds`` rounds of ``grad_steps`` steps, the
    lr annealed over them; no checkpoints, plots or GIF in between. ``pad``: agents with
    different spaces behind one padded actor instead of in groups."""
    from feudal_es.config import TrainerConfig

    return TrainerConfig(
        env=f"jaxmarl/{env}", mode="mappo", pad_agents=pad, n_outer=rounds,
        grad_steps_per_outer=grad_steps,
        episodes=2, seed=seeds[0], seeds=seeds if len(seeds) > 1 else (),
        mappo={**settings["mappo"], "anneal_updates": rounds * grad_steps},
        actor=settings["actor"], critic=settings["critic"], checkpoint_every=10**6,
        plot_every=10**6, gif=False, data_parallel=data_parallel)


def ours(settings: dict[str, Any], steps: int, seeds: tuple[int, ...],
         grad_steps: int = 8, eval_root: int = 12345, data_parallel: int = 0,
         env: str = ENV, pad: bool = False) -> dict[str, Any]:
    """Train ``--mode mappo`` for ``steps`` env steps (rounded to whole rounds) with the
    given settings; sps excludes the first round (compilation). The trained policies are
    then evaluated on 1024 episodes from ``key(eval_root)``. ``data_parallel``: the
    trainer's setting (0: one seed's step split over every device; 1: one device)."""
    import jax
    import numpy as np

    from feudal_es import functions
    from feudal_es.rollout import make_population_rollouts
    from feudal_es.theta import selector_theta
    from feudal_es.trainer import ESTrainer

    m = settings["mappo"]
    per_round = grad_steps * m["num_envs"] * m["num_steps"]
    rounds = max(2, -(-steps // per_round))
    cfg = trainer_config(settings, rounds, grad_steps, seeds, data_parallel, env, pad)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-jaxmarl-"))
    try:
        trainer = ESTrainer(cfg, run_dir / "run")  # every seed in one program
        # devices one seed's MAPPO step is split over (many seeds: split over the seeds)
        data = functions.data_devices(trainer.config, trainer.runtime.core) \
            if len(seeds) == 1 else 1
        times = train_timed(trainer)
        compile_s, run_s, train_s = times["compile_s"], times["run_s"], times["round_s"]
        curves = np.array([[h["mappo/team_return"] for h in hist]
                           for hist in trainer.histories])
        k = max(1, rounds // 10)
        sample = jax.jit(make_population_rollouts(trainer.runtime.core, False))
        keys = jax.random.split(jax.random.key(eval_root), 1024)
        actors = [s.learner.actor for s in trainer.seed_states()]
        evals = [float(np.asarray(sample(a, selector_theta(a)[None], keys)[0]).mean())
                 for a in actors]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    timed = (rounds - 1) * per_round * len(seeds)
    agents = trainer.runtime.core.num_agents
    return dict(algo="feudal_es_mappo", env=env, eval_per_seed=[
                    round(agents * e, 3) for e in evals], num_envs=m["num_envs"], seeds=len(seeds),
                data_devices=data, steps=rounds * per_round, compile_s=round(compile_s, 2),
                train_s=round(train_s, 2), train_s_with_final_writes=round(run_s, 2),
                sps=round(timed / train_s, 1),
                first_return=round(float(agents * curves[:, :k].mean()), 3),
                final_return=round(float(agents * curves[:, -k:].mean()), 3),
                eval_return_1024eps=round(agents * float(np.mean(evals)), 3),
                curve_every_10pct=[round(float(x), 2) for x in
                                   agents * curves.mean(axis=0)[:: max(1, rounds // 10)]])


def anchor(algo: str, steps: int, env_name: str = ENV) -> dict[str, Any] | None:
    """JaxMARL's own baseline through the anchor's script (None when it is absent)."""
    if not ANCHOR.exists():
        return None
    env = {**os.environ, "ALGO": algo, "TOTAL_TIMESTEPS": f"{steps:.0f}", "ROLLOUT": "0",
           "ENV_NAME": env_name}
    env.pop("XLA_FLAGS", None)
    env.pop("JAX_NUM_CPU_DEVICES", None)
    proc = subprocess.run(["bash", str(ANCHOR)], env=env, capture_output=True, text=True,
                          timeout=3600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("jaxmarl_")), None)
    if proc.returncode != 0 or line is None:
        return {"algo": f"jaxmarl_{algo}", "error": proc.stderr[-2000:]}
    head, *pairs = line.split()
    out: dict[str, Any] = {"algo": head}
    for key, _, value in (p.partition("=") for p in pairs):
        out[key] = float(value) if re.fullmatch(r"-?[\d.]+(e[-+]?\d+)?", value) else value
    return out


def fastest(runs: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The repeat with the highest sps, with every repeat's sps beside it (None or a
    failed run when no repeat succeeded)."""
    good = [r for r in runs if r is not None and "error" not in r]
    if not good:
        return runs[-1]
    return {**max(good, key=lambda r: r["sps"]), "sps_repeats": [r["sps"] for r in good]}


def line(r: dict[str, Any]) -> str:
    """One side in the anchor's format."""
    keys = ("env", "num_envs", "seeds", "data_devices", "steps", "compile_s", "train_s", "sps",
            "sps_repeats", "first_return", "final_return", "eval_return_1024eps")
    value = lambda v: ",".join(map(str, v)) if isinstance(v, list) else v
    return " ".join([r["algo"], *(f"{k}={value(r[k])}" for k in keys if k in r)])


def main(argv: list[str] | None = None) -> int:
    from feudal_es.devices import use_cpu_cores

    use_cpu_cores()  # one JAX CPU device per core, as the trainer's CLI runs
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="0.2M env steps a side")
    p.add_argument("--no-anchor", action="store_true", help="our side only")
    p.add_argument("--repeats", type=int, default=4,
                   help="interleaved repeats of the IPPO-FF speed comparison (fastest kept)")
    p.add_argument("--sweep", action="store_true",
                   help="run the SWEEP that chose the best settings (~20 min) and stop")
    p.add_argument("--speaker-listener", action="store_true",
                   help="only section 3: groups vs padding on the speaker-listener")
    p.add_argument("--recurrent-only", action="store_true",
                   help="only the recurrent executor and MAPPO-RNN at 0.4M steps; with "
                        "--sweep, the recurrent executor's sweep (RECURRENT_SWEEP)")
    p.add_argument("--probe", action="append", default=None, choices=[n for n, _ in SWEEP],
                   metavar="NAME", help="with --sweep: run only this probe (repeatable)")
    add_json_arg(p)
    args = p.parse_args(argv)
    report = Report("vs_jaxmarl", args, argv)
    if args.sweep:
        from experiments.training import SWEEP_SEEDS, VALIDATION_SEED

        seeds = SWEEP_SEEDS[:2]
        if args.recurrent_only:
            results = {name: ours(recurrent(probe(BEST_PROBE), over), 400_000, seeds,
                                  eval_root=VALIDATION_SEED)
                       for name, over in RECURRENT_SWEEP}
        else:
            names = args.probe or [name for name, _ in SWEEP]
            results = {name: ours(probe(name), 400_000, seeds, eval_root=VALIDATION_SEED)
                       for name in names}
        ranked = sorted(results, key=lambda n: -results[n]["eval_return_1024eps"])
        print(markdown_table([f"probe (0.4M env steps, seeds {seeds[0]}-{seeds[-1]})",
                              "validation return (1024 eps)", "final return (training)",
                              "env-steps/s"], "lrrr",
                             [(n, results[n]["eval_return_1024eps"],
                               results[n]["final_return"], results[n]["sps"])
                              for n in ranked]))
        print(f"best: {ranked[0]}")
        report.write({"sweep": results, "best": ranked[0], "seeds": list(seeds),
                      "validation_seed": VALIDATION_SEED})
        return 0
    ippo_steps, best_steps = (200_000, 200_000) if args.quick else (1_000_000, 400_000)
    if args.speaker_listener:
        return speaker_listener(report, ippo_steps, not args.no_anchor)
    # the speed comparison, repeated and interleaved (anchor, ours, ours x2 seeds, ...):
    # this shared CPU's speed drifts by tens of percent over minutes, so each side keeps
    # its fastest repeat; returns are the same in every repeat (fixed seeds)
    repeats: dict[str, list[dict[str, Any] | None]] = {}
    for _ in range(0 if args.recurrent_only else args.repeats):
        if not args.no_anchor:
            repeats.setdefault("jaxmarl_ippo_ff", []).append(anchor("ippo_ff", ippo_steps))
        repeats.setdefault("ours_ippo_settings", []).append(ours(IPPO, ippo_steps, (0,)))
        repeats.setdefault("ours_ippo_settings_1_device", []).append(
            ours(IPPO, ippo_steps, (0,), data_parallel=1))
        repeats.setdefault("ours_ippo_settings_2_seeds", []).append(
            ours(IPPO, ippo_steps, (0, 1)))
    rows = {name: fastest(runs) for name, runs in repeats.items()}
    if not args.recurrent_only:
        rows["ours_best_settings_2_seeds"] = ours(probe(BEST_PROBE), best_steps, (0, 1))
    rows["ours_best_settings_gru_2_seeds"] = ours(
        recurrent(probe(BEST_PROBE), dict(RECURRENT_SWEEP)[RECURRENT_PROBE]), best_steps,
        (0, 1))
    if args.recurrent_only:  # the same, with the matching recurrent critic (not swept)
        gru = recurrent(probe(BEST_PROBE), dict(RECURRENT_SWEEP)[RECURRENT_PROBE])
        rows["ours_best_settings_gru_critic_2_seeds"] = ours(
            {**gru, "critic": {**gru["critic"], "recurrent": True, "gru_hidden": 128}},
            best_steps, (0, 1))
    if not args.no_anchor:
        rows["jaxmarl_mappo_rnn"] = anchor("mappo_rnn", best_steps)
    for r in rows.values():
        if r is not None:
            print(line(r) if "error" not in r else f"{r['algo']} failed: {r['error']}")
    print()
    table = [(name, r.get("seeds", 1), r["steps"], r["sps"], r["final_return"],
              r.get("eval_return_1024eps", "")) for name, r in rows.items()
             if r is not None and "error" not in r]
    print(markdown_table(["run", "seeds", "env steps", "env-steps/s", "final return",
                          "eval return (1024 eps)"], "lrrrrr", table))
    report.write({"runs": rows, "best": {"probe": BEST_PROBE, **probe(BEST_PROBE)}},
                 {"sps": "env steps per second (compile excluded)",
                  "final_return": "episode sum of 3 x reward_i, mean over agents"})
    return 0


def speaker_listener(report: Report, steps: int, with_anchor: bool) -> int:
    """Section 3 of the module docstring; prints the rows and a table, writes the JSON."""
    from experiments.stats import fmt_ci, summarize

    seeds = tuple(range(10))
    rows: dict[str, Any] = {
        "ours_groups": ours(IPPO, steps, seeds, env=SPEAKER_LISTENER),
        "ours_padded": ours(IPPO, steps, seeds, env=SPEAKER_LISTENER, pad=True)}
    if with_anchor:
        rows["jaxmarl_ippo_ff"] = anchor("ippo_ff", steps, SPEAKER_LISTENER)
    table = []
    for name, r in rows.items():
        if r is None:
            continue
        if "error" in r:
            lines = r["error"].strip().splitlines()
            why = next((x for x in reversed(lines) if "Error" in x), lines[-1])
            print(f"{r['algo']} failed: {why}")
            continue
        print(line(r))
        ci = summarize(r["eval_per_seed"]) if len(r.get("eval_per_seed", [])) > 1 else None
        table.append((name, r["steps"], r["sps"], r["final_return"],
                      fmt_ci(ci["mean"], ci["ci95"]) if ci else ""))
    print()
    print(markdown_table(["run (10 seeds, IPPO-FF's settings)", "env steps", "env-steps/s",
                          "final return", "held-out return, 1024 eps (95% CI over seeds)"],
                         "lrrrr", table))
    report.write({"speaker_listener": rows},
                 {"returns": "episode sum of num_agents x mean reward (JaxMARL's units)"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
