"""vmap rules for attnlib's autograd functions: a vmapped axis becomes one more batch axis.

Every path takes any number of leading batch axes ``(..., H, L, E)``, so an
autograd function's vmap rule moves the vmapped axis of each input to the
front, where it is a batch axis like any other, runs the function once on the
whole batch, and hands the outputs back with the axis in front.
"""
from __future__ import annotations

import dataclasses


from .problem import AttentionProblem


def batch_first(x, dim, size: int, ndim: int):
    """A vmapped tensor as one more leading batch axis: ``x``'s vmapped axis ``dim`` first
    (an unmapped ``x`` expanded, a view), then singleton axes up to ``ndim`` axes per element.

    attnlib's paths take any number of leading batch axes, so vmap over one becomes a batch.
    """
    if x is None:
        return None
    x = x.expand(size, *x.shape) if dim is None else x.movedim(dim, 0)
    return x[(slice(None),) + (None,) * (ndim - (x.ndim - 1))]


def vmapped_problem(problem: AttentionProblem, info, in_dims, query, key, value, mask):
    """The problem of a vmapped call, each input with the vmapped axis as a leading batch axis.

    Inputs without a head axis (2-D per element) get one, so the new axis is a batch axis.
    """
    if problem.sinks is not None and in_dims[3] is not None:
        raise ValueError("vmap over sinks is not supported: sinks (Hq,) are shared by every batch element")
    ndim = max(query.ndim - (in_dims[0] is not None), 3)
    query, key, value = (batch_first(x, d, info.batch_size, ndim)
                         for x, d in zip((query, key, value), in_dims[:3]))
    if mask is not None:
        mask = batch_first(mask, in_dims[4], info.batch_size, ndim)
    return dataclasses.replace(problem, query=query, key=key, value=value, attn_mask=mask)
