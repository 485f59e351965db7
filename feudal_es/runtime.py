"""The two paths a run can take, behind one interface: :class:`JaxRuntime` (a functional
``SwarmEnv``: everything jitted, the population vmapped and sharded) and
:class:`HostRuntime` (any PettingZoo ``ParallelEnv``: Python loops, optionally Ray).

A runtime builds the networks and the MAPPO train state for its env, takes gradient
steps, plays fitness episodes for a population of selectors, runs one ES generation and
renders an episode. The trainer loop calls these and never asks which path it is on.

Before anything is allocated, a runtime refuses a config whose arrays cannot fit in the
memory available (:mod:`feudal_es.budget`: the ES population, its fitness episodes,
MAPPO's env copies and batch, the networks), and :meth:`returns` an evaluation too large
for it (episodes x selectors), with one message naming the field to change.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from agents import CentralCritic, FeudalActor, make_actor
from envs.base import has_option_goals
from envs.gif import episode_info
from feudal_es import budget, es, group_fitness, mappo, opponents
from feudal_es.config import TrainerConfig
from feudal_es.functions import jax_functions
from feudal_es.migration import migration_env_steps
from feudal_es.pettingzoo_host import EnvNotices, team_reward
from feudal_es.resolve import ResolvedEnv
from feudal_es.rollout import members_at_once, population_chunk

if TYPE_CHECKING:
    from feudal_es.host_collect import HostCollector

__all__ = ["HostRuntime", "JaxRuntime", "make_runtime"]

_keep_finite = eqx.filter_jit(mappo.keep_finite)


def _initial(actor: FeudalActor, config: TrainerConfig) -> FeudalActor:
    """The fresh ``actor``, or the pretrained one ``config.init_from`` names (its
    structure checked against ``actor``'s)."""
    if not config.init_from:
        return actor
    from feudal_es.pretrain import load_pretrained

    return load_pretrained(config.init_from, actor)


def _make_actor(key: jax.Array, env: Any, config: TrainerConfig) -> Any:
    """A fresh actor for ``env``, or the pretrained one (``config.init_from``); agents in
    groups: the team and what the other groups play (``config.team`` /
    ``config.others``; :mod:`feudal_es.opponents`)."""
    actor = make_actor(key, env, config.actor, config.team, opponents.make_others(
        config.others))
    return opponents.with_others(_initial(actor, config), config.others)


def _sizes(config: TrainerConfig, obs_space: Any, action_space: Any, num_skills: int,
           global_state_size: int, num_agents: int) -> budget.NetworkSizes:
    return budget.network_sizes(obs_space, action_space, num_skills, global_state_size,
                                num_agents, config.actor, config.critic)


class JaxRuntime:
    """A functional env on the pure-JAX path: jitted train step, population rollouts and
    ES generation from :func:`feudal_es.functions.jax_functions` (shared by trainers).
    ``seeds``: how many seeds one program trains (the memory check scales with it)."""

    kind = "jax"

    def __init__(self, config: TrainerConfig, env: ResolvedEnv, seeds: int = 1):
        self.config = config
        self.core = core = env.core
        if config.actor.option_ends and not has_option_goals(core):
            raise ValueError(f"actor.option_ends=true needs options that can end, but "
                             f"{type(core).__name__}'s options ({', '.join(core.skill_names)}"
                             ") have no goal (its skill_done is never true); leave "
                             "actor.option_ends false for this env")
        self.device = jax.local_devices()[0]
        self.footprint = budget.jax_footprint(core, config)
        sizes = _sizes(config, core.observation_space, core.action_space,
                       len(core.skill_names), core.global_state_size, core.num_agents)
        budget.check(budget.run_terms(
            config, self.footprint, sizes,
            members_at_once(config, config.es.num_candidates), seeds), self.device,
            host=False)
        self.fns = jax_functions(config, self.core)
        # a round's guarded steps in one call (JaxFunctions.round_steps), or None: the
        # round calls guarded_step once per step
        self.round_steps: Any = self.fns.round_steps
        self.num_agents = self.core.num_agents
        self.skill_names = tuple(self.core.skill_names)
        self.failures: list[dict] = []  # never any: a JAX env cannot fail one member

    def init_train_state(self, key: jax.Array) -> mappo.TrainState:
        """A fresh actor and critic and ``mappo.num_envs`` reset env copies."""
        k_actor, k_critic, k_state = jax.random.split(key, 3)
        actor = _make_actor(k_actor, self.core, self.config)
        critic = CentralCritic.from_env(k_critic, self.core, self.config.critic)
        return self.fns.init_state(k_state, self.core, actor, critic, self.config.mappo)

    def train_step(self, ts: mappo.TrainState) -> tuple[mappo.TrainState, dict]:
        """One MAPPO train step (collection + update)."""
        return self.fns.train_step(ts)

    def guarded_step(self, ts: mappo.TrainState) -> tuple[mappo.TrainState, dict, jax.Array]:
        """:meth:`train_step` with a non-finite update undone (``mappo.keep_finite``):
        ``(ts, metrics, skipped)``, one jitted program with the fused update."""
        return self.fns.guarded_step(ts)

    def settle(self, ts: mappo.TrainState) -> mappo.TrainState:
        """``ts`` as the host reads it, after a round's steps (a data-parallel step keeps
        the learner on its devices between steps: ``mappo.data_parallel_step``)."""
        return self.fns.settle(ts)

    def returns(self, actor: FeudalActor, thetas: jax.Array, key: jax.Array, episodes: int
                ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Team returns ``[P, E]`` and final env metrics ``{name: [P, E]}`` of
        ``thetas[P, D]`` on the ``E`` episodes of ``split(key, E)`` (the same for all);
        :class:`~feudal_es.budget.MemoryBudgetError` first if they cannot fit."""
        thetas = jnp.atleast_2d(jnp.asarray(thetas, jnp.float32))
        self.check_evaluation(thetas.shape[0], episodes)
        ret, metrics = self.fns.rollouts(actor, thetas, jax.random.split(key, episodes))
        return np.asarray(ret), {k: np.asarray(v) for k, v in metrics.items()}

    def check_evaluation(self, members: int, episodes: int, at_once: int | None = None
                         ) -> None:
        """:class:`~feudal_es.budget.MemoryBudgetError` if ``members`` selectors'
        ``episodes`` evaluation episodes cannot fit (``at_once``: members run together;
        default the population chunk)."""
        chunk = population_chunk(self.config)
        at_once = min(members, chunk or members) if at_once is None else at_once
        budget.check([budget.evaluation_term(
            members, int(episodes), self.footprint.episode + 8, at_once, 4)],
            self.device, host=False)  # + 8: each episode's key

    def generation(self, key: jax.Array, state: es.ESState, actor: FeudalActor,
                   eval_key: jax.Array) -> tuple[es.ESState, dict]:
        """One ES generation (ask, population fitness, tell) under one jit; the episodes
        come from ``key`` (``eval_key`` is the host path's)."""
        del eval_key
        return self.fns.generation(key, state, actor)

    def episode_record(self, actor: FeudalActor, key: jax.Array, seed: int
                       ) -> tuple[list[np.ndarray], dict[str, list[float | None]]]:
        """Frames of one deterministic episode from ``key`` (``seed``: the host path's) and
        their header values (:func:`envs.gif.episode_info`: running team reward, metrics)."""
        del seed
        ep = jax.device_get(self.fns.gif_episode(actor, key))
        count = jax.tree.leaves(ep.states)[0].shape[0]
        frames = [self.core.render(jax.tree.map(lambda s, i=i: s[i], ep.states))
                  for i in range(count)]
        return frames, episode_info(ep.outs["team_reward"], ep.outs["metrics"])

    def round_env_steps(self, mappo_steps: int, es_candidates: int) -> int:
        """Swarm steps a round simulates: MAPPO samples, ES fitness episodes (members x
        episodes x horizon) and the current selector's evaluation episodes."""
        horizon = self.core.max_steps * self.config.episodes
        steps = mappo_steps + (es_candidates + 1) * horizon
        if es_candidates and self.config.plan.migrates:
            steps += migration_env_steps(self.config.episodes, self.core.max_steps)
        return steps

    def close(self) -> None:
        """Nothing to release."""


class HostRuntime:
    """A PettingZoo ``ParallelEnv`` on the host path: :class:`~feudal_es.host.HostCollector`
    for MAPPO (its env copies stepped by ``config.host_workers`` worker processes, or Ray
    actors with ``backend="ray"``, when that is > 0:
    :class:`~feudal_es.host_workers.WorkerPool`), :class:`~feudal_es.host.HostEvaluator`
    for fitness (on Ray actors with ``backend="ray"``). A broken env is refused when the
    runtime is built, before any compute: one checked ``reset`` and ``step``
    (:func:`feudal_es.host.probe_env`). Episodes are cut at ``config.max_episode_steps``
    in collection and evaluation; ``notices`` reports that, and a non-finite env output,
    once per run."""

    kind = "host"
    round_steps = None  # a Python collection: every step is its own call

    def __init__(self, config: TrainerConfig, env: ResolvedEnv, seeds: int = 1):
        from feudal_es import host

        self.config = config
        if config.plan.migrates:
            raise ValueError(f"mode {config.mode} migrates the learner into whole-actor ES "
                             f"inside one jitted generation: it needs a bundled JAX env; "
                             f"{config.env} runs on the host path (use mode merl or es)")
        if config.actor.option_ends:
            raise ValueError("actor.option_ends=true needs an env whose options can end "
                             "(a bundled JAX env with skill_done, e.g. feudal_es/Rover-v0); "
                             f"{config.env} runs on the host path, where options are held "
                             "for actor.selector_period steps: leave actor.option_ends false")
        if config.data_parallel > 1:
            raise ValueError(f"data_parallel={config.data_parallel} splits a JAX env's copies "
                             f"over devices; {config.env} runs on the host path (a Python "
                             "env): set host_workers=N to step its copies in N processes")
        self.make = env.make
        # an env factory that worker processes cannot get: refused before anything is built
        if config.host_workers and config.plan.trains_executor and config.backend != "ray":
            from feudal_es.host_workers import check_picklable

            check_picklable(env.make, config.env)
        probe = env.make()
        group_fitness.check_config(config)  # others="train": each group on its own fitness
        self.spec = spec = host.HostEnvSpec(probe, num_skills=config.num_skills,
                                            groups=config.groups).with_team(
            config.team, group_fitness.trains_groups(config))
        self.device = jax.local_devices()[0]
        sizes = _sizes(config, spec.observation_space, spec.action_space, spec.num_skills,
                       spec.global_state_size, spec.num_agents)
        budget.check(budget.run_terms(config, budget.host_footprint(spec, config), sizes, 1,
                                      seeds, host=True), self.device)
        self.notices = EnvNotices(config.env)
        host.probe_env(probe, self.spec, seed=config.seed)
        self.num_agents = self.spec.num_agents
        self.skill_names = self.spec.skill_names
        self._probe = probe  # the collector's first copy, built lazily with the state
        self.collector: HostCollector | None = None
        self.update = host.host_update(config.mappo, mappo.uses_fused_update(
            config.mappo, self.spec.observation_space, config.actor))
        make_evaluator = functools.partial(
            host.HostEvaluator, env.make, self.spec, config.episodes,
            config.deterministic_eval, config.max_episode_steps, config.episode_timeout,
            config.es_params, self.notices)
        self.evaluator = make_evaluator()  # one member at a time (the current selector)
        self.population_evaluator: Any = self.evaluator  # populations (P > 1)
        if config.backend == "ray":
            from feudal_es.ray_backend import RayEvaluator

            self.population_evaluator = RayEvaluator(
                make_evaluator, episodes=config.episodes, env_id=config.env,
                num_workers=config.ray_workers, notices=self.notices)
        self.failures: list[dict] = []  # failed episodes since the last take_failures()

    def init_train_state(self, key: jax.Array) -> mappo.TrainState:
        """A fresh actor and critic for the env's spaces, and the collector's env copies
        (``mappo.num_envs``, the probed instance first; started at the first step when
        ``host_workers`` step them)."""
        k_actor, k_critic, k_state = jax.random.split(key, 3)
        spec, cfg = self.spec, self.config
        if cfg.critic.time_input:
            raise ValueError(f"critic.time_input needs a fixed episode horizon; env "
                             f"{cfg.env!r} runs on the host path, whose episodes end when "
                             "the env says (set critic.time_input false)")
        actor = _make_actor(k_actor, spec, cfg)
        critic = CentralCritic(k_critic, spec.global_state_size, spec.num_agents,
                               spec.num_skills, cfg.critic)
        if self.collector is not None:  # built again (a template for a checkpoint)
            self.collector.close()
            self.collector = None
        if not (cfg.host_workers and cfg.plan.trains_executor):  # else at the first step
            self._build_collector()
        return mappo.init_learner(k_state, actor, critic, cfg.mappo)

    def _build_collector(self) -> HostCollector:
        """The collector and its env copies: in this process (the probed instance first),
        or over ``host_workers`` worker processes, started when the first MAPPO step
        needs them (so evaluating or rendering a run starts none)."""
        from feudal_es import host

        cfg = self.config
        copies: Any
        if cfg.host_workers and cfg.plan.trains_executor:  # no MAPPO: nothing to step
            from feudal_es.host_workers import WorkerPool

            copies = WorkerPool(self.make, self.spec, cfg.mappo.num_envs, cfg.host_workers,
                                cfg.mappo.reward, cfg.episode_timeout, cfg.max_episode_steps,
                                cfg.env, self.notices,
                                backend="ray" if cfg.backend == "ray" else "process")
        else:
            copies = [self._probe] + [self.make() for _ in range(cfg.mappo.num_envs - 1)]
        self.collector = host.HostCollector(copies, self.spec, cfg.mappo, seed=cfg.seed,
                                            step_timeout=cfg.episode_timeout,
                                            max_episode_steps=cfg.max_episode_steps,
                                            notices=self.notices)
        return self.collector

    def train_step(self, ts: mappo.TrainState) -> tuple[mappo.TrainState, dict]:
        """Collect ``num_steps`` from every env copy, then the MAPPO update."""
        collector = self.collector or self._build_collector()
        ts, batch, stats = collector.collect(ts)
        ts, metrics = self.update(ts, batch)
        return ts, {**metrics, **stats, "env_steps": ts.env_steps}

    def guarded_step(self, ts: mappo.TrainState) -> tuple[mappo.TrainState, dict, jax.Array]:
        """:meth:`train_step` with a non-finite update undone: ``(ts, metrics, skipped)``.

        The jitted guard is given the update's arrays only: the rollout statistics are
        Python floats, which a jitted function takes as static arguments, so passing
        them would compile it again for every new value (every round)."""
        numbers: dict = {}

        def step(t: mappo.TrainState) -> tuple[mappo.TrainState, dict]:
            t, metrics = self.train_step(t)
            numbers.update(metrics)
            return t, {k: v for k, v in metrics.items() if eqx.is_array(v)}

        ts, metrics, skipped = mappo.guarded(step, _keep_finite)(ts)
        return ts, {k: metrics.get(k, v) for k, v in numbers.items()}, skipped

    def settle(self, ts: mappo.TrainState) -> mappo.TrainState:
        """``ts`` as is: the host path's learner never leaves this process's device."""
        return ts

    def returns(self, actor: FeudalActor, thetas: jax.Array, key: jax.Array, episodes: int,
                groups: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Team returns ``[P, E]`` (a failed member's row NaN); episode ``e`` is reset with
        ``seed + e``, ``seed`` drawn from ``key``, for every member. No env metrics.
        ``groups``: ``[P, E, G]``, every group's (``others="train"``).
        :class:`~feudal_es.budget.MemoryBudgetError` first if the results cannot fit
        (the episodes themselves stream through one env instance)."""
        thetas = np.atleast_2d(np.asarray(thetas, np.float32))
        budget.check([budget.evaluation_term(len(thetas), int(episodes), 0, 1, 8)],
                     self.device)
        seed = int(jax.random.randint(key, (), 0, 2**30))
        ev = self.population_evaluator if len(thetas) > 1 else self.evaluator
        out = ev.returns(actor, thetas, seed, key, episodes=episodes,
                         **({"groups": True} if groups else {}))
        phase = "population" if len(thetas) > 1 else "selector_eval"
        self.failures += [{**f, "phase": phase} for f in ev.failures]
        return out, {}

    def generation(self, key: jax.Array, state: es.ESState, actor: FeudalActor,
                   eval_key: jax.Array) -> tuple[es.ESState, dict]:
        """One ES generation exactly as :func:`feudal_es.es.es_step` makes it (same ask,
        tell and per-member fitness as ``eval_fn`` on ``eval_key``'s episodes). Failed
        members rank last; if every member fails, ``FloatingPointError`` names the first
        failure, before anything is written. ``others="train"``: every group's fitness,
        each group's coordinates told with its own (:mod:`feudal_es.group_fitness`)."""
        groups = group_fitness.trains_groups(self.config)
        told = dict(coord_group=group_fitness.coord_groups(actor, self.config.es_params),
                    report=actor.names.index(self.config.team)) if groups else {}

        def fitness(population: jax.Array) -> np.ndarray:
            before = len(self.failures)
            ret, _ = self.returns(actor, population, eval_key, self.config.episodes, groups)
            fit = ret.mean(axis=1).astype(np.float32)
            if not np.isfinite(fit[:, told["report"]] if groups else fit).any():
                first = self.failures[before] if len(self.failures) > before else None
                cause = (f"; first failure (member {first['member']}, episode "
                         f"{first['episode']}): {first['error']} at {first['where']}"
                         if first else "")
                if self.notices.source:  # the env's own NaN/inf, named
                    cause += f"; earlier, {self.notices.source}"
                raise FloatingPointError(
                    f"ES generation: all {len(fit)} candidates failed or returned "
                    f"non-finite fitness{cause}; refusing to update the parameters")
            return fit

        return es.host_generation(key, state, fitness, self.config.es, **told)

    def episode_record(self, actor: FeudalActor, key: jax.Array, seed: int
                       ) -> tuple[list[np.ndarray], dict[str, list[float | None]]]:
        """Frames of one deterministic episode of a fresh ``render_mode="rgb_array"``
        instance, reset with ``seed``, and their header values (the running team reward,
        :func:`~feudal_es.pettingzoo_host.team_reward` of each step)."""
        try:
            env = self.make(render_mode="rgb_array")
        except TypeError as e:
            raise ValueError(f"env {self.config.env!r} cannot render (no render_mode "
                             f"'rgb_array': {e})") from None
        frames: list[np.ndarray] = []
        rewards: list[float] = []
        team = self.spec.team

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
                try:  # a malformed step is the evaluator's to report (check_step)
                    rewards.append(team_reward(out[4], out[1], team))
                except (TypeError, AttributeError, IndexError, KeyError, ValueError):
                    rewards.append(float("nan"))
                return out

        self.evaluator.episode(actor, Recording(), int(seed), key)
        if not frames or frames[0] is None or frames[0].ndim != 3:
            raise ValueError(f"env {self.config.env!r} did not return rgb frames from "
                             "render()")
        return frames, episode_info(rewards if len(rewards) == len(frames) - 1 else None)

    def round_env_steps(self, mappo_steps: int, es_candidates: int) -> int:
        """Unknown on the host path (episodes end when the env says): 0."""
        del mappo_steps, es_candidates
        return 0

    def close(self) -> None:
        """Stop the host workers and the Ray workers, if any (the in-process env copies
        are closed too)."""
        if self.collector is not None:
            self.collector.close()
        close = getattr(self.population_evaluator, "close", None)
        if self.population_evaluator is not self.evaluator and callable(close):
            close()


def make_runtime(config: TrainerConfig, env: ResolvedEnv, seeds: int = 1
                 ) -> JaxRuntime | HostRuntime:
    """The runtime of ``env``'s path (``seeds``: seeds trained in one program, for the
    memory check); refuses, before allocating anything, a config that cannot fit."""
    cls = JaxRuntime if env.kind == "jax" else HostRuntime
    return cls(config, env, seeds)

