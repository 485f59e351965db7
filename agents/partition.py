"""The one definition of which actor leaves the selector owns.

ES flattening (``feudal_es.theta``), the masked gradient optimizer and the trainer's sync
hooks all go through :func:`selector_filter`; nothing else may decide the split. The
selector's leaves are the inexact-array leaves of ``actor.selector``; every other inexact
leaf is the executor's (backbone included). The two filters cover every inexact leaf
exactly once. :func:`es_filter` says what ES evolves: the selector, or the whole actor.
"""

from __future__ import annotations

import equinox as eqx
import jax


def selector_filter(actor: eqx.Module) -> eqx.Module:
    """A pytree of bools shaped like ``actor``: True exactly on the selector's inexact
    array leaves (those of ``actor.selector``; of a ``GroupedActor``, every group's)."""
    spec = jax.tree.map(lambda _: False, actor)
    if hasattr(actor, "groups") and hasattr(actor, "actors"):  # agents.grouped.GroupedActor
        # a group acting at random (another is the team) has no selector ES evolves
        return eqx.tree_at(lambda a: a.actors, spec, tuple(
            jax.tree.map(lambda _: False, a) if how else selector_filter(a)
            for a, how in zip(actor.actors, actor.fixed, strict=True)))
    return eqx.tree_at(
        lambda a: a.selector, spec, jax.tree.map(eqx.is_inexact_array, actor.selector)
    )


def executor_filter(actor: eqx.Module) -> eqx.Module:
    """The complement over inexact leaves: True on every inexact array leaf that is not
    the selector's. Use it as the gradient side's trainable filter
    (``eqx.partition(actor, executor_filter(actor))``)."""
    inexact = jax.tree.map(eqx.is_inexact_array, actor)
    return jax.tree.map(lambda i, s: i and not s, inexact, selector_filter(actor))


ES_PARAMS = ("selector", "actor")  # what ES may evolve: the selector, or the whole actor


def es_filter(actor: eqx.Module, params: str = "selector") -> eqx.Module:
    """The leaves ES evolves: the selector's (:func:`selector_filter`), or with
    ``params="actor"`` every inexact leaf of the actor (whole-policy ES, MERL's EA-only
    ablation)."""
    if params == "selector":
        return selector_filter(actor)
    if params == "actor":
        return jax.tree.map(eqx.is_inexact_array, actor)
    raise ValueError(f"params must be one of {ES_PARAMS}, got {params!r}")


