"""Build the zoo (``zoo/<name>/``, :mod:`feudal_es.zoo`): one seed of each entry's recipe
trained at its budget, the final checkpoint copied into the entry's folder, and its score
measured the way ``feudal-es eval zoo:<name> --selector final`` measures it.

    python -m experiments.zoo                 # every entry (~20 min on 2 CPU cores)
    python -m experiments.zoo rover dispersion

The recipes are the studies' shared settings (``configs/``) and arms, so a zoo entry is
one training run of what the README's Results report, at seed 0 (a study's seeds are 0-9;
the zoo is a sample to look at, not a result).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.arms import arm_config, steps_per_round

SEED = 0  # the training seed of every entry
EPISODES = 64  # the score's episodes ...
EVAL_SEED = 12345  # ... from split(key(EVAL_SEED), EPISODES): `feudal-es eval`'s default seed


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What one entry trains: ``config(runs)`` (a TrainerConfig dict; ``runs``: where it
    may write what it starts from), for ``budget`` env steps of episodes ``max_steps``
    long; ``needs``: a module it cannot train without."""

    description: str
    config: Callable[[Path], dict[str, Any]]
    max_steps: int
    budget: int
    study: str  # the study whose recipe this is
    needs: str = ""


def _rover(runs: Path) -> dict[str, Any]:
    from experiments import rover

    return arm_config(rover.base_config(4), "merl")


def _rover_merl(runs: Path) -> dict[str, Any]:
    from experiments import rover_merl

    return rover_merl.config_of(rover_merl.METHOD)


def _swarm(env: str, kwargs: dict[str, Any]) -> Callable[[Path], dict[str, Any]]:
    def config(runs: Path) -> dict[str, Any]:
        from experiments import swarm

        return arm_config(swarm.base_config(env, kwargs), "merl")

    return config


def _coverage(runs: Path) -> dict[str, Any]:
    """The Coverage study's start (behaviour cloning + DAgger of clairvoyant Lloyd,
    holding "cover") and its MERL arm; the checkpoint does not need the BC file."""
    from experiments import coverage

    bc = coverage.pretrain(1.0, runs.parent / coverage.IMITATORS)
    return arm_config(coverage.base_config(str(bc)), "merl")


def _mpe(runs: Path) -> dict[str, Any]:
    from experiments import mpe

    return arm_config(mpe.base_config(), "mappo")


RECIPES: dict[str, Recipe] = {
    "rover": Recipe("Rover-v0: 8 rovers, 4 POIs, coupling 4; MERL (ES selector, MAPPO "
                    "executor)", _rover, 50, 1_000_000, "rover"),
    "rover_merl": Recipe("RoverMERL-v0 (MERL's rover domain): 8 rovers, 4 POIs, coupling 4; "
                         "the feudal method the rover_merl sweep chose", _rover_merl, 50,
                         2_000_000, "rover_merl"),
    "discovery": Recipe("Discovery-v0: 4 agents find 4 targets, coupling 2; MERL",
                        _swarm("feudal_es/Discovery-v0",
                               dict(num_agents=4, num_targets=4, coupling=2)),
                        40, 256_000, "discovery"),
    "dispersion": Recipe("Dispersion-v0: 4 robots spread over 4 goals; MERL",
                         _swarm("feudal_es/Dispersion-v0", dict(num_agents=4)), 40,
                         256_000, "dispersion"),
    "coverage": Recipe("Coverage-v0: 4 robots cover a density map (LPAC's task); MERL "
                       "fine-tuning of an executor cloned from clairvoyant Lloyd", _coverage,
                       40, 100_000, "coverage"),
    "mpe": Recipe("JaxMARL MPE simple_spread (3 agents); MAPPO (the executor alone)", _mpe,
                  26, 400_000, "mpe", needs="jaxmarl"),
}


def tolerance(mean: float) -> float:
    """How far another x86-64 CPU may move a recorded score: float differences can turn a
    deterministic policy's action, and so whole episodes; 0.02 plus 2% of the score."""
    return round(0.02 + 0.02 * abs(mean), 4)


def score(path: str | Path, episodes: int = EPISODES, seed: int = EVAL_SEED) -> float:
    """The team fitness' mean of the final selector with its executor, as ``feudal-es eval
    PATH --selector final`` prints it."""
    from feudal_es.evaluate import FINAL, compare_selectors, load_trainer

    trainer, ckpt = load_trainer(path)
    result = compare_selectors(trainer, ckpt, [FINAL], episodes, seed)
    return float(result["selectors"][0]["fitness_mean"])


def build(name: str, zoo: Path, runs: Path) -> dict[str, Any]:
    """Train entry ``name`` and write ``zoo/<name>/`` (replacing it only once the new one
    is complete)."""
    import feudal_es
    from feudal_es.checkpoint import CheckpointManager
    from feudal_es.config import TrainerConfig
    from feudal_es.zoo import ENTRY

    recipe = RECIPES[name]
    runs.mkdir(parents=True, exist_ok=True)
    base = recipe.config(runs)
    size = steps_per_round(TrainerConfig.from_dict({**base, "seed": SEED}), recipe.max_steps)
    rounds = math.ceil(recipe.budget / size)
    cfg = TrainerConfig.from_dict({**base, "seed": SEED, "n_outer": rounds, "gif": False,
                                   "plot_every": 10**6, "checkpoint_every": 10**6})
    run_dir = runs / name
    shutil.rmtree(run_dir, ignore_errors=True)
    feudal_es.train(cfg, run_dir)
    ckpt = CheckpointManager(run_dir).latest()
    zoo.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=zoo))
    staging.chmod(0o755)
    shutil.copy2(ckpt, staging / ckpt.name)
    mean = score(staging)
    entry = {"name": name, "env": cfg.env, "description": recipe.description,
             "command": f"python -m experiments.zoo {name}",
             "recipe": f"the {recipe.study} study's settings, seed {SEED}",
             "mode": cfg.mode, "env_steps": rounds * size, "rounds": rounds,
             "score": {"what": "team fitness, mean over held-out episodes (feudal-es eval "
                               f"zoo:{name} --selector final --episodes {EPISODES} --seed "
                               f"{EVAL_SEED})",
                       "mean": round(mean, 6), "episodes": EPISODES, "seed": EVAL_SEED,
                       "tolerance": tolerance(mean)},
             "checkpoint": ckpt.name}
    (staging / ENTRY).write_text(json.dumps(entry, indent=2) + "\n")
    final = zoo / name
    old = zoo / f".{name}-old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    print(f"[zoo] {name}: {entry['env_steps']:,} env steps, score {mean:.3f}", flush=True)
    return entry


def main(argv: list[str] | None = None) -> None:
    from feudal_es.devices import use_cpu_cores
    from feudal_es.zoo import ZOO

    use_cpu_cores()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"entries to build (default: all of {', '.join(RECIPES)})")
    p.add_argument("--zoo", type=Path, default=ZOO)
    p.add_argument("--runs", type=Path, default=Path("runs/zoo"))
    a = p.parse_args(argv)
    unknown = [n for n in a.names if n not in RECIPES]
    if unknown:
        p.error(f"no recipe {unknown}; the zoo's: {', '.join(RECIPES)}")
    for name in a.names or list(RECIPES):
        needs = RECIPES[name].needs
        if needs:
            import importlib.util

            if importlib.util.find_spec(needs) is None:
                print(f"[zoo] {name}: skipped ({needs} is not installed)", flush=True)
                continue
        build(name, a.zoo, a.runs)


if __name__ == "__main__":
    main()
