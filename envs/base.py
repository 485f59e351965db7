"""The functional swarm-env interface every bundled env implements.

An env is an immutable :class:`equinox.Module` whose fields are its static configuration;
all of its methods are pure, jit- and vmap-safe functions of explicit state. Arrays carry
the agent axis first. This mirrors gymnax/JaxMARL so that rollouts can be `lax.scan`-ed
over time and `vmap`-ed over env copies and over an ES population.

Contract (what adapters, agents and trainers rely on):

- ``reset(key) -> (obs, state)``
- ``step(key, state, actions[N, *A]) -> (obs, state, EnvOut)``; the env never resets
  itself: ``EnvOut.done`` turns true at ``state.t == max_steps`` and the rollout calls
  :func:`auto_reset_step` (or resets explicitly).
- ``obs`` is a dict pytree ``{"maps": [N, C, H, W] float32, "vec": [N, D] float32}``.
  Optionally it also holds :data:`OPTION_OBS` (``[N, K, F]``): per agent and per option,
  the ``F`` features that option's executor needs (e.g. the offset to POI ``k`` for "go to
  POI k"); the executor reads the row of the option it holds, the backbone never sees it.
  Likewise :data:`SELECTOR_OBS` (``[N, S]``): the selector's own input.
- ``global_state(state) -> [G]`` float32, the centralized critic's input;
  ``global_state_at(state, obs)`` is the same given that state's observation (the
  rollout calls it, so an env whose global state is its observations need not recompute
  them).
- ``comm_graph(state) -> [N, N]`` float32 0/1 adjacency within the comm radius,
  symmetric, zero diagonal.
- ``skill_names`` — one name per dense reward channel of ``EnvOut.skill_rewards``.
- ``render(state) -> uint8 [H, W, 3]`` on the host (numpy/Pillow), for one unbatched state.
- ``observation_space`` / ``action_space`` — the per-agent Gymnasium spaces.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from envs.render import AGENT_COLOR
from envs.validate import check_int, check_number

Obs = dict[str, jax.Array]

#: The observation entry ``[N, K, F]`` of per-option features (see the contract above). An
#: option-conditioned input: the executor holding option ``k`` reads row ``k`` directly
#: instead of having to pick option ``k``'s part out of a shared embedding, which a small
#: MLP conditioned on a one-hot does poorly (a multiplicative selection).
OPTION_OBS = "option_obs"

#: The observation entry ``[N, S]`` of the selector's own features (e.g. the agent's id
#: one-hot and the mission's progress): with ``ActorConfig.selector_input`` "own" or
#: "both" the selector reads it, and the backbone never does, so MAPPO reshaping the
#: executor's embedding cannot move the input ES evolved the selector on.
SELECTOR_OBS = "selector_obs"

#: Observation entries that are a head's input, not perception: the backbone skips them.
HEAD_INPUTS = (OPTION_OBS, SELECTOR_OBS)


class EnvOut(NamedTuple):
    """What one ``step`` reports besides the next observation and state."""

    reward: jax.Array  # [N] dense per-agent reward (MAPPO's default signal)
    skill_rewards: jax.Array  # [N, K] one dense channel per entry of ``skill_names``
    team_reward: jax.Array  # [] sparse mission signal; team fitness sums it over an episode
    done: jax.Array  # [] bool, true on the last step of the fixed-length episode
    metrics: dict[str, jax.Array]  # scalar diagnostics (e.g. coverage cost J(t)/J(0))


class SwarmEnv(eqx.Module):
    """Base class of the bundled functional swarm envs.

    Subclasses declare their configuration as (static) fields and implement the abstract
    methods below. ``num_agents``, ``max_steps`` and ``skill_names`` must be available as
    plain Python values (static), since they fix array shapes.
    """

    num_agents: eqx.AbstractVar[int]
    max_steps: eqx.AbstractVar[int]
    skill_names: eqx.AbstractVar[tuple[str, ...]]
    # which way each entry of EnvOut.metrics is better ("lower" / "higher"), for reports;
    # team fitness (the summed team_reward) is always maximised
    metric_better: ClassVar[dict[str, str]] = {}
    # what ``render`` draws, ``(label, color)`` per kind of mark, for GIF legends
    # (envs.render.decorate_frames); override with exactly what the env's render draws
    render_legend: ClassVar[tuple[tuple[str, tuple[int, int, int]], ...]] = (
        ("agents", AGENT_COLOR),)

    # --- pure, jittable core -------------------------------------------------------
    def reset(self, key: jax.Array) -> tuple[Obs, Any]:
        raise NotImplementedError

    def step(self, key: jax.Array, state: Any, actions: jax.Array) -> tuple[Obs, Any, EnvOut]:
        raise NotImplementedError

    def observe(self, state: Any) -> Obs:
        raise NotImplementedError

    def global_state(self, state: Any) -> jax.Array:
        raise NotImplementedError

    def global_state_at(self, state: Any, obs: Obs) -> jax.Array:
        """``global_state(state)``, given ``obs``, the observation of ``state``. Override
        where the global state is built from the observations (it saves computing them
        twice per rollout step)."""
        del obs
        return self.global_state(state)

    def comm_graph(self, state: Any) -> jax.Array:
        raise NotImplementedError

    # --- host-side helpers ---------------------------------------------------------
    def render(self, state: Any) -> np.ndarray:
        raise NotImplementedError

    @property
    def num_skills(self) -> int:
        return len(self.skill_names)

    def skill_done(self, state: Any) -> jax.Array:
        """``[N, K]`` bool: whether agent ``i``'s option ``k`` has met its goal in
        ``state`` (e.g. Rover's "go to POI k" once POI k is observed). An actor with
        ``ActorConfig.option_ends`` re-decides an agent's option when it is done. This
        default is never: the options of an env without goals (Coverage's explore /
        cover) are behaviours that do not end; :func:`has_option_goals` tells them apart."""
        return jnp.zeros((self.num_agents, self.num_skills), bool)

    @property
    def observation_space(self) -> gym.spaces.Dict:
        """Per-agent observation space, derived from one traced reset (no compute)."""
        obs, _ = jax.eval_shape(self.reset, jax.random.key(0))
        return gym.spaces.Dict(
            {
                name: gym.spaces.Box(-np.inf, np.inf, shape=leaf.shape[1:], dtype=np.float32)
                for name, leaf in obs.items()
            }
        )

    @property
    def action_space(self) -> gym.spaces.Box:
        """Per-agent action: a 2-D velocity command in [-1, 1]^2 (scaled by max speed)."""
        return gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

    @property
    def global_state_size(self) -> int:
        _, state = jax.eval_shape(self.reset, jax.random.key(0))
        return int(jax.eval_shape(self.global_state, state).shape[0])


def has_option_goals(env: Any) -> bool:
    """Whether ``env``'s options can end (it overrides :meth:`SwarmEnv.skill_done`)."""
    done = getattr(type(env), "skill_done", None)
    return done is not None and done is not SwarmEnv.skill_done


def auto_reset_step(
    env: SwarmEnv, key: jax.Array, state: Any, actions: jax.Array
) -> tuple[Obs, Any, EnvOut]:
    """``env.step`` followed by a reset wherever the episode ended (gymnax convention).

    The returned ``EnvOut`` is the one of the finished step (its rewards and ``done``);
    the returned obs/state are the fresh episode's when ``done`` is true. Works under
    ``vmap`` because both branches are computed and selected with ``jnp.where``.

    When the env implements ``observe`` (obs is a function of state, as for every bundled
    env), the selected state is observed once instead of selecting between two
    observations; XLA then drops the unused ones (faster, most with local maps: see
    bench/RESULTS.md, "Design choices measured"). Same values either way.
    """
    key_step, key_reset = jax.random.split(key)
    obs, next_state, out = env.step(key_step, state, actions)
    obs_reset, state_reset = env.reset(key_reset)
    pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(out.done, x, y), a, b)
    state = pick(state_reset, next_state)
    if getattr(type(env), "observe", SwarmEnv.observe) is not SwarmEnv.observe:
        return env.observe(state), state, out
    return pick(obs_reset, obs), state, out


def check_positive_int(name: str, value: Any, minimum: int = 1) -> int:
    """A constructor's int argument, at least ``minimum`` (``envs.validate.check_int``)."""
    return check_int(name, value, minimum)


def check_positive_float(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """A constructor's finite real argument, ``> 0`` (``>= 0`` with ``allow_zero``)."""
    return check_number(name, value, low=0.0, low_open=not allow_zero)
