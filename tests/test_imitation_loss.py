"""The imitation losses (feudal_es.imitation_loss) against a hand computation, the reason
``"direction"`` exists (a heading the robot cannot tell apart does not shrink its speed,
where it does under MSE), and its wiring into PretrainConfig / imitate."""

from __future__ import annotations

import dataclasses
import types

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import FeudalActor
from envs.coverage import Coverage
from envs.policies import lloyd_clairvoyant
from feudal_es.config import COMPACT_ACTOR
from feudal_es.imitation_loss import EPS, IMITATION_LOSSES, action_loss
from feudal_es.pretrain import PretrainConfig, imitate

COVER = 1
ACTOR = dataclasses.replace(COMPACT_ACTOR, options="fixed", fixed_option=COVER,
                            selector_period=10)


def hand_loss(kind: str, action: np.ndarray, label: np.ndarray) -> float:
    """The loss by a plain loop over agents (float64)."""
    if kind == "mse":
        return float(np.mean((action - label) ** 2))
    per = []
    for a, y in zip(action.reshape(-1, action.shape[-1]), label.reshape(-1, label.shape[-1]),
                    strict=True):
        speed = np.sqrt(a @ a + EPS**2)
        target = np.sqrt(y @ y)
        cos = (a @ y) / (speed * max(target, EPS))
        per.append((speed - target) ** 2 + target * (1.0 - cos))
    return float(np.mean(per))


@pytest.mark.parametrize("kind", IMITATION_LOSSES)
def test_each_loss_is_the_hand_computation(kind):
    rng = np.random.default_rng(0)
    action = rng.uniform(-1.5, 1.5, (3, 5, 2)).astype(np.float32)
    label = rng.uniform(-1.0, 1.0, (3, 5, 2)).astype(np.float32)
    label[0, 0] = 0.0  # a robot its expert keeps still
    action[1, 2] = 0.0  # an action with no heading
    got = float(action_loss(kind, jnp.asarray(action), jnp.asarray(label)))
    assert got == pytest.approx(hand_loss(kind, action.astype(np.float64),
                                          label.astype(np.float64)), rel=1e-5, abs=1e-7)


def test_a_still_label_asks_only_for_speed_zero():
    a = jnp.array([[0.3, -0.4]])
    assert float(action_loss("direction", a, jnp.zeros((1, 2)))) == pytest.approx(
        0.5**2 + EPS**2, rel=1e-5)


def fitted(kind: str, labels: jax.Array) -> np.ndarray:
    """The one action that minimizes ``kind`` over ``labels`` (one observation, labels
    it cannot tell apart), by gradient descent."""
    grad = jax.jit(jax.grad(lambda a: action_loss(kind, jnp.broadcast_to(a, labels.shape),
                                                  labels)))
    a = jnp.array([0.05, 0.0])
    for _ in range(2000):
        a = a - 0.05 * grad(a)
    return np.asarray(a)


def test_direction_keeps_the_expert_speed_where_mse_shrinks_it():
    """Two labels at speed 0.8 a right angle apart: MSE's optimum is their mean (speed
    0.8 / sqrt 2), the direction loss's is speed 0.8 along the mean heading."""
    labels = jnp.array([[0.8, 0.0], [0.0, 0.8]])
    mse, direction = fitted("mse", labels), fitted("direction", labels)
    np.testing.assert_allclose(mse, [0.4, 0.4], atol=1e-4)
    assert np.linalg.norm(direction) == pytest.approx(0.8, abs=1e-3)
    assert direction[0] == pytest.approx(direction[1], abs=1e-4)


def test_an_unknown_loss_is_refused_by_name():
    with pytest.raises(ValueError, match=r"PretrainConfig\.loss must be one of"):
        PretrainConfig(loss="huber")
    with pytest.raises(ValueError, match="imitation loss must be one of"):
        action_loss("huber", jnp.zeros((1, 2)), jnp.zeros((1, 2)))


def test_direction_needs_a_vector_action():
    env = Coverage(num_agents=2, max_steps=8, grid_size=16, map_size=8, num_features=2)
    actor = FeudalActor.from_env(jax.random.key(0), env, ACTOR)
    discrete = types.SimpleNamespace(action_space=gym.spaces.Discrete(5))
    with pytest.raises(ValueError, match="needs a vector action"):
        imitate(discrete, actor, lloyd_clairvoyant, PretrainConfig(option=COVER,
                                                                   loss="direction"))


@pytest.mark.heavy
def test_imitation_with_the_direction_loss_fits_its_expert():
    """The recipe's loss is the one imitate takes: the first step (same actor, data and
    minibatch) scores differently under each loss, and the direction fit's loss falls."""
    env = Coverage(num_agents=3, max_steps=12, grid_size=16, map_size=8, num_features=3)
    actor = FeudalActor.from_env(jax.random.key(0), env, ACTOR)
    cfg = PretrainConfig(option=COVER, episodes=2, val_episodes=1, rounds=1,
                         steps_per_round=60, evals_per_round=1, lr=0.01, loss="direction")
    result = imitate(env, actor, lloyd_clairvoyant, cfg)
    mse = imitate(env, actor, lloyd_clairvoyant,
                  dataclasses.replace(cfg, loss="mse", steps_per_round=1))
    assert abs(result.losses[0] - mse.losses[0]) > 1e-3 * mse.losses[0]
    assert np.all(np.isfinite(result.losses))
    assert np.mean(result.losses[-5:]) < 0.5 * np.mean(result.losses[:5]), result.losses[::10]
