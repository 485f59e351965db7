"""Reference (non-learned) policies for the bundled envs, and a rollout helper.

Every policy has the signature ``policy(key, env, state) -> actions [N, 2]`` in
[-1, 1]^2, is pure JAX and jit/vmap-safe. The Lloyd (CVT) policies are the classical
coverage-control baselines LPAC is compared against: each robot steps toward the
density-weighted centroid of its Voronoi cell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from envs.base import SwarmEnv
from envs.coverage import Coverage, CoverageState
from envs.episode import run_episode, stateless

Policy = Callable[[jax.Array, Any, Any], jax.Array]


def random_policy(key: jax.Array, env: SwarmEnv, state: Any) -> jax.Array:
    """Uniform random velocity in [-1, 1]^2 per agent."""
    del state
    return jax.random.uniform(key, (env.num_agents, 2), minval=-1.0, maxval=1.0)


def _toward(env: Coverage, pos: jax.Array, target: jax.Array) -> jax.Array:
    """Action that moves each robot toward ``target`` at up to ``max_speed`` (norm-clipped,
    so the direction is kept and the action stays in [-1, 1]^2)."""
    v = (target - pos) / env.max_speed
    norm = jnp.linalg.norm(v, axis=-1, keepdims=True)
    return v / jnp.maximum(norm, 1.0)


def _centroids(env: Coverage, pos: jax.Array, weights: jax.Array, mask: jax.Array) -> jax.Array:
    """``[N, 2]`` centroid of each robot's cell ``mask [N, G, G]`` under ``weights``.

    Falls back to the cell's geometric centroid where the robot knows no mass in it, and
    to the robot's own position for an empty cell.
    """
    c = env.cell_centres()
    w = jnp.where(mask, weights, 0.0)
    geo = mask.astype(jnp.float32)

    def centroid(w):
        mass = jnp.sum(w, axis=(1, 2))
        cx = jnp.sum(w * c[None, None, :], axis=(1, 2))
        cy = jnp.sum(w * c[None, :, None], axis=(1, 2))
        return jnp.stack([cx, cy], -1) / jnp.maximum(mass, 1e-12)[:, None], mass

    c_w, m_w = centroid(w)
    c_g, m_g = centroid(geo)
    fallback = jnp.where((m_g > 0)[:, None], c_g, pos)
    return jnp.where((m_w > 1e-6)[:, None], c_w, fallback)


def lloyd_clairvoyant(key: jax.Array, env: Coverage, state: CoverageState) -> jax.Array:
    """Centralized Lloyd step: true density, Voronoi cells of all robots."""
    del key
    mask, _ = env.voronoi(state.pos)
    target = _centroids(env, state.pos, state.density[None], mask)
    return _toward(env, state.pos, target)


def lloyd_own_map(key: jax.Array, env: Coverage, state: CoverageState) -> jax.Array:
    """Lloyd step on each robot's own sensed map over its true Voronoi cell (all robots'
    positions): an expert for imitation between clairvoyant and decentralized Lloyd. The
    density it weighs is what the robot has sensed (its observation holds it); only the
    cell needs the robots it cannot see. Where its cell holds no sensed mass it heads for
    the cell's middle, as :func:`lloyd_decentralized` does."""
    del key
    mask, _ = env.voronoi(state.pos)
    target = _centroids(env, state.pos, env.sensed(state), mask)
    return _toward(env, state.pos, target)


def _cells(env: Coverage, pos: jax.Array, known: jax.Array,
           known_pos: jax.Array | None = None, window: float | None = None) -> jax.Array:
    """``[N, G, G]`` robot i's cell as it can draw it: the cells no nearer to a robot it
    knows (``known[i, j]``, placed at ``known_pos[i, j]``; ``None``: where each robot is
    now) than to itself, inside a square of half-side ``window`` around it (``None``: the
    whole world)."""
    d2 = env.sq_dists(pos)  # [N, G, G]
    c = env.cell_centres()

    def cell(i):
        others = d2 if known_pos is None else env.sq_dists(known_pos[i])  # [N, G, G]
        nearest = jnp.min(jnp.where(known[i][:, None, None], others, jnp.inf), axis=0)
        cell = d2[i] <= nearest  # [G, G]
        if window is None:
            return cell
        near = lambda x: jnp.abs(c - x) <= window  # [G] along one axis
        return cell & near(pos[i, 1])[:, None] & near(pos[i, 0])[None, :]

    # lax.map in chunks keeps memory at O(chunk * N * G^2), not O(N^2 * G^2).
    return lax.map(cell, jnp.arange(env.num_agents), batch_size=min(env.num_agents, 16))


def _own_cells(env: Coverage, state: CoverageState, window: float | None) -> jax.Array:
    """``[N, G, G]`` robot i's decentralized cell: the cells no nearer to one of its
    comm-radius neighbours than to it (:func:`_cells`), inside a square of half-side
    ``window`` around it (``None``: the whole world)."""
    return _cells(env, state.pos, env.comm_graph(state) > 0, window=window)


