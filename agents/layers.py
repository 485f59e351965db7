"""Small building blocks with PPO-style orthogonal initialisation.

Orthogonal weights and zero biases, with the gains of common PPO practice: sqrt(2) on
hidden layers, 0.01 on policy outputs, 1.0 on value outputs.

Initialisation runs on the host in numpy, seeded from the JAX key: drawing parameters
with ``jax.random`` compiles one small XLA program per distinct shape, which made building
an actor take most of a minute on a small CPU. Modules are therefore built eagerly (not
under ``jit``/``vmap``); their forward passes are pure JAX.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

HIDDEN_GAIN = math.sqrt(2.0)
POLICY_GAIN = 0.01
VALUE_GAIN = 1.0

_ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh, "identity": lambda x: x}

KeyLike = jax.Array | np.random.Generator


def as_rng(key: KeyLike) -> np.random.Generator:
    """A numpy generator seeded from a JAX PRNG key (typed or raw uint32), or ``key`` itself
    if it is already a generator."""
    if isinstance(key, np.random.Generator):
        return key
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.random.default_rng(np.asarray(key, dtype=np.uint32).ravel().tolist())


def orthogonal(rng: np.random.Generator, rows: int, cols: int, gain: float) -> np.ndarray:
    """A [rows, cols] float32 matrix with orthonormal rows or columns, times ``gain``.

    Gram-Schmidt (applied twice) on a Gaussian matrix, i.e. a Haar-distributed orthogonal
    factor. ``np.einsum`` keeps it off the BLAS thread pool, whose busy-waiting made
    ``np.linalg.qr`` 20x slower on a small, shared CPU.
    """
    n, m = max(rows, cols), min(rows, cols)
    a = rng.standard_normal((n, m))
    q = np.empty_like(a)
    for j in range(m):
        v = a[:, j].copy()
        for _ in range(2):
            qj = q[:, :j]
            v -= np.einsum("ij,j->i", qj, np.einsum("ij,i->j", qj, v))
        q[:, j] = v / np.sqrt(np.einsum("i,i->", v, v))
    if rows < cols:
        q = q.T
    return (gain * q).astype(np.float32)


class Linear(eqx.Module):
    """``y = W x + b`` on one sample; orthogonal ``W`` [out, in], zero ``b``."""

    weight: jax.Array
    bias: jax.Array

    def __init__(self, key: KeyLike, in_size: int, out_size: int, gain: float):
        self.weight = jnp.asarray(orthogonal(as_rng(key), out_size, in_size, gain))
        self.bias = jnp.asarray(np.zeros((out_size,), np.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        # x @ W^T, not W @ x: under vmap the batch stays the leading (row) axis of one
        # matmul, which XLA:CPU runs faster in MAPPO's train step (bench/RESULTS.md,
        # "Design choices measured")
        return x @ self.weight.T + self.bias


def gru_cell(key: KeyLike, in_size: int, hidden: int) -> eqx.nn.GRUCell:
    """Equinox's ``GRUCell`` (one sample: ``cell(x [I], h [H]) -> h [H]``) with orthogonal
    input and recurrent weights (gain 1, per gate) and zero biases, drawn on the host like
    every other layer here (see the module docstring)."""
    rng = as_rng(key)
    shape = eqx.filter_eval_shape(eqx.nn.GRUCell, in_size, hidden, key=jax.random.key(0))
    gates = lambda cols: np.concatenate([orthogonal(rng, hidden, cols, 1.0)
                                         for _ in range(3)])
    return eqx.tree_at(
        lambda c: (c.weight_ih, c.weight_hh, c.bias, c.bias_n), shape,
        (jnp.asarray(gates(in_size)), jnp.asarray(gates(hidden)),
         jnp.zeros((3 * hidden,), jnp.float32), jnp.zeros((hidden,), jnp.float32)))


class Conv2d(eqx.Module):
    """2-D convolution of one channel-first image, padding ``kernel // 2``; orthogonal
    kernel (as an [out, in * k * k] matrix), zero bias."""

    weight: jax.Array  # [out, in, k, k]
    bias: jax.Array  # [out]
    stride: int = eqx.field(static=True)

    def __init__(self, key: KeyLike, in_ch: int, out_ch: int, kernel: int, stride: int,
                 gain: float):  # fmt: skip
        w = orthogonal(as_rng(key), out_ch, in_ch * kernel * kernel, gain)
        self.weight = jnp.asarray(w.reshape(out_ch, in_ch, kernel, kernel))
        self.bias = jnp.asarray(np.zeros((out_ch,), np.float32))
        self.stride = stride

    @staticmethod
    def out_size(size: int, kernel: int, stride: int) -> int:
        pad = kernel // 2
        return (size + 2 * pad - kernel) // stride + 1

    def __call__(self, x: jax.Array) -> jax.Array:
        # Channel-last (NHWC / HWIO) inside: XLA's CPU backend runs channel-first
        # convolutions inside loop bodies (lax.scan rollouts) an order of magnitude slower
        # (jax-ml/jax#12868). Input, output and the stored kernel stay channel-first.
        y = conv_hwc(x.transpose(1, 2, 0), self.weight.transpose(2, 3, 1, 0), self.stride)
        return y.transpose(2, 0, 1) + self.bias[:, None, None]


def _conv_hwc(x: jax.Array, w: jax.Array, stride: int) -> jax.Array:
    pad = w.shape[0] // 2
    return jax.lax.conv_general_dilated(
        x[None], w, (stride, stride), [(pad, pad), (pad, pad)],
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )[0]


def _patches(x: jax.Array, k: int, stride: int, ho: int, wo: int) -> jax.Array:
    """im2col: the ``k * k`` shifted, strided views of the padded [H, W, C] image,
    as [ho * wo, k * k * C] in the (i, j, c) order of an HWIO kernel's rows."""
    pad = k // 2
    xp = jnp.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    views = [xp[i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride]
             for i in range(k) for j in range(k)]
    return jnp.concatenate(views, axis=-1).reshape(ho * wo, -1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def conv_hwc(x: jax.Array, w: jax.Array, stride: int) -> jax.Array:
    """Same-padded convolution of one [H, W, C_in] image with an HWIO kernel.

    The forward pass and the input gradient are XLA convolutions; the kernel gradient is
    an im2col matmul (patches^T @ output gradient), which XLA's CPU backend runs faster
    than the convolution it would otherwise emit for it (the PPO update's dominant cost
    with the default actor; bench/RESULTS.md, "Design choices measured").
    """
    return _conv_hwc(x, w, stride)


def _conv_hwc_fwd(x, w, stride):
    return _conv_hwc(x, w, stride), (x, w)


def _conv_hwc_bwd(stride, res, g):
    x, w = res
    k, _, _, c_out = w.shape
    ho, wo, _ = g.shape
    dw = (_patches(x, k, stride, ho, wo).T @ g.reshape(ho * wo, c_out)).reshape(w.shape)
    _, vjp_x = jax.vjp(lambda x: _conv_hwc(x, w, stride), x)
    return vjp_x(g)[0], dw


conv_hwc.defvjp(_conv_hwc_fwd, _conv_hwc_bwd)


class LayerNorm(eqx.Module):
    """LayerNorm over the last axis with a learned scale and shift."""

    scale: jax.Array
    shift: jax.Array

    def __init__(self, size: int):
        self.scale = jnp.asarray(np.ones((size,), np.float32))
        self.shift = jnp.asarray(np.zeros((size,), np.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * self.scale + self.shift


class MLP(eqx.Module):
    """Per-sample MLP: hidden layers (optionally LayerNorm-ed) with an activation, then a
    linear output layer initialised with ``out_gain``. Apply to a batch with ``jax.vmap``."""

    layers: tuple[Linear, ...]
    norms: tuple[LayerNorm, ...] | None
    activation: str = eqx.field(static=True)
    final_activation: str = eqx.field(static=True)

    def __init__(
        self,
        key: KeyLike,
        in_size: int,
        hidden: Sequence[int],
        out_size: int,
        *,
        out_gain: float,
        activation: str = "tanh",
        final_activation: str = "identity",
        layer_norm: bool = False,
    ):
        rng = as_rng(key)
        sizes = [in_size, *hidden, out_size]
        gains = [HIDDEN_GAIN] * len(hidden) + [out_gain]
        self.layers = tuple(
            Linear(rng, a, b, g) for a, b, g in zip(sizes, sizes[1:], gains, strict=False)
        )
        self.norms = tuple(LayerNorm(h) for h in hidden) if layer_norm else None
        self.activation = activation
        self.final_activation = final_activation

    @property
    def out_size(self) -> int:
        return self.layers[-1].weight.shape[0]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.from_first(self.layers[0](x))

    def from_first(self, x: jax.Array) -> jax.Array:
        """The MLP's output given its first linear layer's output ``x`` (so a caller can
        compute that layer more cheaply, e.g. sharing the part of it that many samples
        have in common)."""
        act = _ACTIVATIONS[self.activation]
        for i in range(len(self.layers) - 1):
            if i > 0:
                x = self.layers[i](x)
            if self.norms is not None:
                x = self.norms[i](x)
            x = act(x)
        if len(self.layers) > 1:
            x = self.layers[-1](x)
        return _ACTIVATIONS[self.final_activation](x)


def count_params(tree: object) -> int:
    """Number of scalars in the inexact-array (trainable) leaves of ``tree``."""
    leaves = jax.tree.leaves(eqx.filter(tree, eqx.is_inexact_array))
    return int(sum(leaf.size for leaf in leaves))
