"""The square's symmetries on Coverage (``envs.coverage_symmetry``): checked against the
env's own dynamics and experts, not against the transform's formulas. A step from a moved
state with moved actions lands on the moved next state with the same rewards and costs;
clairvoyant and decentralized Lloyd pick the moved action in the moved state; the eight
elements are distinct and each is undone by its inverse; element 0 is the identity bit
for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.coverage import Coverage
from envs.coverage_symmetry import (
    ORDER,
    inverse,
    transform_grid,
    transform_points,
    transform_vectors,
)
from envs.policies import lloyd_clairvoyant, lloyd_decentralized

TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def env_states():
    env = Coverage(3, grid_size=8, map_size=4, num_features=2, max_steps=6, world_size=1.5,
                   max_speed=0.1, comm_radius=0.6, sensor_radius=0.3, memory_size=4,
                   neighbour_memory=True)
    _, state = env.reset(jax.random.key(3))
    states = [state]
    for t in range(3):  # a few steps in, so the sensed cells and meetings are not trivial
        a = jax.random.uniform(jax.random.key(t), (3, 2), minval=-1.0, maxval=1.0)
        state = env.step(jax.random.key(0), state, a)[1]
        states.append(state)
    return env, states


def test_the_eight_elements_are_distinct_and_undone_by_their_inverse():
    p = jnp.array([0.2, 0.7])  # off both diagonals and the centre lines
    images = {tuple(np.round(np.asarray(transform_points(p, g, 1.0)), 6)) for g in range(ORDER)}
    assert len(images) == ORDER
    grid = jnp.arange(16.0).reshape(4, 4)
    for g in range(ORDER):
        back = inverse(jnp.int32(g))
        np.testing.assert_allclose(transform_points(transform_points(p, g, 1.0), back, 1.0),
                                   p, atol=1e-6)
        np.testing.assert_array_equal(transform_grid(transform_grid(grid, g), back), grid)
        np.testing.assert_array_equal(transform_vectors(transform_vectors(p, g), back), p)


def test_identity_returns_the_state_bit_for_bit(env_states):
    env, states = env_states
    for s in states:
        moved = env.transform(s, jnp.int32(0))
        for a, b in zip(jax.tree.leaves(moved), jax.tree.leaves(s), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("g", range(1, ORDER))
def test_a_step_commutes_with_every_symmetry(env_states, g):
    env, states = env_states
    step = jax.jit(env.step)
    a = jax.random.uniform(jax.random.key(9), (3, 2), minval=-1.0, maxval=1.0)
    g = jnp.int32(g)
    for s in states:
        _, nxt, out = step(jax.random.key(0), s, a)
        _, nxt_m, out_m = step(jax.random.key(0), env.transform(s, g),
                               transform_vectors(a, g))
        want = env.transform(nxt, g)
        np.testing.assert_allclose(nxt_m.pos, want.pos, **TOL)
        np.testing.assert_array_equal(nxt_m.seen, want.seen)  # sensing moves cell for cell
        np.testing.assert_array_equal(nxt_m.met, want.met)
        np.testing.assert_allclose(nxt_m.met_pos, want.met_pos, **TOL)
        np.testing.assert_allclose(nxt_m.density, want.density, **TOL)
        np.testing.assert_allclose(nxt_m.cell_cost, nxt.cell_cost, **TOL)  # invariant
        np.testing.assert_allclose(nxt_m.cost0, nxt.cost0, **TOL)
        np.testing.assert_allclose(out_m.reward, out.reward, **TOL)
        np.testing.assert_allclose(out_m.team_reward, out.team_reward, **TOL)
        np.testing.assert_allclose(out_m.metrics["coverage_cost"],
                                   out.metrics["coverage_cost"], **TOL)
        np.testing.assert_array_equal(env.comm_graph(env.transform(s, g)), env.comm_graph(s))
        # the robot's own sensed map and memory move with the world
        np.testing.assert_allclose(env.sensed(nxt_m), transform_grid(env.sensed(nxt), g),
                                   **TOL)


@pytest.mark.parametrize("expert", [lloyd_clairvoyant, lloyd_decentralized])
def test_lloyd_is_equivariant(env_states, expert):
    env, states = env_states
    for g in range(ORDER):
        g = jnp.int32(g)
        for s in states:
            np.testing.assert_allclose(expert(None, env, env.transform(s, g)),
                                       transform_vectors(expert(None, env, s), g), **TOL)
