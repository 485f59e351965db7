"""``gymnasium.vector.VectorEnv`` of the whole swarm, backed by ``vmap``: one jitted call per step.

:class:`SwarmVectorEnv` runs ``num_envs`` copies of :class:`~envs.gym_wrappers.SwarmGymEnv`
as one program: ``reset`` and ``step`` are each ONE jitted call over all copies (``vmap``
of the functional core) followed by ONE device -> host transfer (a
:class:`~envs.pettingzoo_env.Packer` buffer). The env states and key streams stay on the
device. It is the ``vector_entry_point`` of the ``feudal_es/<Name>Swarm-v0`` ids::

    venv = gymnasium.make_vec("feudal_es/CoverageSwarm-v0", num_envs=1024,
                              vectorization_mode="vector_entry_point")

Conventions (those of gymnasium's ``SyncVectorEnv`` over the single env, which the tests
check it against):

- autoreset: ``metadata["autoreset_mode"] = AutoresetMode.NEXT_STEP``. A copy whose step
  returned ``terminated or truncated`` is reset by the *next* ``step`` call (its action is
  ignored; it returns the reset observation, reward 0, no termination / truncation and no
  info entries: the ``_<key>`` masks are False for it).
- episodes end by truncation, at the env's ``max_steps`` or after ``max_episode_steps``
  steps (``TimeLimit``'s rule; ``make_vec`` passes the spec's value), whichever is first.
- keys: copy ``i`` has its own key stream, derived exactly as the single env's:
  ``reset(seed=s)`` roots copy ``i`` at ``jax.random.key(s + i)`` (gymnasium's
  ``seed + i`` convention), a list of seeds gives one per copy, ``reset()`` without a seed
  continues every stream (the autoreset too: ``key, sub = split(key)`` then
  ``core.reset(sub)``, as the single env's ``reset()``). So copy ``i`` equals a
  ``SwarmGymEnv`` reset with seed ``s + i`` and driven with the same actions, up to float
  rounding (vmapped and unbatched XLA programs may order float operations differently).
- outputs are numpy: observations ``Dict(maps=[E, N, C, H, W], vec=[E, N, D],
  adj=[E, N, N])`` float32, rewards float64 ``[E]``, terminations / truncations bool
  ``[E]``, and the single env's info keys batched with their ``_key`` masks.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from envs.base import SwarmEnv
from envs.gym_wrappers import _swarm_obs_space, _with_adj
from envs.pettingzoo_env import Packer, check_adapter_args, key_from_seed

__all__ = ["SwarmVectorEnv", "copy_seeds", "swarm_action_space"]


def swarm_action_space(env: SwarmEnv) -> gym.spaces.Box:
    """One copy's action space: ``[N, 2]`` velocities, as :class:`SwarmGymEnv`'s."""
    n, per_agent = int(env.num_agents), env.action_space
    return gym.spaces.Box(np.broadcast_to(per_agent.low, (n, *per_agent.shape)),
                          np.broadcast_to(per_agent.high, (n, *per_agent.shape)),
                          dtype=per_agent.dtype)


def copy_seeds(seed: int, num_envs: int) -> list[int]:
    """The per-copy seeds of ``reset(seed=seed)``: ``seed + i`` (gymnasium's convention)."""
    return [seed + i for i in range(num_envs)]


class _VectorFns(NamedTuple):
    """Jitted functions over one env configuration (they retrace per ``num_envs``).

    ``reset(keys, mask, states, t, auto) -> (keys, states, t, auto, packed obs)`` resets
    the copies in ``mask`` (on the first reset, ``states`` are placeholder zeros);
    ``step(keys, states, t, auto, actions, limit) -> (keys, states, t, auto, packed)``
    where ``auto`` marks the copies to autoreset, ``limit`` is ``max_episode_steps`` (an
    int32 argument, so that every limit shares one compiled step) and ``packed`` holds the
    host tree (obs, reward, truncated, live = not autoreset, info). ``layout(num_envs)``
    gives the :class:`Packer` of each (obs, step tree) and the batched env states' shapes.
    """

    seed_keys: Callable[[jax.Array], jax.Array]
    reset: Callable[..., tuple[Any, ...]]
    step: Callable[..., tuple[Any, ...]]
    layout: Callable[[int], tuple[Packer, Packer, Any]]


def _build_vector_fns(env: SwarmEnv, reward: str) -> _VectorFns:
    def copy_reset(key_data):  # the single env's reset(): key, sub = split(key)
        key, sub = jax.random.split(jax.random.wrap_key_data(key_data))
        obs, state = env.reset(sub)
        return jax.random.key_data(key), obs, state

    def copy_step(key_data, state, actions):  # the single env's step()
        key, sub = jax.random.split(jax.random.wrap_key_data(key_data))
        obs, state, out = env.step(sub, state, actions)
        return jax.random.key_data(key), obs, state, out

    def where(mask, new, old):
        """Per copy: ``new`` where ``mask [E]``, else ``old`` (pytrees, copy axis first)."""
        pick = lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)
        return jax.tree.map(pick, new, old)

    def with_adj(obs, states):
        return jax.vmap(lambda o, s: _with_adj(env, o, s))(obs, states)

    def seed_keys(seeds):  # uint32 [E] -> key data [E, ...]; = key_from_seed(int(seed))
        return jax.random.key_data(jax.vmap(jax.random.key)(seeds))

    def reset_tree(keys, mask, states, t, auto):
        new_keys, obs, new_states = jax.vmap(copy_reset)(keys)
        keys, states = where(mask, (new_keys, new_states), (keys, states))
        obs = with_adj(obs, states)  # unmasked copies' obs are not returned by reset
        return keys, states, jnp.where(mask, 0, t), jnp.where(mask, False, auto), obs

    def step_tree(keys, states, t, auto, actions, limit):
        new_keys, obs, new_states, out = jax.vmap(copy_step)(keys, states, actions)

        def autoreset(args):  # computed only when some copy ended on the previous step
            _, r_obs, r_states = jax.vmap(copy_reset)(keys)  # same key split as the step
            return where(auto, (r_obs, r_states), args)

        obs, new_states = jax.lax.cond(jnp.any(auto), autoreset, lambda a: a, (obs, new_states))
        live = jnp.logical_not(auto)
        t = jnp.where(auto, 0, t + 1)
        truncated = live & (out.done | (t >= limit))
        rew = jnp.mean(out.reward, axis=-1) if reward == "mean" else out.team_reward
        zero = lambda x: jnp.where(live.reshape(live.shape + (1,) * (x.ndim - 1)), x, 0)
        info = {"reward": out.reward, "skill_rewards": out.skill_rewards,
                "team_reward": out.team_reward, "metrics": out.metrics}
        tree = {"obs": with_adj(obs, new_states), "reward": zero(rew.astype(jnp.float32)),
                "truncated": truncated, "live": live, "info": jax.tree.map(zero, info)}
        return new_keys, new_states, t, truncated, tree

    def key_shape(num_envs):
        data = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0)))
        return jax.ShapeDtypeStruct((num_envs, *data.shape), data.dtype)

    @functools.cache
    def layout(num_envs):
        keys, mask = key_shape(num_envs), jax.ShapeDtypeStruct((num_envs,), bool)
        _, _, states = jax.eval_shape(jax.vmap(copy_reset), keys)
        t = jax.ShapeDtypeStruct((num_envs,), jnp.int32)
        obs = jax.eval_shape(reset_tree, keys, mask, states, t, mask)[-1]
        act = jax.ShapeDtypeStruct((num_envs, env.num_agents, *env.action_space.shape),
                                   jnp.float32)
        limit = jax.ShapeDtypeStruct((), jnp.int32)
        tree = jax.eval_shape(step_tree, keys, states, t, mask, act, limit)[-1]
        return Packer(obs), Packer(tree), states

    def reset(keys, mask, states, t, auto):
        *carry, obs = reset_tree(keys, mask, states, t, auto)
        return (*carry, layout(keys.shape[0])[0].pack(obs))

    def step(keys, states, t, auto, actions, limit):
        *carry, tree = step_tree(keys, states, t, auto, actions, limit)
        return (*carry, layout(keys.shape[0])[1].pack(tree))

    return _VectorFns(jax.jit(seed_keys), jax.jit(reset), jax.jit(step), layout)


