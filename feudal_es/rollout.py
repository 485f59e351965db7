"""Team fitness on the pure-JAX path: episodes as scans, the population as vmap x chunks x
shards (the jitted functions built from them live in :mod:`feudal_es.functions`).

Team fitness of a selector ``theta`` = the mean team return (sum of ``team_reward``) over
``episodes`` full episodes with the *current* executor. The whole population is evaluated
in one jitted call (``vmap`` over members x episodes, ``lax.scan`` over the episode), and
every member of a generation sees the same env reset keys (common random numbers). On a
CPU the members run a few at a time (:func:`population_chunk`), and with several devices
the population is split over them (:mod:`feudal_es.sharding`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax

from agents import FeudalActor
from envs.base import SwarmEnv
from envs.episode import Episode, run_episode
from feudal_es.group_fitness import env_groups, group_returns
from feudal_es.theta import set_es_theta

if TYPE_CHECKING:
    from feudal_es.config import TrainerConfig

__all__ = [
    "CPU_POPULATION_CHUNK",
    "episode",
    "make_population_rollouts",
    "members_at_once",
    "population_chunk",
    "population_devices",
]

CPU_POPULATION_CHUNK = 8  # population_chunk=0 on a CPU backend (bench/perf.py measures it)


def episode(env: SwarmEnv, actor: FeudalActor, key: jax.Array, deterministic: bool,
            keep_states: bool = False, record: Callable[[Any], Any] | None = None) -> Episode:
    """One full episode of the feudal actor from ``env.reset(key)`` (options re-chosen every
    ``actor.selector_period`` steps, and when done with ``option_ends``); ``outs`` holds
    each step's env metrics, or ``record(out)`` of each step's ``EnvOut`` when given (the
    episode GIF also keeps the team reward, for its header)."""

    def act(k, obs, state, option, t):
        option, out = actor.step(k, obs, env.comm_graph(state), option, t, deterministic,
                                 done=actor.options_done(env, state))
        return out.env_action, option

    return run_episode(key, env, act, actor.initial_option(env.num_agents),
                       keep_states=keep_states,
                       record=(lambda out: out.metrics) if record is None else record)


def make_population_rollouts(env: SwarmEnv, deterministic: bool, chunk: int = 0,
                             params: str = "selector", groups: bool = False) -> Callable:
    """``rollouts(actor, thetas[P, D], keys[E]) -> (team_return[P, E], metrics[P, E])``.

    Every member ``p`` runs episode ``e`` from ``keys[e]`` (common random numbers) with
    ``set_es_theta(actor, thetas[p], params)`` (``params``: the selector, or the whole
    actor); ``metrics`` are the env's at the last step. ``groups`` (every group trains on
    its own fitness, ``TrainerConfig.others="train"``): the returns are ``[P, E, G]``,
    each of the env's agent groups' summed mean reward
    (:func:`feudal_es.group_fitness.group_returns`), the named team's column the team
    return itself.
    Pure; ``vmap`` x ``vmap`` x ``lax.scan``. ``0 < chunk < P`` evaluates the members
    ``chunk`` at a time instead, ``lax.map(batch_size=chunk)`` (a ``lax.scan`` over
    ``P // chunk`` vmapped chunks, then one vmap over the ``P % chunk`` remainder): same
    program per member, activations bounded by ``chunk``.
    """

    def one(actor: FeudalActor, key: jax.Array):
        if groups:
            return group_one(actor, key)
        ep = episode(env, actor, key, deterministic)
        return ep.team_return, jax.tree.map(lambda m: m[-1], ep.outs)

    def group_one(actor: FeudalActor, key: jax.Array):
        members, team = env_groups(env)
        ep = episode(env, actor, key, deterministic, record=lambda out: (
            out.metrics, group_returns(members, team, out.reward, out.team_reward)))
        metrics, per_step = ep.outs
        ret = per_step.sum(axis=0)
        if team is not None:  # exactly the team return the run reports
            ret = ret.at[team].set(ep.team_return)
        return ret, jax.tree.map(lambda m: m[-1], metrics)

    def rollouts(actor: FeudalActor, thetas: jax.Array, keys: jax.Array):
        def member(theta):
            a = set_es_theta(actor, theta, params)
            return jax.vmap(lambda k: one(a, k))(keys)

        if 0 < chunk < thetas.shape[0]:
            return jax.lax.map(member, thetas, batch_size=chunk)
        return jax.vmap(member)(thetas)

    return rollouts


def population_devices(config: TrainerConfig) -> list:
    """The devices the ES population is sharded over (one device: no sharding)."""
    devices = jax.devices()
    n = config.population_devices or len(devices)
    if n > len(devices):
        raise ValueError(f"TrainerConfig.population_devices={n} but JAX sees only "
                         f"{len(devices)} device(s): {devices}")
    return devices[:n]


def population_chunk(config: TrainerConfig) -> int:
    """Members evaluated together per chunk on the JAX path (0 = the whole population):
    ``config.population_chunk``, or for 0 :data:`CPU_POPULATION_CHUNK` when
    ``jax.default_backend()`` is ``"cpu"`` and full width on an accelerator."""
    if config.population_chunk:
        return config.population_chunk
    return CPU_POPULATION_CHUNK if jax.default_backend() == "cpu" else 0


def members_at_once(config: TrainerConfig, members: int) -> int:
    """How many of ``members`` ES members one device runs together in a generation: the
    population split over :func:`population_devices`, then chunked
    (:func:`population_chunk`); what bounds the fitness episodes' memory."""
    per_device = -(-members // len(population_devices(config)))
    chunk = population_chunk(config)
    return min(chunk, per_device) if chunk else per_device
