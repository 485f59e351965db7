"""The LPAC backbone: per-agent perception, K-hop graph filter, MLP -> embedding h.

LPAC (Agarwal, Kumar et al., "LPAC: Learnable Perception-Action-Communication Loops with
Applications to Coverage Control"): a CNN reads each robot's local maps, a graph neural
network exchanges features over the communication graph, an MLP maps to the output. Here
the output is a per-agent embedding ``h`` that the selector and executor heads read.

Observation layout: a dict of per-agent arrays with the agent axis first (``{"maps":
[N, C, H, W], "vec": [N, D]}`` for the bundled envs), or one such array. Each entry gets
its own encoder, chosen from its per-agent rank: rank 3 (channel-first image) or rank 2
(single-channel image) -> CNN; rank 1 -> MLP. Encoder features are concatenated in
sorted-key order. The entries of ``envs.base.HEAD_INPUTS`` are skipped: ``OPTION_OBS``
(per-option features) is the executor's input (:class:`agents.heads.Executor`),
``SELECTOR_OBS`` the selector's, not perception.

Cost of the graph filter (N agents, F features, K hops, dense adjacency): each layer
computes ``A_norm^k X`` by K repeated products ``A_norm @ (.)``, never forming ``A^k``, so
it costs O(K N^2 F + K N F F') time and O(N^2 + K N F) memory (the [N, N] adjacency is the
largest array; for N = 256 that is 64k floats per env).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import equinox as eqx
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from agents.config import ActorConfig
from agents.layers import HIDDEN_GAIN, MLP, Conv2d, KeyLike, Linear, as_rng, orthogonal
from envs.base import HEAD_INPUTS

ARRAY_KEY = "obs"  # key used internally when the observation is a single array


def obs_shapes(spec: Any) -> dict[str, tuple[int, ...]]:
    """Per-agent observation shapes keyed by name, from a Gymnasium space (``Box`` or
    ``Dict`` of ``Box``) or from per-agent shapes (a tuple, or a dict of tuples)."""
    if isinstance(spec, gym.spaces.Dict):
        return {str(k): tuple(int(d) for d in s.shape) for k, s in spec.spaces.items()}
    if isinstance(spec, gym.spaces.Box):
        return {ARRAY_KEY: tuple(int(d) for d in spec.shape)}
    if isinstance(spec, Mapping):
        return {str(k): tuple(int(d) for d in v) for k, v in spec.items()}
    if isinstance(spec, tuple) and all(isinstance(d, int) for d in spec):
        return {ARRAY_KEY: spec}
    raise TypeError(
        "observation spec must be a gymnasium Box or Dict space, a per-agent shape tuple, "
        f"or a dict of shape tuples; got {type(spec).__name__}"
    )


def as_obs_dict(obs: Any) -> dict[str, jax.Array]:
    """The observation as a dict (a single array becomes ``{"obs": array}``)."""
    return dict(obs) if isinstance(obs, Mapping) else {ARRAY_KEY: obs}


def normalize_adjacency(adj: jax.Array) -> jax.Array:
    """Symmetric normalisation ``D^-1/2 A D^-1/2`` (no self-loops added; the k = 0 term of
    the filter carries each agent's own features). Isolated agents get a zero row."""
    adj = adj.astype(jnp.float32)
    deg_out = adj.sum(axis=1)
    deg_in = adj.sum(axis=0)
    inv_out = jnp.where(deg_out > 0, jax.lax.rsqrt(jnp.maximum(deg_out, 1e-12)), 0.0)
    inv_in = jnp.where(deg_in > 0, jax.lax.rsqrt(jnp.maximum(deg_in, 1e-12)), 0.0)
    return inv_out[:, None] * adj * inv_in[None, :]


class GraphFilter(eqx.Module):
    """One TAGConv-like layer: ``out = sum_{k=0..K} (S^k X) W_k + b`` with ``S`` the
    normalised adjacency. ``S^k X`` is built by repeated products (see module docstring)."""

    weight: jax.Array  # [K + 1, F_in, F_out]
    bias: jax.Array  # [F_out]

    def __init__(self, key: KeyLike, in_size: int, out_size: int, hops: int):
        rng = as_rng(key)
        w = [orthogonal(rng, in_size, out_size, HIDDEN_GAIN) for _ in range(hops + 1)]
        self.weight = jnp.asarray(np.stack(w))
        self.bias = jnp.asarray(np.zeros((out_size,), np.float32))

    @property
    def hops(self) -> int:
        return self.weight.shape[0] - 1

    def __call__(self, x: jax.Array, s: jax.Array) -> jax.Array:
        """``x``: [N, F_in] node features; ``s``: [N, N] normalised adjacency."""
        out = x @ self.weight[0]
        z = x
        for k in range(1, self.hops + 1):
            z = s @ z
            out = out + z @ self.weight[k]
        return out + self.bias


class CNNEncoder(eqx.Module):
    """Per-agent CNN on a channel-first image: ReLU convs, flatten, linear, ReLU."""

    convs: tuple[Conv2d, ...]
    linear: Linear
    add_channel: bool = eqx.field(static=True)

    def __init__(self, key: KeyLike, shape: tuple[int, ...], config: ActorConfig):
        rng = as_rng(key)
        self.add_channel = len(shape) == 2
        c, h, w = (1, *shape) if self.add_channel else shape
        convs = []
        k = config.cnn_kernel
        for out_c, stride in zip(config.cnn_channels, config.cnn_strides, strict=True):
            convs.append(Conv2d(rng, c, out_c, k, stride, HIDDEN_GAIN))
            c = out_c
            h, w = Conv2d.out_size(h, k, stride), Conv2d.out_size(w, k, stride)
            if h < 1 or w < 1:
                raise ValueError(
                    f"image observation of shape {shape} is too small for "
                    f"ActorConfig.cnn_strides={config.cnn_strides} / cnn_kernel={k}"
                )
        self.convs = tuple(convs)
        self.linear = Linear(rng, c * h * w, config.cnn_out, HIDDEN_GAIN)

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.add_channel:
            x = x[None]
        for conv in self.convs:
            x = jax.nn.relu(conv(x))
        return jax.nn.relu(self.linear(x.reshape(-1)))


class VectorEncoder(eqx.Module):
    """Per-agent MLP on a flat vector observation."""

    mlp: MLP

    def __init__(self, key: KeyLike, size: int, config: ActorConfig):
        self.mlp = MLP(
            key, size, config.vec_hidden, config.vec_out, out_gain=HIDDEN_GAIN,
            activation=config.activation, final_activation=config.activation,
        )  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.mlp(x)


class LPACBackbone(eqx.Module):
    """Perception (per agent) -> ``gnn_layers`` K-hop graph filters -> MLP -> h [N, E].

    ``__call__(obs, adj)``: ``obs`` leaves carry the agent axis first, ``adj`` is the dense
    [N, N] comm graph (0/1 or weighted; normalised inside). Permuting the agents and the
    adjacency consistently permutes ``h`` (the filter is permutation-equivariant). The
    final ``tanh`` keeps ``h`` bounded, so the selector's logits scale with its weights.
    """

    encoders: dict[str, CNNEncoder | VectorEncoder]
    gnn: tuple[GraphFilter, ...]
    embed: MLP

    def __init__(self, key: KeyLike, obs_spec: Any, config: ActorConfig | None = None):
        config = ActorConfig() if config is None else config
        shapes = obs_shapes(obs_spec)
        rng = as_rng(key)
        encoders: dict[str, CNNEncoder | VectorEncoder] = {}
        feat = 0
        for name in sorted(shapes):
            shape = shapes[name]
            if name in HEAD_INPUTS:  # a head's input, not perception
                continue
            if len(shape) in (2, 3):
                encoders[name] = CNNEncoder(rng, shape, config)
                feat += config.cnn_out
            elif len(shape) == 1:
                encoders[name] = VectorEncoder(rng, shape[0], config)
                feat += config.vec_out
            else:
                raise ValueError(
                    f"observation entry {name!r} has per-agent shape {shape}; expected rank 1 "
                    "(vector) or rank 2/3 (image, channel-first)"
                )
        self.encoders = encoders
        gnn = []
        for _ in range(config.gnn_layers):
            gnn.append(GraphFilter(rng, feat, config.gnn_features, config.gnn_hops))
            feat = config.gnn_features
        self.gnn = tuple(gnn)
        self.embed = MLP(
            rng, feat, config.embed_hidden, config.embed_dim,
            out_gain=HIDDEN_GAIN, activation=config.activation, final_activation="tanh",
        )  # fmt: skip

    @property
    def embed_dim(self) -> int:
        return self.embed.out_size

    def perceive(self, obs: Any) -> jax.Array:
        """Per-agent encoder features, concatenated: [N, F0]."""
        obs = {k: v for k, v in as_obs_dict(obs).items() if k not in HEAD_INPUTS}
        if set(obs) != set(self.encoders):
            raise ValueError(
                f"observation keys {sorted(obs)} do not match the backbone's "
                f"{sorted(self.encoders)}"
            )
        feats = [jax.vmap(self.encoders[k])(obs[k].astype(jnp.float32)) for k in sorted(obs)]
        return jnp.concatenate(feats, axis=-1)

    def __call__(self, obs: Any, adj: jax.Array) -> jax.Array:
        x = self.perceive(obs)
        if self.gnn:
            s = normalize_adjacency(adj)
            for layer in self.gnn:
                x = jax.nn.relu(layer(x, s))
        return jax.vmap(self.embed)(x)
