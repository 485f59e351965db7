"""PettingZoo ``ParallelEnv`` view of any functional :class:`~envs.base.SwarmEnv`.

The adapter keeps the env state and a JAX PRNG key on the device and exposes the usual
dict-per-agent, numpy-in/numpy-out API. Each ``step`` is one call of a jitted function
(compiled once per env configuration and shared across instances) followed by one
host transfer of the whole output packed into one flat buffer (see :class:`Packer`), so the
Python overhead per step is small.

Key derivation (what makes it deterministic, and what tests reproduce with the core)::

    key = jax.random.key(seed)                    # reset(seed=seed)
    key, k = jax.random.split(key); obs, state = env.reset(k)
    key, k = jax.random.split(key); obs, state, out = env.step(k, state, actions)  # each step

``reset()`` without a seed continues the same key stream (a fresh random seed is drawn
only if the adapter has never been seeded).
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from pettingzoo import ParallelEnv

from envs.base import EnvOut, SwarmEnv

AgentID = str


class Packer:
    """Packs a pytree of arrays into (usually) one flat float32 buffer inside jit, and back.

    Every output buffer of a jitted call and every host transfer has a fixed cost, so the
    adapter returns its per-step ``(obs, EnvOut)`` as one float32 vector: 4-byte leaves
    (float32, int32, uint32) are bit-cast into it, bool and small integer leaves are cast
    (exact), and anything else (e.g. 8-byte leaves under x64) goes to one extra buffer
    per dtype. On the host the leaves come back exactly, as numpy views where possible.
    """

    _BITCAST = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32))
    _CAST = (np.dtype(np.bool_), np.dtype(np.int8), np.dtype(np.uint8),
             np.dtype(np.int16), np.dtype(np.uint16))

    def __init__(self, shapes: Any):
        leaves, self.treedef = jax.tree.flatten(shapes)
        self.buffer_dtypes: list[np.dtype] = [np.dtype(np.float32)]
        fill = [0]
        self.slots = []  # (buffer, start, stop, shape, dtype, how) per leaf
        for leaf in leaves:
            dtype = np.dtype(leaf.dtype)
            if dtype == np.float32:
                g, how = 0, "same"
            elif dtype in self._BITCAST:
                g, how = 0, "bitcast"
            elif dtype in self._CAST:
                g, how = 0, "cast"
            else:
                if dtype not in self.buffer_dtypes:
                    self.buffer_dtypes.append(dtype)
                    fill.append(0)
                g, how = self.buffer_dtypes.index(dtype), "raw"
            size = int(np.prod(leaf.shape, dtype=np.int64))
            self.slots.append((g, fill[g], fill[g] + size, tuple(leaf.shape), dtype, how))
            fill[g] += size

    def pack(self, tree: Any) -> tuple[jax.Array, ...]:
        parts: list[list[jax.Array]] = [[] for _ in self.buffer_dtypes]
        for (g, _, _, _, _, how), leaf in zip(self.slots, jax.tree.leaves(tree), strict=True):
            flat = jnp.ravel(leaf)
            if how == "same":
                pass
            elif how == "bitcast":
                flat = jax.lax.bitcast_convert_type(flat, jnp.float32)
            elif how == "cast":
                flat = flat.astype(jnp.float32)
            parts[g].append(flat)
        return tuple(
            jnp.concatenate(p) if p else jnp.zeros((0,), d)
            for p, d in zip(parts, self.buffer_dtypes, strict=True)
        )

    def unpack(self, buffers: tuple[np.ndarray, ...] | list[np.ndarray]) -> Any:
        leaves = []
        for g, a, b, shape, dtype, how in self.slots:
            flat = buffers[g][a:b]
            if how == "bitcast":
                flat = flat.view(dtype)
            elif how == "cast":
                flat = flat.astype(dtype)
            leaves.append(flat.reshape(shape))  # "same" / "raw": a view as it is
        return jax.tree.unflatten(self.treedef, leaves)

    @staticmethod
    def to_host(buffers: tuple[jax.Array, ...]) -> list[np.ndarray]:
        """The device -> host transfer (``np.asarray`` per buffer: cheaper than
        ``jax.device_get`` on a tuple, and there is usually a single buffer)."""
        return [np.asarray(b) for b in buffers]


class CoreFns(NamedTuple):
    """Jitted functions over one env configuration (see :func:`core_fns`).

    ``step(key_data, state, actions) -> (key_data, state, packed)`` where ``key_data`` is
    the raw ``uint32`` data of the key stream and ``packed`` holds ``(obs, EnvOut)``;
    ``unpack(Packer.to_host(packed))`` restores them as numpy.
    """

    reset: Callable[[jax.Array], tuple[jax.Array, Any, Any]]
    step: Callable[[jax.Array, Any, jax.Array], tuple[jax.Array, Any, tuple[jax.Array, ...]]]
    unpack: Callable[[tuple[np.ndarray, ...]], tuple[dict[str, np.ndarray], EnvOut]]
    global_state: Callable[[Any], jax.Array]
    comm_graph: Callable[[Any], jax.Array]


def _build_core_fns(env: SwarmEnv) -> CoreFns:
    # The key travels as raw uint32 key data: a typed PRNG key returned from a jitted call
    # is rebuilt in Python on every call (~20 us, a tenth of the adapter's step).
    def reset(key_data):
        key, sub = jax.random.split(jax.random.wrap_key_data(key_data))
        obs, state = env.reset(sub)
        return jax.random.key_data(key), obs, state

    _, state_shape = jax.eval_shape(env.reset, jax.random.key(0))
    act_shape = jax.ShapeDtypeStruct((env.num_agents, *env.action_space.shape), jnp.float32)
    obs_shape, _, out_shape = jax.eval_shape(env.step, jax.random.key(0), state_shape, act_shape)
    packer = Packer((obs_shape, out_shape))

    def step(key_data, state, actions):
        key, sub = jax.random.split(jax.random.wrap_key_data(key_data))
        obs, state, out = env.step(sub, state, actions)
        return jax.random.key_data(key), state, packer.pack((obs, out))

    return CoreFns(
        reset=jax.jit(reset),
        step=jax.jit(step),
        unpack=packer.unpack,
        global_state=jax.jit(env.global_state),
        comm_graph=jax.jit(env.comm_graph),
    )


@functools.lru_cache(maxsize=64)
def _cached_core_fns(env: SwarmEnv) -> CoreFns:
    return _build_core_fns(env)


def core_fns(env: SwarmEnv) -> CoreFns:
    """Jitted ``reset``/``step`` (with the adapter's key derivation) for ``env``.

    Cached per env configuration: equal, hashable envs (all-static fields) share one set
    of compiled functions, so making many adapters does not recompile. Envs with array
    fields are not hashable and get their own functions.
    """
    try:
        return _cached_core_fns(env)
    except TypeError:  # unhashable (array-valued fields)
        return _build_core_fns(env)


def key_from_seed(seed: int | None) -> jax.Array:
    """The adapter's root key for ``reset(seed=seed)``; a fresh random one for ``None``."""
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1, np.uint32)[0])
    return jax.random.key(seed)


