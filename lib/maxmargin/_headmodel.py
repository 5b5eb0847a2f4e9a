"""The MLP-head model's risk and gradient in p on validated arrays (:mod:`maxmargin.heads`), and
as the objective of the regularization path's solver (:mod:`maxmargin.paths`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._numerics import _softmax
from .losses import Loss
from .problem import Problem

if TYPE_CHECKING:
    from .heads import MLPHead


def _head(head, d: int):
    from .heads import MLPHead  # deferred: heads imports this module

    if isinstance(head, MLPHead):
        if head.dim != d:
            raise ValueError(f"head: expects inputs of size {head.dim}, but tokens have d={d}")
        return head
    raise TypeError(f"head: expected an MLPHead, got {type(head).__name__}")


def _head_forward(X, Y, K, head, P, loss: Loss, sets, need_grad: bool):
    """Risk (B,) and gradient (B, d) of the head model at prompts P (B, d).

    With ``sets`` (n, T) bool, attention is restricted to each set (softmax over O_i only).
    """
    n = X.shape[0]
    logits = np.einsum("ntd,bd->bnt", K, P)
    if sets is not None:
        logits = np.where(sets, logits, -np.inf)
    s = _masked_softmax(logits)  # (B, n, T)
    z = np.einsum("bnt,ntd->bnd", s, X)  # attention output X_i^T s_i
    margin = Y * head.value(z)  # (B, n)
    value = np.mean(loss.value(margin), axis=-1)
    if not need_grad:
        return value, None
    c = (loss.derivative(margin) * Y / n)[..., None] * head.grad(z)  # dL/dz_i, (B, n, d)
    # d z_i / d logit_it = s_it (x_it - z_i)
    dlogit = s * np.einsum("ntd,bnd->bnt", X, c) - s * np.einsum("bnd,bnd->bn", z, c)[..., None]
    return value, np.einsum("bnt,ntd->bd", dlogit, K)


def _masked_softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of logits with -inf at masked tokens (never a whole row);
    logits beyond float64 (+inf or NaN from K p) raise a ValueError naming p."""
    if np.isnan(logits).any() or np.isposinf(logits).any():
        raise ValueError("p: the logits k_it^T p exceed float64 (at most 1.8e308); scale p down")
    if logits.size and np.any(np.max(logits, axis=-1) == -np.inf):
        raise ValueError("p: every logit k_it^T p of a sequence is below -1.8e308 (or masked), "
                         "beyond float64; scale p down")
    with np.errstate(over="ignore"):
        return _softmax(logits)


def _head_objective(prob: Problem, head: MLPHead, loss: Loss):
    """The risk of the head model as a function for the path solver: prompts (B, d) ->
    (risks (B,), gradients (B, d)), on a validated problem with labels and a validated loss."""
    head = _head(head, prob.shape[2])
    return lambda P, need_value=True: _head_forward(prob.X, prob.Y, prob.keys, head, P, loss,
                                                    None, True)
