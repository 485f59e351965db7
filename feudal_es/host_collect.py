"""MAPPO on the host path: the jitted :func:`policy`, the update (:func:`host_update`) and
:class:`HostCollector`, which collects MAPPO's batches from PettingZoo env copies.

Per step, the observations of all copies are stacked into one array pytree (agents padded
to ``possible_agents`` with an ``alive`` mask, as in MAPPO's death masking), sent to the
device once, and one jitted call returns every copy's actions. The result is the same
:class:`feudal_es.mappo.Batch` the pure-JAX path builds, so :func:`feudal_es.mappo.update`
trains on it unchanged. Env outputs are checked and env calls bounded in time by
:mod:`feudal_es.pettingzoo_host`; an episode that reaches ``max_episode_steps`` is cut
(a truncation: the copy is reset) and that, like a non-finite env output, is reported
once through :class:`~feudal_es.pettingzoo_host.EnvNotices`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from feudal_es.mappo import (
    Batch,
    MAPPOConfig,
    TrainState,
    option_skills,
    update,
    update_fused,
)
from feudal_es.pettingzoo_host import (
    EnvNotices,
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


@functools.cache
def policy(deterministic: bool, explore: float = 0.0) -> Callable:
    """The one jitted policy of the host path, cached per setting (so a second trainer on
    the same shapes does not compile it again; ``explore``: see ``FeudalActor.step``):
    ``policy(actor, critic, keys[E], obs[E], adj[E], gstate[E], option[E], t[E]) ->
    (option, ActOut, value)`` for ``E`` env copies at once; with ``critic=None`` (and
    ``gstate=None``) the value is ``None`` (evaluation)."""

    @eqx.filter_jit
    def step(actor, critic, keys, obs, adj, gstate, option, ep_t):
        new_option, out = jax.vmap(
            lambda k, o, a, h, t: actor.step(k, o, a, h, t, deterministic, explore))(
                keys, obs, adj, option, ep_t)
        value = None if critic is None else jax.vmap(critic)(gstate, option_skills(new_option))
        return new_option, out, value

    return step


@functools.cache
def _fused_update(cfg: MAPPOConfig) -> Callable:
    return eqx.filter_jit(lambda ts, batch: update_fused(ts, batch, cfg))


def host_update(cfg: MAPPOConfig, fused: bool) -> Callable:
    """The MAPPO update of the host path: one jitted :func:`~feudal_es.mappo.update_fused`
    (``fused``, decided as on the JAX path by :func:`feudal_es.mappo.uses_fused_update`),
    or the split update's jitted pieces (shared by every trainer)."""
    if fused:
        return _fused_update(cfg)
    return lambda ts, batch: update(ts, batch, cfg)