def check_adapter_args(env: Any, render_mode: str | None, render_modes: list[str]) -> None:
    """Refuse a non-:class:`SwarmEnv` or an unsupported render mode (every adapter)."""
    if not isinstance(env, SwarmEnv):
        raise TypeError(f"env must be a SwarmEnv, got {type(env).__name__}")
    if render_mode is not None and render_mode not in render_modes:
        raise ValueError(f"render_mode must be None or one of {render_modes}, got {render_mode!r}")


class SwarmParallelEnv(ParallelEnv):
    """A functional swarm env as a PettingZoo ``ParallelEnv`` (numpy in/out).

    Agents are ``agent_0 .. agent_{N-1}``; all of them act every step. Episodes have the
    env's fixed length and end with ``truncations[agent] = True`` (a time limit, never a
    termination); after that ``agents`` is empty until the next ``reset``.

    ``infos[agent]`` after a step holds ``skill_rewards`` (``np.ndarray [K]``, one dense
    channel per entry of ``skill_names``), ``team_reward`` (``float``, the sparse mission
    signal, the same for every agent) and ``metrics`` (``dict[str, float]``).

    Returned arrays are read-only numpy views of the step's one host buffer (fresh every
    step); copy one before modifying it in place.

    Args:
      env: the functional env (e.g. ``envs.coverage.Coverage(num_agents=8)``).
      render_mode: ``None`` or ``"rgb_array"`` (``render()`` then returns ``uint8 [H, W, 3]``).
    """

    metadata = {  # noqa: RUF012 - PettingZoo convention: a class-level dict
        "name": "feudal_es_swarm",
        "render_modes": ["rgb_array"],
        "render_fps": 10,
        "is_parallelizable": True,
    }

    def __init__(self, env: SwarmEnv, render_mode: str | None = None):
        check_adapter_args(env, render_mode, self.metadata["render_modes"])
        self.env = env
        self.render_mode = render_mode
        self.metadata = {**type(self).metadata, "name": type(env).__name__}
        n = int(env.num_agents)
        self.possible_agents: list[AgentID] = [f"agent_{i}" for i in range(n)]
        self.agents: list[AgentID] = []
        self.skill_names: tuple[str, ...] = tuple(env.skill_names)
        obs_space = env.observation_space
        act_space = env.action_space
        # One space object per agent, reused on every call (PettingZoo's API test checks it).
        self.observation_spaces = {a: _copy_space(obs_space) for a in self.possible_agents}
        self.action_spaces = {a: _copy_space(act_space) for a in self.possible_agents}
        self.state_space = gym.spaces.Box(
            -np.inf, np.inf, shape=(env.global_state_size,), dtype=np.float32
        )
        self._act_shape = (n, *act_space.shape)
        self._act_dtype = act_space.dtype
        self._fns = core_fns(env)
        self._key: jax.Array | None = None  # raw uint32 key data
        self._state: Any = None
        self.num_steps = 0

    # --- spaces --------------------------------------------------------------------
    def observation_space(self, agent: AgentID) -> gym.spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: AgentID) -> gym.spaces.Space:
        return self.action_spaces[agent]

    # --- API -----------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[AgentID, Any], dict[AgentID, dict]]:
        """Start an episode; ``seed`` re-roots the key stream (see the module docstring)."""
        if seed is not None or self._key is None:
            self._key = jax.random.key_data(key_from_seed(seed))
        self._key, obs, self._state = self._fns.reset(self._key)
        obs = jax.device_get(obs)
        self.agents = list(self.possible_agents)
        self.num_steps = 0
        return self._split_obs(obs), {a: {} for a in self.agents}

    def step(self, actions: Mapping[AgentID, Any] | np.ndarray) -> tuple[
        dict[AgentID, Any],
        dict[AgentID, float],
        dict[AgentID, bool],
        dict[AgentID, bool],
        dict[AgentID, dict],
    ]:
        """Advance all agents by one step.

        ``actions`` maps every live agent to its ``[2]`` velocity command; a stacked
        ``np.ndarray [N, 2]`` (rows in ``possible_agents`` order) is accepted as a fast path.
        """
        if not self.agents:
            raise RuntimeError("step() called with no live agents: call reset() first")
        acts = self._stack_actions(actions)
        self._key, self._state, packed = self._fns.step(self._key, self._state, acts)
        obs, out = self._fns.unpack(Packer.to_host(packed))  # the one device -> host transfer
        self.num_steps += 1

        agents = self.agents
        rewards = dict(zip(agents, out.reward.tolist(), strict=True))
        team = float(out.team_reward)
        metrics = {k: float(v) for k, v in out.metrics.items()}
        # iterating an array yields its rows as views (in C, cheaper than indexing)
        infos = {
            a: {"skill_rewards": row, "team_reward": team, "metrics": dict(metrics)}
            for a, row in zip(agents, out.skill_rewards, strict=True)
        }
        done = bool(out.done)
        terminations = dict.fromkeys(agents, False)
        truncations = dict.fromkeys(agents, done)
        observations = self._split_obs(obs)
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def state(self) -> np.ndarray:
        """Global state ``[G]`` float32 (the centralized critic's input)."""
        self._require_state("state")
        return np.asarray(jax.device_get(self._fns.global_state(self._state)))

    def comm_graph(self) -> np.ndarray:
        """Comm adjacency ``[N, N]`` float32 (0/1, symmetric, zero diagonal) now."""
        self._require_state("comm_graph")
        return np.asarray(jax.device_get(self._fns.comm_graph(self._state)))

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            warnings.warn(
                "render() called without a render_mode; pass render_mode='rgb_array'",
                stacklevel=2,
            )
            return None
        self._require_state("render")
        return self.env.render(jax.device_get(self._state))

    def close(self) -> None:
        pass

    # --- extras --------------------------------------------------------------------
    @property
    def core_state(self) -> Any:
        """The functional env's current state pytree (on device)."""
        return self._state

    # --- helpers -------------------------------------------------------------------
    def _split_obs(self, obs: dict[str, np.ndarray]) -> dict[AgentID, dict[str, np.ndarray]]:
        # All agents live for the whole episode, so rows map 1:1 to possible_agents.
        names = tuple(obs)
        return {a: dict(zip(names, rows, strict=True))
                for a, rows in zip(self.possible_agents, zip(*obs.values(), strict=True),
                                   strict=True)}

    def _stack_actions(self, actions: Mapping[AgentID, Any] | np.ndarray) -> np.ndarray:
        if isinstance(actions, np.ndarray):
            if actions.shape != self._act_shape:
                raise ValueError(
                    f"stacked actions must have shape {self._act_shape}, got {actions.shape}"
                )
            return actions.astype(self._act_dtype, copy=False)
        try:
            rows = [actions[a] for a in self.possible_agents]
        except KeyError:
            missing = [a for a in self.possible_agents if a not in actions]
            raise KeyError(f"no action given for live agent(s) {missing}") from None
        acts = np.asarray(rows, dtype=self._act_dtype)
        if acts.shape != self._act_shape:
            raise ValueError(
                f"each agent's action must have shape {self._act_shape[1:]}, "
                f"got stacked shape {acts.shape}"
            )
        return acts

    def _require_state(self, what: str) -> None:
        if self._state is None:
            raise RuntimeError(f"{what}() needs an episode: call reset() first")


def _copy_space(space: gym.spaces.Space) -> gym.spaces.Space:
    """A fresh, independently seedable copy of ``space``."""
    return copy.deepcopy(space)
