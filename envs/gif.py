"""Write an episode of a bundled env, driven by a reference or random policy, to a GIF.

One command, one GIF per env::

    python -m envs.gif                                   # every bundled env, reference policy
    python -m envs.gif --env Coverage --policy lloyd --out gifs/
    python -m envs.gif --env Discovery --policy random --steps 60 --num-agents 6

Files are named ``<out>/<Env>_<policy>.gif``. The episode is one jitted ``lax.scan``
(policy + step); frames are drawn afterwards on the host with the env's ``render``, and
each carries a header (``<Env> · <policy>``, ``step t / T``, the running team reward and
the env's metrics) and the env's legend (``render_legend``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from envs.base import SwarmEnv
from envs.episode import run_episode, stateless
from envs.registration import BUNDLED_ENVS, load_env_class
from envs.render import write_gif

#: Policies per bundled env, ``name -> "module:function"`` with signature
#: ``policy(key, env, state) -> actions [N, 2]``; the first entry is the reference policy.
POLICIES: dict[str, dict[str, str]] = {
    "Coverage": {
        "lloyd": "envs.policies:lloyd_decentralized",
        "lloyd_clairvoyant": "envs.policies:lloyd_clairvoyant",
        "lloyd_local": "envs.policies:lloyd_decentralized_local",
        "lloyd_own_map": "envs.policies:lloyd_own_map",
        "lloyd_memory": "envs.policies:lloyd_memory",
        "frontier": "envs.policies:frontier_decentralized",
        "explore_then_clairvoyant": "envs.policies:explore_then_clairvoyant",
        "random": "envs.policies:random_policy",
    },
    "Discovery": {
        "greedy": "envs.discovery:greedy_policy",
        "random": "envs.policies:random_policy",
    },
    "Dispersion": {
        "greedy": "envs.dispersion:greedy_policy",
        "random": "envs.policies:random_policy",
    },
    "Rover": {
        "team": "envs.rover:team_policy",
        "nearest": "envs.rover:nearest_poi_policy",
        "random": "envs.policies:random_policy",
    },
    "RoverMERL": {
        "team": "envs.rover_merl:team_policy",
        "nearest": "envs.rover_merl:nearest_poi_policy",
        "random": "envs.policies:random_policy",
    },
}

Policy = Callable[[jax.Array, Any, Any], jax.Array]


def resolve_policy(env_name: str, policy: str) -> tuple[str, Policy]:
    """``(name, callable)`` for ``policy`` ("reference" = the env's first listed policy)."""
    options = POLICIES[env_name]
    if policy == "reference":
        policy = next(iter(options))
    if policy not in options:
        raise ValueError(
            f"unknown policy {policy!r} for {env_name}; choose from {['reference', *options]}"
        )
    module_name, _, attr = options[policy].partition(":")
    return policy, getattr(importlib.import_module(module_name), attr)


#: The header's name for the running sum of the team reward (what team fitness sums).
TEAM_REWARD = "team reward (sum)"


def episode_info(team_reward: Sequence[float] | np.ndarray | None,
                 metrics: Mapping[str, Any] | None = None) -> dict[str, list[float | None]]:
    """Per-frame header values of an episode of ``T`` steps drawn as ``T + 1`` frames (the
    reset state first): the running sum of ``team_reward[T]`` (0 on the reset frame), so a
    viewer sees when the team scores, and each scalar-per-step entry of ``metrics``
    (``{name: [T]}``; ``None`` on the reset frame, which has no step yet; other shapes are
    left out). For :func:`envs.render.decorate_frames`' ``info``."""
    info: dict[str, list[float | None]] = {}
    steps = None
    if team_reward is not None:
        team = np.cumsum(np.asarray(team_reward, np.float64).reshape(-1))
        steps = team.shape[0]
        info[TEAM_REWARD] = [0.0, *map(float, team)]
    for name, values in (metrics or {}).items():
        values = np.asarray(values)
        if values.ndim == 1 and (steps is None or values.shape[0] == steps):
            info[name] = [None, *map(float, values)]
    return info


def episode_record(
    env: SwarmEnv, policy: Policy, key: jax.Array, num_steps: int | None = None
) -> tuple[list[np.ndarray], dict[str, list[float | None]]]:
    """Frames (``uint8 [H, W, 3]``) of one episode, the reset state then every step's, and
    per-frame values for their header (:func:`episode_info`: the running team reward and
    each env metric)."""
    run = jax.jit(lambda k: run_episode(k, env, stateless(policy, env), num_steps=num_steps,
                                        keep_states=True))
    episode = jax.device_get(run(key))
    states = episode.states
    count = jax.tree.leaves(states)[0].shape[0]
    frames = [env.render(jax.tree.map(lambda x, t=t: x[t], states)) for t in range(count)]
    return frames, episode_info(episode.outs.team_reward, episode.outs.metrics)


def episode_frames(
    env: SwarmEnv, policy: Policy, key: jax.Array, num_steps: int | None = None
) -> list[np.ndarray]:
    """Frames (``uint8 [H, W, 3]``) of one episode: the reset state, then every step's."""
    return episode_record(env, policy, key, num_steps)[0]


def write_episode_gif(
    env_name: str,
    policy: str = "reference",
    out: str | Path = "gifs",
    *,
    seed: int = 0,
    num_steps: int | None = None,
    fps: int = 10,
    **env_kwargs: Any,
) -> Path:
    """Roll out ``policy`` on bundled env ``env_name`` and write ``<out>/<Env>_<policy>.gif``
    (titled ``<Env> · <policy>``, with step counter, running team reward, metrics, legend)."""
    if env_name not in BUNDLED_ENVS:
        raise ValueError(f"unknown env {env_name!r}; choose from {list(BUNDLED_ENVS)}")
    env = load_env_class(BUNDLED_ENVS[env_name])(**env_kwargs)
    policy_name, fn = resolve_policy(env_name, policy)
    frames, info = episode_record(env, fn, jax.random.key(seed), num_steps)
    return write_gif(frames, Path(out) / f"{env_name}_{policy_name}.gif", fps=fps,
                     title=f"{env_name} · {policy_name}", legend=env.render_legend, info=info)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.gif", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="all", choices=["all", *BUNDLED_ENVS],
                        help="bundled env, or 'all' (default)")
    parser.add_argument("--policy", default="reference",
                        help="'reference' (default: lloyd / greedy), 'random', or an env-specific"
                             " name (Coverage: lloyd, lloyd_clairvoyant)")
    parser.add_argument("--out", default="gifs", help="output folder (default: gifs/)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="default: the episode length")
    parser.add_argument("--fps", type=int, default=10)
    parser.add_argument("--num-agents", type=int, default=None)
    args = parser.parse_args(argv)

    names = list(BUNDLED_ENVS) if args.env == "all" else [args.env]
    kwargs = {} if args.num_agents is None else {"num_agents": args.num_agents}
    for name in names:
        try:
            path = write_episode_gif(name, args.policy, args.out, seed=args.seed,
                                     num_steps=args.steps, fps=args.fps, **kwargs)
        except (ValueError, TypeError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except OSError as err:  # the GIF could not be written
            print(f"error: cannot write {err.filename or args.out} ({err.strerror or err}); "
                  "choose another --out", file=sys.stderr)
            return 1
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