class HostCollector:
    """Collects ``cfg.num_steps x len(envs)`` transitions from PettingZoo env copies.

    Args:
      envs: the env copies (e.g. ``[pettingzoo.make("parallel", id) for _ in range(E)]``);
        reused across calls and reset whenever an episode ends.
      spec: their :class:`HostEnvSpec`.
      cfg: the MAPPO config (``num_steps``, ``option_exploration``; ``num_envs`` must equal
        ``len(envs)``).
      seed: seeds the resets (the ``j``-th episode started gets ``seed + j``).
      deterministic: take the executor's mode instead of sampling (evaluation, tests).
      step_timeout: seconds one ``reset``/``step`` call may take (0 = no limit); over it
        :class:`EnvTimeout` is raised (see :func:`deadline`).
      max_episode_steps: an episode still running after this many steps is cut there:
        treated as a truncation (``done``) and the copy reset (0 = no limit); the first
        cut is reported through ``notices``.
      notices: where non-finite env outputs and cut episodes are reported, once each (the
        run's, shared with its evaluator; default: the collector's own).

    Every ``reset``/``step`` result is checked (:func:`check_reset`, :func:`check_step`):
    a malformed one raises :class:`EnvOutputError` naming the agent and the problem.
    """

    def __init__(self, envs: Sequence[Any], spec: HostEnvSpec, cfg: MAPPOConfig, seed: int = 0,
                 deterministic: bool = False, step_timeout: float = 0.0,
                 max_episode_steps: int = 0, notices: EnvNotices | None = None):
        if len(envs) != cfg.num_envs:
            raise ValueError(f"got {len(envs)} env copies but MAPPOConfig.num_envs is "
                             f"{cfg.num_envs}")
        self.envs = list(envs)
        self.spec = spec
        self.cfg = cfg
        self._seed = seed
        self._episodes_started = 0
        self._obs: list[dict] = []
        self._ep_t = np.zeros(len(envs), np.int32)
        self._ep_seed = np.zeros(len(envs), np.int64)  # each copy's episode's reset seed
        self._ep_return = np.zeros(len(envs), np.float64)
        self._ep_team = np.zeros(len(envs), np.float64)
        self._option: Any = None
        self._policy = policy(deterministic, cfg.option_exploration)
        self._bootstrap = policy(deterministic)
        self.step_timeout = float(step_timeout)
        self.max_episode_steps = int(max_episode_steps)
        self.notices = notices if notices is not None else EnvNotices()
        for i in range(len(envs)):
            self._obs.append(self._reset(i))

    # --- per-env conversions ---------------------------------------------------------
    def _reset(self, i: int) -> dict:
        env = self.envs[i]
        with deadline(self.step_timeout, f"{type(env).__name__}.reset() took longer than "
                      f"{self.step_timeout:g} s (time limit)"):
            out = env.reset(seed=self._seed + self._episodes_started)
        obs = check_reset(env, out, self.spec)
        self._ep_seed[i] = self._seed + self._episodes_started
        self.notices.check(env_name(env), 0, int(self._ep_seed[i]), "MAPPO collection",
                           obs)
        self._episodes_started += 1
        self._ep_t[i] = 0
        self._ep_return[i] = 0.0
        self._ep_team[i] = 0.0
        return obs

    def restart(self, i: int) -> None:
        """Drop copy ``i``'s episode in progress and reset it (the next seed in turn)."""
        self._obs[i] = self._reset(i)

    def _global_state(self, i: int, stacked_obs: Any) -> np.ndarray:
        if self.spec.has_state:
            return np.asarray(self.envs[i].state(), np.float32).reshape(-1)
        leaves = [stacked_obs[k] for k in sorted(stacked_obs)] if isinstance(
            stacked_obs, dict) else [stacked_obs]
        return np.concatenate([x.reshape(-1) for x in leaves])

    def _inputs(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """The current step's stacked ``(obs, alive, adj, global_state)`` of all copies."""
        stacked = [stack_agents(self.spec, o) for o in self._obs]
        obs = jax.tree.map(lambda *xs: np.stack(xs), *[s[0] for s in stacked])
        alive = np.stack([s[1] for s in stacked])
        adj = np.stack([adjacency(getattr(env, "comm_graph", None), self.spec.num_agents,
                                  alive[i]) for i, env in enumerate(self.envs)])
        gstate = np.stack([self._global_state(i, s[0]) for i, s in enumerate(stacked)])
        return obs, alive, adj, gstate

    # --- collection -------------------------------------------------------------------
    def collect(self, ts: TrainState) -> tuple[TrainState, Batch, dict]:
        """Roll every copy ``num_steps`` steps with ``ts.actor``; return the advanced
        ``ts`` (key, env-step counter), the batch and rollout statistics."""
        cfg, spec = self.cfg, self.spec
        e, n = len(self.envs), spec.num_agents
        if self._option is None:
            self._option = jax.tree.map(lambda x: np.broadcast_to(x, (e, *x.shape)).copy(),
                                      jax.device_get(ts.actor.initial_option(n)))
        steps: list[dict] = []
        finished_return: list[float] = []
        finished_team: list[float] = []
        env_reward_sum, team_reward_sum = 0.0, 0.0
        key = ts.key
        for _ in range(cfg.num_steps):
            obs, alive, adj, gstate = self._inputs()
            key, sub = jax.random.split(key)
            option, out, value = jax.device_get(self._policy(
                ts.actor, ts.critic, jax.random.split(sub, e), obs, adj, gstate, self._option,
                self._ep_t))
            reward = np.zeros((e, n), np.float32)
            done = np.zeros((e, n), np.float32)
            for i, env in enumerate(self.envs):
                acts = env_actions(spec, out.env_action[i],
                                   [a for a in spec.agents if a in self._obs[i]])
                live_i = list(env.agents)
                with deadline(self.step_timeout, f"{type(env).__name__}.step() took longer "
                              f"than {self.step_timeout:g} s (time limit)"):
                    out_i = env.step(acts)
                obs_i, rew, term, trunc, infos = check_step(env, acts, out_i, spec, live_i)
                skills = np.asarray(option_skills(option)[i])
                team_r = team_reward(infos, rew)
                kind = self.cfg.reward
                for j, a in enumerate(spec.agents):
                    if a not in rew:
                        continue
                    channels = (infos.get(a) or {}).get("skill_rewards")
                    local = float(rew[a])
                    reward[i, j] = (
                        (local if channels is None
                         else float(np.asarray(channels).reshape(-1)[skills[j]]))
                        if kind == "option" else local if kind == "local"
                        else team_r if kind == "team" else local + team_r)
                    done[i, j] = float(term.get(a, False) or trunc.get(a, False))
                mean_reward = float(np.mean(list(rew.values()))) if rew else 0.0
                env_reward_sum += mean_reward
                team_reward_sum += team_r
                self._ep_return[i] += mean_reward
                self._ep_team[i] += team_r
                self._ep_t[i] += 1
                self.notices.check(env_name(env), int(self._ep_t[i]), int(self._ep_seed[i]),
                                   "MAPPO collection", obs_i, rew, infos)
                cut = bool(env.agents) and 0 < self.max_episode_steps <= self._ep_t[i]
                if cut:
                    self.notices.time_limit(env_name(env), self.max_episode_steps,
                                            "a MAPPO collection")
                if cut or not env.agents:  # over: every agent ended, or the time limit
                    done[i, :] = 1.0
                    finished_return.append(self._ep_return[i])
                    finished_team.append(self._ep_team[i])
                    obs_i = self._reset(i)
                self._obs[i] = obs_i
            self._option = option
            steps.append(dict(obs=obs, adj=adj, global_state=gstate, option=option,
                              action=out.action, log_prob=out.log_prob, value=value,
                              reward=reward, done=done, alive=alive))
        # bootstrap value after the last step, under the option the selector would choose
        # (no exploration, as the JAX path's collect)
        obs, alive, adj, gstate = self._inputs()
        key, sub = jax.random.split(key)
        _, _, last_value = jax.device_get(self._bootstrap(
            ts.actor, ts.critic, jax.random.split(sub, e), obs, adj, gstate, self._option,
            self._ep_t))
        traj = jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *steps)
        batch = Batch(last_value=jnp.asarray(last_value), **traj)
        stats = {
            "episodes": float(len(finished_return)),
            "episode_return": float(np.mean(finished_return)) if finished_return else np.nan,
            "team_return": float(np.mean(finished_team)) if finished_team else np.nan,
            "env_reward": env_reward_sum / (cfg.num_steps * e),
            "team_reward": team_reward_sum / (cfg.num_steps * e),
        }
        ts = ts._replace(key=key, env_steps=ts.env_steps + cfg.num_steps * e)
        return ts, batch, stats
