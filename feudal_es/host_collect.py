"""MAPPO on the host path: the jitted :func:`policy`, the update (:func:`host_update`) and
:class:`HostCollector`, which collects MAPPO's batches from PettingZoo env copies.

Per step, the observations of all copies are stacked into one array pytree (agents padded
to ``possible_agents`` with an ``alive`` mask, as in MAPPO's death masking), sent to the
device once, and one jitted call returns every copy's actions; the copies then step
(:mod:`feudal_es.host_copies`: in this process, or spread over worker processes by
:mod:`feudal_es.host_workers`), and copies whose episode ended are reset, the ``j``-th
episode started with ``seed + j``. The result is the same :class:`feudal_es.mappo.Batch`
the pure-JAX path builds, so :func:`feudal_es.mappo.update` trains on it unchanged. Env
outputs are checked and env calls bounded in time by :mod:`feudal_es.pettingzoo_host`; an
episode that reaches ``max_episode_steps`` is cut (a truncation: the copy is reset) and
that, like a non-finite env output, is reported once through
:class:`~feudal_es.pettingzoo_host.EnvNotices`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from feudal_es.host_copies import CopiesLost, CopiesRestarted, CopyGroup, CopyView, EnvCopies
from feudal_es.mappo import (
    Batch,
    MAPPOConfig,
    TrainState,
    option_skills,
    update,
    update_fused,
    uses_sequences,
)
from feudal_es.pettingzoo_host import EnvNotices, HostEnvSpec

log = logging.getLogger("feudal_es")


@functools.cache
def policy(deterministic: bool, explore: float = 0.0) -> Callable:
    """The one jitted policy of the host path, cached per setting (so a second trainer on
    the same shapes does not compile it again; ``explore``: see ``FeudalActor.step``):
    ``policy(actor, critic, keys[E], obs[E], adj[E], gstate[E], option[E], t[E],
    critic_hidden[E]) -> (option, ActOut, value, critic_hidden)`` for ``E`` env copies at
    once; with ``critic=None`` (and ``gstate=None``) the value is ``None`` (evaluation).
    A recurrent critic steps ``critic_hidden`` (its GRU state after the previous step,
    zeroed where ``t == 0``) and returns the state after this one; else it is ``None``."""

    @eqx.filter_jit
    def step(actor, critic, keys, obs, adj, gstate, option, ep_t, critic_hidden=None):
        new_option, out = jax.vmap(
            lambda k, o, a, h, t: actor.step(k, o, a, h, t, deterministic, explore))(
                keys, obs, adj, option, ep_t)
        value, skills = None, option_skills(new_option)
        if critic is not None and critic.recurrent:
            critic_hidden, value = jax.vmap(critic.step)(critic_hidden, gstate, skills,
                                                         ep_t == 0)
        elif critic is not None:
            value = jax.vmap(critic)(gstate, skills)
        return new_option, out, value, critic_hidden

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
    """Collects ``cfg.num_steps x cfg.num_envs`` transitions from PettingZoo env copies.

    Args:
      envs: the env copies (e.g. ``[pettingzoo.make("parallel", id) for _ in range(E)]``),
        stepped in this process; or an :class:`~feudal_es.host_copies.EnvCopies` holding
        them elsewhere (:class:`feudal_es.host_workers.WorkerPool`: worker processes,
        built with the same ``step_timeout``, ``max_episode_steps`` and reward). Reused
        across calls; a copy is reset whenever its episode ends.
      spec: their :class:`HostEnvSpec`.
      cfg: the MAPPO config (``num_steps``, ``option_exploration``, ``reward``;
        ``num_envs`` must equal the number of copies).
      seed: seeds the resets (the ``j``-th episode started gets ``seed + j``; copies whose
        episodes end on the same step are reset in copy order).
      deterministic: take the executor's mode instead of sampling (evaluation, tests).
      step_timeout: seconds one ``reset``/``step`` call may take (0 = no limit); over it
        :class:`EnvTimeout` is raised (see :func:`deadline`).
      max_episode_steps: an episode still running after this many steps is cut there:
        treated as a truncation (``done``) and the copy reset (0 = no limit); the first
        cut is reported through ``notices``.
      notices: where non-finite env outputs and cut episodes are reported, once each (the
        run's, shared with its evaluator; default: the pool's, or the collector's own).
      max_redos: times one collection may be redone after a worker died (more: a
        :class:`~feudal_es.host_copies.CopiesLost` error).

    Every ``reset``/``step`` result is checked (:func:`check_reset`, :func:`check_step`):
    a malformed one raises :class:`EnvOutputError` naming the agent and the problem.

    When a worker holding copies dies, its pool replaces it and the collection in
    progress is discarded: every copy (not only the dead worker's) starts a new episode
    with the next reset seeds, the option state starts afresh, and the collection is
    redone from its first step with the same policy keys (``ts`` is not advanced). The
    steps the discarded attempt took are lost; the batch holds only the redone ones.
    """

    def __init__(self, envs: Sequence[Any] | EnvCopies, spec: HostEnvSpec, cfg: MAPPOConfig,
                 seed: int = 0, deterministic: bool = False, step_timeout: float = 0.0,
                 max_episode_steps: int = 0, notices: EnvNotices | None = None,
                 max_redos: int = 3):
        if notices is None:  # a pool's workers report through its own
            notices = getattr(envs, "notices", None) or EnvNotices()
        self.notices = notices
        self.step_timeout = float(step_timeout)
        self.max_episode_steps = int(max_episode_steps)
        if hasattr(envs, "step_copies"):
            self.envs: list[Any] | None = None
            self.copies: EnvCopies = envs
        else:
            self.envs = list(envs)
            self.copies = CopyGroup(self.envs, spec, cfg.reward, 0, self.step_timeout,
                                    self.max_episode_steps, self.notices)
        e = self.copies.num_copies
        if e != cfg.num_envs:
            raise ValueError(f"got {e} env copies but MAPPOConfig.num_envs is "
                             f"{cfg.num_envs}")
        self.spec = spec
        self.cfg = cfg
        self.max_redos = int(max_redos)
        self._seed = seed
        self._episodes_started = 0
        self._collections = 0  # collections completed
        self._views: list[CopyView | None] = [None] * e
        self._ep_t = np.zeros(e, np.int32)
        self._ep_seed = np.zeros(e, np.int64)  # each copy's episode's reset seed
        self._ep_return = np.zeros(e, np.float64)
        self._ep_team = np.zeros(e, np.float64)
        self._option: Any = None
        self._critic_hidden: np.ndarray | None = None  # a recurrent critic's, [E, H]
        self._policy = policy(deterministic, cfg.option_exploration)
        self._bootstrap = policy(deterministic)
        self._redo(lambda: None, "the first reset of the env copies", fresh=True)

    # --- resets -----------------------------------------------------------------------
    def _reset(self, copies: Iterable[int]) -> None:
        """Reset ``copies`` (in order) with the next seeds in turn."""
        seeds = []
        for i in copies:
            seeds.append((i, self._seed + self._episodes_started))
            self._ep_seed[i] = self._seed + self._episodes_started
            self._episodes_started += 1
            self._ep_t[i] = 0
            self._ep_return[i] = 0.0
            self._ep_team[i] = 0.0
        for i, view in self.copies.reset_copies(seeds).items():
            self._views[i] = view

    def restart(self, i: int) -> None:
        """Drop copy ``i``'s episode in progress and reset it (the next seed in turn)."""
        self._redo(lambda: self._reset([i]), f"the restart of env copy {i}")

    def _redo(self, attempt: Callable[[], Any], what: str, fresh: bool = False) -> Any:
        """``attempt()``; after a worker died (:class:`CopiesRestarted`), every copy
        restarts its episode and ``attempt()`` runs again (``max_redos`` times at most).
        ``fresh``: every copy starts an episode before the first attempt too."""
        for redo in range(self.max_redos + 1):
            try:
                if redo or fresh:
                    self._option = self._critic_hidden = None
                    self._reset(range(self.copies.num_copies))
                return attempt()
            except CopiesRestarted as e:
                if redo == self.max_redos:
                    raise CopiesLost(f"{e}; {what} was redone {redo} times and a worker died "
                                     "again: giving up") from None
                log.warning("%s; every env copy's episode in progress restarted (next reset "
                            "seeds) and %s redone from its start", e, what)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Release the env copies (stops the worker processes, if any)."""
        self.copies.close()

    # --- collection -------------------------------------------------------------------
    def _inputs(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """The current step's stacked ``(obs, alive, adj, global_state)`` of all copies."""
        views = self._views
        obs = jax.tree.map(lambda *xs: np.stack(xs), *[v.obs for v in views])
        return (obs, np.stack([v.alive for v in views]), np.stack([v.adj for v in views]),
                np.stack([v.gstate for v in views]))

    def collect(self, ts: TrainState) -> tuple[TrainState, Batch, dict]:
        """Roll every copy ``num_steps`` steps with ``ts.actor``; return the advanced
        ``ts`` (key, env-step counter), the batch and rollout statistics."""
        out = self._redo(lambda: self._collect(ts),
                         f"MAPPO collection #{self._collections + 1}")
        self._collections += 1
        return out

    def _collect(self, ts: TrainState) -> tuple[TrainState, Batch, dict]:
        cfg, spec = self.cfg, self.spec
        e, n = self.copies.num_copies, spec.num_agents
        if self._option is None:
            self._option = jax.tree.map(lambda x: np.broadcast_to(x, (e, *x.shape)).copy(),
                                        jax.device_get(ts.actor.initial_option(n)))
        steps: list[dict] = []
        finished_return: list[float] = []
        finished_team: list[float] = []
        env_reward_sum, team_reward_sum = 0.0, 0.0
        critic_recurrent = ts.critic.recurrent
        if critic_recurrent and self._critic_hidden is None:
            self._critic_hidden = np.broadcast_to(
                np.asarray(ts.critic.initial_hidden()),
                (e, ts.critic.gru.hidden_size)).copy()
        key = ts.key
        recurrent = ts.actor.recurrent
        sequences = uses_sequences(ts.actor, ts.critic)
        hidden = self._option.hidden if recurrent else None  # the GRU state entering
        for _ in range(cfg.num_steps):
            obs, alive, adj, gstate = self._inputs()
            first = self._ep_t == 0  # a new array: the episode's first step
            critic_entering = self._critic_hidden
            key, sub = jax.random.split(key)
            option, out, value, critic_hidden = jax.device_get(self._policy(
                ts.actor, ts.critic, jax.random.split(sub, e), obs, adj, gstate, self._option,
                self._ep_t, critic_entering))
            results = self.copies.step_copies(np.asarray(out.env_action),
                                              np.asarray(option_skills(option)))
            ended = []
            for i, r in enumerate(results):
                env_reward_sum += r.mean_reward
                team_reward_sum += r.team
                self._ep_return[i] += r.mean_reward
                self._ep_team[i] += r.team
                self._ep_t[i] += 1
                if r.over:
                    finished_return.append(self._ep_return[i])
                    finished_team.append(self._ep_team[i])
                    ended.append(i)
                else:
                    self._views[i] = r.view
            if ended:
                self._reset(ended)
            self._option, self._critic_hidden = option, critic_hidden
            steps.append(dict(obs=obs, adj=adj, global_state=gstate, option=option,
                              action=out.action, log_prob=out.log_prob, value=value,
                              reward=np.stack([r.reward for r in results]),
                              done=np.stack([r.done for r in results]),
                              alive=alive * np.asarray(getattr(ts.actor, "agent_mask", 1.0)),
                              **({"first": first} if sequences else {}),
                              **({"critic_hidden": critic_entering} if critic_recurrent
                                 else {})))
        # bootstrap value after the last step, under the option the selector would choose
        # (no exploration, as the JAX path's collect); a recurrent critic reads that state
        # from the one the last step left (the next collection reads it again)
        obs, alive, adj, gstate = self._inputs()
        key, sub = jax.random.split(key)
        _, _, last_value, _ = jax.device_get(self._bootstrap(
            ts.actor, ts.critic, jax.random.split(sub, e), obs, adj, gstate, self._option,
            self._ep_t, self._critic_hidden))
        traj = jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *steps)
        batch = Batch(last_value=jnp.asarray(last_value), **traj,
                      **({"hidden": jnp.asarray(hidden)} if recurrent else {}))
        stats = {
            "episodes": float(len(finished_return)),
            "episode_return": float(np.mean(finished_return)) if finished_return else np.nan,
            "team_return": float(np.mean(finished_team)) if finished_team else np.nan,
            "env_reward": env_reward_sum / (cfg.num_steps * e),
            "team_reward": team_reward_sum / (cfg.num_steps * e),
        }
        ts = ts._replace(key=key, env_steps=ts.env_steps + cfg.num_steps * e)
        return ts, batch, stats
