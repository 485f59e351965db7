"""Team fitness on the host path: :class:`HostEvaluator` plays the episodes of an ES
population on any PettingZoo ``ParallelEnv``, with the collector's jitted policy
(:func:`feudal_es.host_collect.policy`) and the conversions of
:mod:`feudal_es.pettingzoo_host`, failing only the member whose env misbehaves (raises,
returns a malformed output, or runs past its time budget).

Episodes stream through one env instance (each is reset with its own seed), so memory
does not grow with the number of episodes; an episode that reaches ``max_steps`` without
ending is cut there, and that (like a non-finite env output) is reported once through
:class:`~feudal_es.pettingzoo_host.EnvNotices`.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from feudal_es.group_fitness import host_group_rewards, spec_groups
from feudal_es.host_collect import policy
from feudal_es.pettingzoo_host import (
    EnvNotices,
    EnvTimeout,
    HostEnvSpec,
    adjacency,
    check_reset,
    check_step,
    deadline,
    env_actions,
    env_name,
    stack_agents,
    team_reward,
)


class HostEvaluator:
    """Team fitness on any PettingZoo ParallelEnv: one env instance, reused.

    Episode ``e`` of every member is reset with ``seed + e`` and plays with key
    ``fold_in(key, e)`` (common random numbers); ``episodes`` is the default count. The
    episodes stream through one instance (built on first use), so ``P x E`` episodes
    hold one env, not ``E``: the results equal fresh instances' for an env whose
    ``reset(seed=...)`` fully re-seeds it. An episode is cut after ``max_steps`` steps.
    Fault isolation: an exception in a member's episode (the env raising, a malformed
    ``reset``/``step`` output, the episode running past ``timeout`` seconds) fails that
    member only: its returns are NaN (ES ranks it last), the failure is recorded in
    ``failures`` and the env instance is replaced by a fresh one. ``notices`` (shared
    with the run's collector, or the evaluator's own) reports, once, an episode cut at
    ``max_steps`` and a non-finite env output.
    """

    def __init__(self, make: Callable[..., Any], spec: HostEnvSpec, episodes: int,
                 deterministic: bool, max_steps: int, timeout: float = 0.0,
                 params: str = "selector", notices: EnvNotices | None = None):
        self.make, self.params = make, params
        self.episodes = int(episodes)
        self.env: Any = None  # the one instance episodes stream through (built lazily)
        self.spec = spec
        self.max_steps = max_steps
        self.timeout = float(timeout)
        self.notices = notices if notices is not None else EnvNotices()
        self.failures: list[dict[str, Any]] = []  # of the last returns() call
        self._policy = policy(bool(deterministic))

    def episode(self, actor: Any, env: Any, seed: int, key: jax.Array,
                groups: bool = False) -> Any:
        """One episode's team return (the sum of :func:`team_reward` over its steps);
        ``groups``: every group's instead, ``[G]`` (``others="train"``: the sums of
        :func:`~feudal_es.group_fitness.host_group_rewards`, the team's the team return)."""
        spec, budget, used = self.spec, self.timeout, 0.0
        message = (f"an evaluation episode of {type(env).__name__} spent more than "
                   f"{budget:g} s in env calls (episode_timeout)")

        def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
            """An env call under the episode's remaining time budget (the policy's JAX
            calls, compilation included, are not timed and never interrupted)."""
            nonlocal used
            if not budget:
                return fn(*args, **kwargs)
            if used >= budget:  # also where no SIGALRM can interrupt (threads)
                raise EnvTimeout(message)
            t0 = time.monotonic()
            try:
                with deadline(budget - used, message):
                    return fn(*args, **kwargs)
            finally:
                used += time.monotonic() - t0

        obs = check_reset(env, call(env.reset, seed=seed), spec)
        notices = self.notices
        notices.check(env_name(env), 0, seed, "evaluation", obs)
        option = jax.tree.map(lambda x: x[None], actor.initial_option(spec.num_agents))
        graph = getattr(env, "comm_graph", None)
        total, t = 0.0, 0
        per_group = np.zeros(len(spec.agent_groups), np.float64) if groups else None
        while env.agents and t < self.max_steps:
            stacked, alive = stack_agents(spec, obs)
            adj = adjacency((lambda: call(graph)) if callable(graph) else None,
                            spec.num_agents, alive)
            key, sub = jax.random.split(key)
            option, out, _, _ = self._policy(actor, None, sub[None],
                                           jax.tree.map(lambda x: x[None], stacked),
                                           adj[None], None, option, np.full(1, t, np.int32))
            acts = env_actions(spec, np.asarray(out.env_action[0]),
                               [a for a in spec.agents if a in obs])
            live = list(env.agents)
            obs, rew, _, _, infos = check_step(env, acts, call(env.step, acts), spec, live)
            team = team_reward(infos, rew, spec.team)
            total += team
            if per_group is not None:
                per_group += host_group_rewards(spec, rew, team)
            t += 1
            notices.check(env_name(env), t, seed, "evaluation", obs, rew, infos)
        if env.agents:
            notices.time_limit(env_name(env), self.max_steps, "an evaluation")
        if per_group is not None:
            _, index = spec_groups(spec)
            if index is not None:
                per_group[index] = total  # exactly the team return
            return per_group
        return total

    def returns(self, actor: Any, thetas: np.ndarray, seed: int, key: jax.Array,
                episodes: int | None = None, groups: bool = False) -> np.ndarray:
        """``[P, E]`` team returns of ``thetas[P, D]`` put into ``actor`` (its selector, or
        the whole actor: ``params``); a failed member's row is NaN (see ``failures``).
        ``groups``: ``[P, E, G]``, every group's return (:meth:`episode`)."""
        from feudal_es.theta import set_es_theta

        count = self.episodes if episodes is None else int(episodes)
        shape = (len(thetas), count) + ((len(self.spec.agent_groups),) if groups else ())
        out = np.zeros(shape, np.float64)
        self.failures = []
        for p, theta in enumerate(thetas):
            a = set_es_theta(actor, jnp.asarray(theta), self.params)
            for e in range(count):
                try:
                    if self.env is None:
                        self.env = self.make()
                    out[p, e] = self.episode(a, self.env, seed + e,
                                             jax.random.fold_in(key, e), groups)
                except Exception as err:  # the env's fault: this member fails, others run
                    out[p] = np.nan
                    frame = traceback.extract_tb(err.__traceback__)[-1]
                    self.failures.append({
                        "member": p, "episode": e, "env_seed": seed + e,
                        "error": f"{type(err).__name__}: {err}",
                        "where": f"{frame.filename}:{frame.lineno} in {frame.name}"})
                    broken, self.env = self.env, None  # the next episode builds a fresh one
                    with contextlib.suppress(Exception), deadline(self.timeout, "close()"):
                        if broken is not None:
                            broken.close()  # a hung env may hang in close() too: bounded
                    break
        return out