@functools.lru_cache(maxsize=32)
def _cached_vector_fns(env: SwarmEnv, reward: str) -> _VectorFns:
    return _build_vector_fns(env, reward)


def vector_fns(env: SwarmEnv, reward: str = "mean") -> _VectorFns:
    """The jitted batched reset/step of ``env`` (shared by equal, hashable configurations,
    so that making many vector envs does not recompile)."""
    try:
        return _cached_vector_fns(env, reward)
    except TypeError:  # unhashable env (array fields): compile for this instance
        return _build_vector_fns(env, reward)


def _placeholder(shape: jax.ShapeDtypeStruct) -> jax.Array:
    """A state leaf to be overwritten: zeros (a fixed key for PRNG-key leaves)."""
    if jax.dtypes.issubdtype(shape.dtype, jax.dtypes.prng_key):
        return jnp.broadcast_to(jax.random.key(0), shape.shape)
    return jnp.zeros(shape.shape, shape.dtype)


class SwarmVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of the swarm-as-one env, stepped by one jitted ``vmap``.

    See the module docstring for the conventions (autoreset, truncation, keys, outputs).

    Args:
      env: the functional env (one copy's configuration).
      num_envs: copies E.
      reward: ``"mean"`` (mean of the dense per-agent rewards) or ``"team"``, as
        :class:`~envs.gym_wrappers.SwarmGymEnv`.
      max_episode_steps: truncate after this many steps (``None``: the env's
        ``max_steps`` only).
      render_mode: ``None`` or ``"rgb_array"`` (``render()`` then returns one frame per
        copy: a host-side loop, for inspection rather than training).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP,  # noqa: RUF012
                "render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        env: SwarmEnv,
        num_envs: int,
        reward: Literal["mean", "team"] = "mean",
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
    ):
        check_adapter_args(env, render_mode, self.metadata["render_modes"])
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        if reward not in ("mean", "team"):
            raise ValueError(f"reward must be 'mean' or 'team', got {reward!r}")
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int)
            or max_episode_steps < 1
        ):
            raise ValueError(f"max_episode_steps must be None or an int >= 1, "
                             f"got {max_episode_steps!r}")
        self.env, self.num_envs, self.reward_mode = env, num_envs, reward
        self.max_episode_steps, self.render_mode = max_episode_steps, render_mode
        self.num_agents = int(env.num_agents)
        self.skill_names = tuple(env.skill_names)
        self.single_observation_space = _swarm_obs_space(env)
        self.single_action_space = swarm_action_space(env)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._fns = vector_fns(env, reward)
        self._limit = np.int32(np.iinfo(np.int32).max if max_episode_steps is None
                               else max_episode_steps)
        self._obs_packer, self._step_packer, self._state_shapes = self._fns.layout(num_envs)
        # device state: key data [E, ...], env states, steps since reset [E], autoreset [E]
        self._keys: jax.Array | None = None
        self._states: Any = None
        self._t: jax.Array | None = None
        self._auto: jax.Array | None = None

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset every copy (or those in ``options["reset_mask"]``, a bool ``[E]`` array).

        ``seed``: ``None`` continues each copy's key stream (a random root the first
        time), an int ``s`` roots copy ``i`` at ``s + i``, a list gives one seed (or
        ``None``: continue) per copy.
        """
        if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
            seed = int(seed)
        super().reset(seed=seed if isinstance(seed, int) else None)
        e = self.num_envs
        mask = np.ones(e, bool)
        if options and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"])
            if mask.shape != (e,) or mask.dtype != np.bool_ or not mask.any():
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({e},) "
                                 f"with at least one True, got {options['reset_mask']!r}")
            if self._states is None and not mask.all():
                raise ValueError("the first reset must reset every copy (no reset_mask)")
        if self._states is None:  # placeholders, all replaced: one compiled reset for all
            self._states = jax.tree.map(_placeholder, self._state_shapes)
            self._t, self._auto = jnp.zeros((e,), jnp.int32), jnp.zeros((e,), bool)
        self._keys = self._seeded_keys(seed)
        out = self._fns.reset(self._keys, jnp.asarray(mask), self._states, self._t, self._auto)
        self._keys, self._states, self._t, self._auto, packed = out
        obs = self._obs_packer.unpack(Packer.to_host(packed))
        return obs, {}

    def _seeded_keys(self, seed: int | Sequence[int | None] | None) -> jax.Array:
        """Key data ``[E, ...]``: the seeded copies re-rooted, the others continued."""
        e = self.num_envs
        seeds = copy_seeds(seed, e) if isinstance(seed, int) else (
            [None] * e if seed is None else list(seed))
        if len(seeds) != e:
            raise ValueError(f"reset(seed=list) needs {e} seeds (one per copy), got {len(seeds)}")
        if self._keys is None:  # never seeded: a random root for the unseeded copies
            base = int(self.np_random.integers(2**31 - e))
            seeds = [base + i if s is None else s for i, s in enumerate(seeds)]
        given = np.array([s is not None for s in seeds])
        if not given.any():
            return self._keys
        values = [0 if s is None else int(s) for s in seeds]
        if min(values) < 0:
            raise ValueError(f"seeds must be >= 0, got {seed!r}")
        if max(values) < 2**32:
            keys = self._fns.seed_keys(jnp.asarray(values, jnp.uint32))
        else:  # beyond uint32: one key at a time, as the single env derives it
            keys = jnp.stack([jax.random.key_data(key_from_seed(v)) for v in values])
        if given.all():
            return keys
        return jnp.where(jnp.asarray(given)[:, None], keys, self._keys)

    def step(
        self, actions: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every copy (autoresetting those that ended on the previous step)."""
        if self._states is None:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions, dtype=np.float32)
        if actions.shape != self.action_space.shape:
            raise ValueError(f"actions must have shape {self.action_space.shape}, "
                             f"got {actions.shape}")
        out = self._fns.step(self._keys, self._states, self._t, self._auto, actions,
                             self._limit)
        self._keys, self._states, self._t, self._auto, packed = out
        tree = self._step_packer.unpack(Packer.to_host(packed))
        truncated = tree["truncated"]
        return (tree["obs"], tree["reward"].astype(np.float64), np.zeros_like(truncated),
                truncated, self._infos(tree["info"], tree["live"]))

    @staticmethod
    def _infos(info: dict[str, Any], live: np.ndarray) -> dict[str, Any]:
        """The single env's info keys batched as ``SyncVectorEnv`` batches them: a value
        and a ``_key`` mask per key (none at all when every copy autoreset)."""
        if not live.any():
            return {}
        out: dict[str, Any] = {}
        for key in ("reward", "skill_rewards"):
            out[key], out[f"_{key}"] = info[key], live
        out["team_reward"], out["_team_reward"] = info["team_reward"].astype(np.float64), live
        metrics: dict[str, Any] = {}
        for key, value in info["metrics"].items():
            metrics[key], metrics[f"_{key}"] = np.asarray(value, np.float64), live
        out["metrics"], out["_metrics"] = metrics, live
        return out

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One ``uint8 [H, W, 3]`` frame per copy (``render_mode="rgb_array"``)."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='rgb_array'")
            return None
        if self._states is None:
            raise RuntimeError("render() needs an episode: call reset() first")
        states = jax.device_get(self._states)
        return tuple(self.env.render(jax.tree.map(lambda x, i=i: x[i], states))
                     for i in range(self.num_envs))
