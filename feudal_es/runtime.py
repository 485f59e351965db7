"""The two paths a run can take, behind one interface: :class:`JaxRuntime` (a functional
``SwarmEnv``: everything jitted, the population vmapped and sharded) and
:class:`HostRuntime` (any PettingZoo ``ParallelEnv``: Python loops, optionally Ray).

A runtime builds the networks and the MAPPO train state for its env, takes gradient
steps, plays fitness episodes for a population of selectors, runs one ES generation and
renders an episode. The trainer loop calls these and never asks which path it is on.
"""

from __future__ import annotations

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from agents import CentralCritic, FeudalActor
from feudal_es import es, mappo
from feudal_es.config import TrainerConfig
from feudal_es.functions import jax_functions
from feudal_es.resolve import ResolvedEnv

__all__ = ["HostRuntime", "JaxRuntime", "make_runtime"]

_keep_finite = eqx.filter_jit(mappo.keep_finite)


def _initial(actor: FeudalActor, config: TrainerConfig) -> FeudalActor:
    """The fresh ``actor``, or the pretrained one ``config.init_from`` names (its
    structure checked against ``actor``'s)."""
    if not config.init_from:
        return actor
    from feudal_es.pretrain import load_pretrained

    return load_pretrained(config.init_from, actor)


class JaxRuntime:
    """A functional env on the pure-JAX path: jitted train step, population rollouts and
    ES generation from :func:`feudal_es.functions.jax_functions` (shared by trainers)."""

    kind = "jax"

    def __init__(self, config: TrainerConfig, env: ResolvedEnv):
        self.config = config
        self.core = env.core
        self.fns = jax_functions(config, self.core)
        self.num_agents = self.core.num_agents
        self.skill_names = tuple(self.core.skill_names)
        self.failures: list[dict] = []  # never any: a JAX env cannot fail one member

    def init_train_state(self, key: jax.Array) -> mappo.TrainState:
        """A fresh actor and critic and ``mappo.num_envs`` reset env copies."""
        k_actor, k_critic, k_state = jax.random.split(key, 3)
        actor = _initial(FeudalActor.from_env(k_actor, self.core, self.config.actor),
                         self.config)
        critic = CentralCritic.from_env(k_critic, self.core, self.config.critic)
        return self.fns.init_state(k_state, self.core, actor, critic, self.config.mappo)

    def train_step(self, ts: mappo.TrainState) -> tuple[mappo.TrainState, dict]:
        """One MAPPO train step (collection + update)."""
        return self.fns.train_step(ts)

    def guarded_step(self, ts: mappo.TrainState) -> tuple[mappo.TrainState, dict, jax.Array]:
        """:meth:`train_step` with a non-finite update undone (``mappo.keep_finite``):
        ``(ts, metrics, skipped)``, one jitted program with the fused update."""
        return self.fns.guarded_step(ts)

    def returns(self, actor: FeudalActor, thetas: jax.Array, key: jax.Array, episodes: int
                ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Team returns ``[P, E]`` and final env metrics ``{name: [P, E]}`` of
        ``thetas[P, D]`` on the ``E`` episodes of ``split(key, E)`` (the same for all)."""
        thetas = jnp.atleast_2d(jnp.asarray(thetas, jnp.float32))
        ret, metrics = self.fns.rollouts(actor, thetas, jax.random.split(key, episodes))
        return np.asarray(ret), {k: np.asarray(v) for k, v in metrics.items()}

    def generation(self, key: jax.Array, state: es.ESState, actor: FeudalActor,
                   eval_key: jax.Array) -> tuple[es.ESState, dict]:
        """One ES generation (ask, population fitness, tell) under one jit; the episodes
        come from ``key`` (``eval_key`` is the host path's)."""
        del eval_key
        return self.fns.generation(key, state, actor)

    def episode_frames(self, actor: FeudalActor, key: jax.Array, seed: int
                       ) -> list[np.ndarray]:
        """Frames of one deterministic episode from ``key`` (``seed``: the host path's)."""
        del seed
        states = jax.device_get(self.fns.gif_episode(actor, key).states)
        count = jax.tree.leaves(states)[0].shape[0]
        return [self.core.render(jax.tree.map(lambda s, i=i: s[i], states))
                for i in range(count)]

    def round_env_steps(self, mappo_steps: int, es_candidates: int) -> int:
        """Swarm steps a round simulates: MAPPO samples, ES fitness episodes (members x
        episodes x horizon) and the current selector's evaluation episodes."""
        horizon = self.core.max_steps * self.config.episodes
        return mappo_steps + (es_candidates + 1) * horizon

    def close(self) -> None:
        """Nothing to release."""


class HostRuntime:
    """A PettingZoo ``ParallelEnv`` on the host path: :class:`~feudal_es.host.HostCollector`
    for MAPPO, :class:`~feudal_es.host.HostEvaluator` for fitness (on Ray actors with
    ``backend="ray"``). A broken env is refused when the runtime is built, before any
    compute: one checked ``reset`` and ``step`` (:func:`feudal_es.host.probe_env`)."""

    kind = "host"

    def __init__(self, config: TrainerConfig, env: ResolvedEnv):
        from feudal_es import host

        self.config = config
        self.make = env.make
        probe = env.make()
        self.spec = host.HostEnvSpec(probe, num_skills=config.num_skills)
        host.probe_env(probe, self.spec, seed=config.seed)
        self.num_agents = self.spec.num_agents
        self.skill_names = self.spec.skill_names
        self._probe = probe  # the collector's first copy, built lazily with the state
        self.collector: host.HostCollector | None = None
        self.update = host.host_update(config.mappo, mappo.uses_fused_update(
            config.mappo, self.spec.observation_space, config.actor))
        make_evaluator = functools.partial(
            host.HostEvaluator, env.make, self.spec, config.episodes,
            config.deterministic_eval, config.max_episode_steps, config.episode_timeout,
            config.es_params)
        self.evaluator = make_evaluator()  # one member at a time (the current selector)
        self.population_evaluator: Any = self.evaluator  # populations (P > 1)
        if config.backend == "ray":
            from feudal_es.ray_backend import RayEvaluator

            self.population_evaluator = RayEvaluator(
                make_evaluator, episodes=config.episodes, env_id=config.env,
                num_workers=config.ray_workers)
        self.failures: list[dict] = []  # failed episodes since the last take_failures()

    def init_train_state(self, key: jax.Array) -> mappo.TrainState:
        """A fresh actor and critic for the env's spaces, and the collector's env copies
        (``mappo.num_envs``, the probed instance first)."""
        from feudal_es import host

        k_actor, k_critic, k_state = jax.random.split(key, 3)
        spec, cfg = self.spec, self.config
        if cfg.critic.time_input:
            raise ValueError(f"critic.time_input needs a fixed episode horizon; env "
                             f"{cfg.env!r} runs on the host path, whose episodes end when "
                             "the env says (set critic.time_input false)")
        actor = _initial(FeudalActor(k_actor, spec.observation_space, spec.action_space,
                                     spec.num_skills, cfg.actor), cfg)
        critic = CentralCritic(k_critic, spec.global_state_size, spec.num_agents,
                               spec.num_skills, cfg.critic)
        copies = [self._probe] + [self.make() for _ in range(cfg.mappo.num_envs - 1)]
        self.collector = host.HostCollector(copies, spec, cfg.mappo, seed=cfg.seed,
                                            step_timeout=cfg.episode_timeout)
        return mappo.init_learner(k_state, actor, critic, cfg.mappo)

    def train_step(self, ts: mappo.TrainState) -> tuple[mappo.TrainState, dict]:
        """Collect ``num_steps`` from every env copy, then the MAPPO update."""
        ts, batch, stats = self.collector.collect(ts)
        ts, metrics = self.update(ts, batch)
        return ts, {**metrics, **stats, "env_steps": ts.env_steps}

    def guarded_step(self, ts: mappo.TrainState) -> tuple[mappo.TrainState, dict, jax.Array]:
        """:meth:`train_step` with a non-finite update undone: ``(ts, metrics, skipped)``."""
        return mappo.guarded(self.train_step, _keep_finite)(ts)

    def returns(self, actor: FeudalActor, thetas: jax.Array, key: jax.Array, episodes: int
                ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Team returns ``[P, E]`` (a failed member's row NaN); episode ``e`` is reset with
        ``seed + e``, ``seed`` drawn from ``key``, for every member. No env metrics."""
        thetas = np.atleast_2d(np.asarray(thetas, np.float32))
        seed = int(jax.random.randint(key, (), 0, 2**30))
        ev = self.population_evaluator if len(thetas) > 1 else self.evaluator
        out = ev.returns(actor, thetas, seed, key, episodes=episodes)
        phase = "population" if len(thetas) > 1 else "selector_eval"
        self.failures += [{**f, "phase": phase} for f in ev.failures]
        return out, {}

    def generation(self, key: jax.Array, state: es.ESState, actor: FeudalActor,
                   eval_key: jax.Array) -> tuple[es.ESState, dict]:
        """One ES generation exactly as :func:`feudal_es.es.es_step` makes it (same ask,
        tell and per-member fitness as ``eval_fn`` on ``eval_key``'s episodes). Failed
        members rank last; if every member fails, ``FloatingPointError`` names the first
        failure, before anything is written."""

        def fitness(population: jax.Array) -> np.ndarray:
            before = len(self.failures)
            ret, _ = self.returns(actor, population, eval_key, self.config.episodes)
            fit = ret.mean(axis=1).astype(np.float32)
            if not np.isfinite(fit).any():
                first = self.failures[before] if len(self.failures) > before else None
                cause = (f"; first failure (member {first['member']}, episode "
                         f"{first['episode']}): {first['error']} at {first['where']}"
                         if first else "")
                raise FloatingPointError(
                    f"ES generation: all {fit.size} candidates failed or returned "
                    f"non-finite fitness{cause}; refusing to update the parameters")
            return fit

        return es.host_generation(key, state, fitness, self.config.es)

    def episode_frames(self, actor: FeudalActor, key: jax.Array, seed: int
                       ) -> list[np.ndarray]:
        """Frames of one deterministic episode of a fresh ``render_mode="rgb_array"``
        instance, reset with ``seed``."""
        try:
            env = self.make(render_mode="rgb_array")
        except TypeError as e:
            raise ValueError(f"env {self.config.env!r} cannot render (no render_mode "
                             f"'rgb_array': {e})") from None
        frames: list[np.ndarray] = []

        class Recording:
            """The env, with a frame rendered after ``reset`` and every ``step``."""

            def __getattr__(self, name: str) -> Any:
                return getattr(env, name)

            def reset(self, **kw: Any) -> Any:
                out = env.reset(**kw)
                frames.append(np.asarray(env.render()))
                return out

            def step(self, actions: Any) -> Any:
                out = env.step(actions)
                frames.append(np.asarray(env.render()))
                return out

        self.evaluator.episode(actor, Recording(), int(seed), key)
        if not frames or frames[0] is None or frames[0].ndim != 3:
            raise ValueError(f"env {self.config.env!r} did not return rgb frames from "
                             "render()")
        return frames

    def round_env_steps(self, mappo_steps: int, es_candidates: int) -> int:
        """Unknown on the host path (episodes end when the env says): 0."""
        del mappo_steps, es_candidates
        return 0

    def close(self) -> None:
        """Stop the Ray workers, if any."""
        close = getattr(self.population_evaluator, "close", None)
        if self.population_evaluator is not self.evaluator and callable(close):
            close()


def make_runtime(config: TrainerConfig, env: ResolvedEnv) -> JaxRuntime | HostRuntime:
    """The runtime of ``env``'s path."""
    return JaxRuntime(config, env) if env.kind == "jax" else HostRuntime(config, env)

