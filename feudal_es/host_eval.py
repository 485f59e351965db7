"""Team fitness on the host path: :class:`HostEvaluator` plays the episodes of an ES
population on any PettingZoo ``ParallelEnv``, with the collector's jitted policy
(:func:`feudal_es.host_collect.policy`) and the conversions of
:mod:`feudal_es.pettingzoo_host`, failing only the member whose env misbehaves (raises,
returns a malformed output, or runs past its time budget).
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

from feudal_es.host_collect import policy
from feudal_es.pettingzoo_host import (
    EnvTimeout,
    HostEnvSpec,
    adjacency,
    check_reset,
    check_step,
    deadline,
    env_actions,
    stack_agents,
    team_reward,
)


class HostEvaluator:
    """Team fitness on any PettingZoo ParallelEnv: a loop reusing ``episodes`` instances.

    Episode ``e`` of every member is reset with ``seed + e`` and plays with key
    ``fold_in(key, e)`` (common random numbers). Fault isolation: an exception in a
    member's episode (the env raising, a malformed ``reset``/``step`` output, the episode
    running past ``timeout`` seconds) fails that member only: its returns are NaN (ES
    ranks it last), the failure is recorded in ``failures`` and the env instance is
    replaced by a fresh one.
    """

    def __init__(self, make: Callable[..., Any], spec: HostEnvSpec, episodes: int,
                 deterministic: bool, max_steps: int, timeout: float = 0.0,
                 params: str = "selector"):
        self.make, self.params = make, params
        self.envs = [make() for _ in range(episodes)]
        self.spec = spec
        self.max_steps = max_steps
        self.timeout = float(timeout)
        self.failures: list[dict[str, Any]] = []  # of the last returns() call
        self._policy = policy(bool(deterministic))

    def episode(self, actor: Any, env: Any, seed: int, key: jax.Array) -> float:
        """One episode's team return (the sum of :func:`team_reward` over its steps)."""
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
        option = jax.tree.map(lambda x: x[None], actor.initial_option(spec.num_agents))
        graph = getattr(env, "comm_graph", None)
        total, t = 0.0, 0
        while env.agents and t < self.max_steps:
            stacked, alive = stack_agents(spec, obs)
            adj = adjacency((lambda: call(graph)) if callable(graph) else None,
                            spec.num_agents, alive)
            key, sub = jax.random.split(key)
            option, out, _ = self._policy(actor, None, sub[None],
                                        jax.tree.map(lambda x: x[None], stacked), adj[None],
                                        None, option, np.full(1, t, np.int32))
            acts = env_actions(spec, np.asarray(out.env_action[0]),
                               [a for a in spec.agents if a in obs])
            live = list(env.agents)
            obs, rew, _, _, infos = check_step(env, acts, call(env.step, acts), spec, live)
            total += team_reward(infos, rew)
            t += 1
        return total

    def returns(self, actor: Any, thetas: np.ndarray, seed: int, key: jax.Array,
                episodes: int | None = None) -> np.ndarray:
        """``[P, E]`` team returns of ``thetas[P, D]`` put into ``actor`` (its selector, or
        the whole actor: ``params``); a failed member's row is NaN (see ``failures``)."""
        from feudal_es.theta import set_es_theta

        count = len(self.envs) if episodes is None else int(episodes)
        while len(self.envs) < count:
            self.envs.append(self.make())
        out = np.zeros((len(thetas), count), np.float64)
        self.failures = []
        for p, theta in enumerate(thetas):
            a = set_es_theta(actor, jnp.asarray(theta), self.params)
            for e in range(count):
                try:
                    out[p, e] = self.episode(a, self.envs[e], seed + e,
                                             jax.random.fold_in(key, e))
                except Exception as err:  # the env's fault: this member fails, others run
                    out[p] = np.nan
                    frame = traceback.extract_tb(err.__traceback__)[-1]
                    self.failures.append({
                        "member": p, "episode": e, "env_seed": seed + e,
                        "error": f"{type(err).__name__}: {err}",
                        "where": f"{frame.filename}:{frame.lineno} in {frame.name}"})
                    broken, self.envs[e] = self.envs[e], self.make()
                    with contextlib.suppress(Exception), deadline(self.timeout, "close()"):
                        broken.close()  # a hung env may hang in close() too: bounded
                    break
        return out