def _decentralized_step(env: Coverage, state: CoverageState, window: float | None) -> jax.Array:
    """Decentralized Lloyd's action: robot i's cell (:func:`_own_cells`) weighted by its
    own sensed map (:func:`_centroids`' fallbacks)."""
    target = _centroids(env, state.pos, env.sensed(state), _own_cells(env, state, window))
    return _toward(env, state.pos, target)


def lloyd_decentralized(key: jax.Array, env: Coverage, state: CoverageState) -> jax.Array:
    """Decentralized Lloyd step: each robot uses only what it knows.

    Robot i's cell is the set of grid cells no nearer to any of its comm-radius
    neighbours than to itself (robots out of range are ignored, as in decentralized CVT);
    the centroid is weighted by robot i's own sensed density map, over the whole world.
    """
    del key
    return _decentralized_step(env, state, None)


def lloyd_decentralized_local(key: jax.Array, env: Coverage, state: CoverageState
                              ) -> jax.Array:
    """Decentralized Lloyd as CoverageControl's ``DecentralizedCVT`` computes it: as
    :func:`lloyd_decentralized`, but robot i's cell is cut to its local map, the square
    of half-side ``comm_radius`` around it (LPAC's ``LocalMapSize`` is twice its
    ``CommunicationRange``), so a robot is drawn only by the density it sensed nearby and
    an empty cell's geometric centroid stays near the robot."""
    del key
    return _decentralized_step(env, state, env.comm_radius)


def lloyd_memory(key: jax.Array, env: Coverage, state: CoverageState) -> jax.Array:
    """Lloyd step on each robot's own sensed map over the cell its memory of the others
    draws (:func:`_cells` of every robot it has met, where it last had it in comm
    range): decentralized, since a robot learns another's place only by meeting it, and
    what ``Coverage(neighbour_memory=True)`` lets a robot observe."""
    del key
    cells = _cells(env, state.pos, state.met, state.met_pos)
    target = _centroids(env, state.pos, env.sensed(state), cells)
    return _toward(env, state.pos, target)


def frontier_decentralized(key: jax.Array, env: Coverage, state: CoverageState) -> jax.Array:
    """Decentralized exploration: each robot steps toward the nearest cell it has not
    sensed inside its own decentralized cell (the cells no nearer to one of its comm
    neighbours than to it, as :func:`lloyd_decentralized`'s), reading only its own seen
    mask and its neighbours' positions; a robot that has sensed its whole cell stays."""
    del key
    unseen = _own_cells(env, state, None) & ~state.seen
    score = jnp.where(unseen, env.sq_dists(state.pos), jnp.inf).reshape(env.num_agents, -1)
    j = jnp.argmin(score, axis=-1)
    c = env.cell_centres()
    target = jnp.stack([c[j % env.grid_size], c[j // env.grid_size]], axis=-1)
    found = jnp.isfinite(jnp.min(score, axis=-1))[:, None]
    return _toward(env, state.pos, jnp.where(found, target, state.pos))


#: steps :func:`explore_then_clairvoyant` explores (the best of 5, 10, 15, 20 for
#: exploring before decentralized Lloyd on the sweeps' validation episodes:
#: ``python -m experiments.coverage_explore``)
EXPLORE_STEPS = 15


def explore_then_clairvoyant(key: jax.Array, env: Coverage, state: CoverageState
                             ) -> jax.Array:
    """An expert for imitation that a robot's observation can follow further than
    clairvoyant Lloyd alone: :func:`frontier_decentralized` for the first
    :data:`EXPLORE_STEPS` steps of the episode, then :func:`lloyd_clairvoyant`. Where a
    robot has sensed nothing, clairvoyant Lloyd's move depends on density it cannot
    observe (an imitator learns its average); exploring first is observable, and leaves
    states where more of the density is sensed."""
    return jnp.where(state.t < EXPLORE_STEPS, frontier_decentralized(key, env, state),
                     lloyd_clairvoyant(key, env, state))


def rollout(
    env: SwarmEnv, policy: Policy, key: jax.Array, num_steps: int | None = None
) -> tuple[Any, Any]:
    """One episode (``max_steps`` by default, at most that) under ``policy``, as a single
    ``lax.scan`` (:func:`envs.episode.run_episode`).

    Returns ``(final_state, outs)`` where ``outs`` is the stacked :class:`EnvOut` over
    time. Jittable (``num_steps`` is static) and vmappable over ``key``.
    """
    episode = run_episode(key, env, stateless(policy, env), num_steps=num_steps)
    return episode.final_state, episode.outs


def rollout_metric(
    env: SwarmEnv, policy: Policy, key: jax.Array, num_envs: int, metric: str = "coverage_cost"
) -> jax.Array:
    """``[num_envs]`` value of ``metrics[metric]`` at the last step of one episode per env
    (e.g. the final J(T)/J(0) on Coverage), from one jitted, vmapped rollout."""
    run = jax.jit(jax.vmap(lambda k: rollout(env, policy, k)[1].metrics[metric][-1]))
    return run(jax.random.split(key, num_envs))
