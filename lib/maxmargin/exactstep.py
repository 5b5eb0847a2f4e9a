"""Normalized gradient descent on (K, Q) with a step that does not underflow.

Once attention saturates, the weight of a token behind the top one by a logit gap is about
`e^(-gap)`, and the gradient is of that size. A normalized step `G / ||G||` does not depend on that size,
but the softmax weights computed from the logits (as :func:`~maxmargin.gd_KQ` does) underflow to 0
in float64 beyond a gap of about 745, and a step `G / (||G|| + eps)` shrinks once `||G|| < eps`: the
runs stop at a ceiling set by the arithmetic, not by gradient descent.

Here the weights are carried relative to the largest non-selected one: with `a_it` the logits,
`r_i` the top token of sequence i and c = max over i and `t != r_i` of `log s_it` (one number per
instance), the step uses `e^(-c)` times the gradient, whose largest term is of order one. Every
weight is formed from `log s_it = (a_it - a_ir) - log sum_u e^(a_iu - a_ir)`, which is exact to
rounding at any gap; the top token's derivative `s_ir (gamma_ir - m_i)`, `m_i` the sequence's margin, is formed as
`-s_ir sum_{t != r} s_it (gamma_it - gamma_ir)`, never by cancellation. The direction of the step
is then exact to rounding, with eps = 0, at every gap.

The loop is plain numpy over a stack of M instances (one run each), written to be read beside
the maths; it is the reference for itself and is tested against an mpmath computation of the
same step from the plain softmax.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _checks
from ._descent import _affordable_descent, _readonly, _record_count, _record_steps, _settings
from ._factors import _stacked_factors
from .keyquery import KQTrajectory
from .losses import Loss


class LogitStep(NamedTuple):
    """The scaled logit gradient of M instances (see :func:`scaled_logit_gradient`)."""
    dlogits: np.ndarray        # (M, n, T) e^(-c) dL/da_it
    scale: np.ndarray          # (M,) c, the log of the largest non-selected weight
    margin: np.ndarray         # (M, n) m_i = sum_t s_it gamma_it
    top_score: np.ndarray      # (M, n) gamma_ir, the score of the top token r_i
    offset: np.ndarray         # (M, n) m_i - gamma_ir = sum_{t != r} s_it (gamma_it - gamma_ir)
    scaled_offset: np.ndarray  # (M, n) e^(-c) (m_i - gamma_ir), exact where offset underflows


def scaled_logit_gradient(logits, gamma, loss: Loss) -> LogitStep:
    """`e^(-c) dL/da` for M instances from their logits a (M, n, T) and scores `gamma` (M, n, T),
    with c (one per instance) the log of the largest non-selected softmax weight; the weights
    are formed relative to the top token, exact to rounding at any gap. See :class:`LogitStep`."""
    M, n, T = logits.shape
    top = np.argmax(logits, axis=2)[..., None]            # r_i, (M, n, 1)
    rel = logits - np.take_along_axis(logits, top, 2)     # a_it - a_ir <= 0
    log_s = rel - np.log(np.sum(np.exp(rel), axis=2, keepdims=True))   # sum >= 1: no overflow
    is_top = np.arange(T) == top                          # (M, n, T)
    others = np.where(is_top, -np.inf, log_s)
    c = np.max(others, axis=(1, 2))                       # (M,)
    sigma = np.exp(others - c[:, None, None])             # e^(-c) s_it for t != r_i, 0 at r_i
    s = np.exp(log_s)                                     # may underflow: used in the margin only
    top_score = np.take_along_axis(gamma, top, 2)
    g_rel = gamma - top_score                             # gamma_it - gamma_ir
    offset = np.sum(np.where(is_top, 0.0, s * g_rel), axis=2, keepdims=True)
    margin = (top_score + offset)[..., 0]
    # e^(-c) s_it (gamma_it - m_i): for t != r from sigma; for r, -s_ir sum_t sigma_t g_rel_t
    scaled_offset = np.sum(sigma * g_rel, axis=2, keepdims=True)
    top_part = -np.exp(np.take_along_axis(log_s, top, 2)) * scaled_offset
    dlogits = np.where(is_top, top_part, sigma * (g_rel - offset))
    dlogits *= loss.derivative(margin)[..., None] / n     # (1/n) l'(m_i), of order one
    return LogitStep(dlogits, c, margin, top_score[..., 0], offset[..., 0], scaled_offset[..., 0])


def scaled_gradient(X, gamma, Z, K, Q, loss: Loss):
    """The W-gradient of the risk divided by its scale, for M instances.

    X (M, n, T, d) tokens, `gamma` (M, n, T) scores `Y_i v^T x_it`, Z (M, n, d) queries, K, Q
    (M, d, m) factors. Returns (G, c, margin): G (M, d, d) equal to `e^(-c) dL/dW` with `W = K Q^T`, c (M,)
    the log of the largest non-selected softmax weight of each instance, margin (M, n) the margins
    `m_i = sum_t s_it gamma_it`.
    """
    C = np.einsum("mdk,mnd->mkn", Q, Z)                   # Q^T z_i, (M, m, n)
    logits = np.einsum("mntd,mdk,mkn->mnt", X, K, C)      # x_it^T K Q^T z_i, (M, n, T)
    step = scaled_logit_gradient(logits, gamma, loss)
    A = np.einsum("mnt,mntd->mdn", step.dlogits, X)      # sum_t dlogit_it x_it, (M, d, n)
    return A @ Z, step.scale, step.margin                 # sum_i (...) z_i^T, (M, d, d)


def _unit(A: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """A (M, d, m) divided by norm (M,), 0 where the norm is 0."""
    safe = np.where(norm > 0, norm, 1.0)
    return np.where((norm > 0)[:, None, None], A / safe[:, None, None], 0.0)


def ngd_KQ_exact(X, Y, v, K0, Q0, queries, steps: int, lr: float, *,
                 loss: str | Loss = "logistic", joint: bool = False, freeze_Q: bool = False,
                 record_every: int | None = 1) -> KQTrajectory:
    """Normalized GD on (K, Q) for a stack of M instances, the step exact at every gap (eps = 0).

    Each step is `K <- K - lr dK / ||dK||_F` and `Q <- Q - lr dQ / ||dQ||_F` (`dK = G Q`, `dQ = G^T K`
    with `G = dL/dW`), or with ``joint=True`` both divided by `||(dK, dQ)||_F`, the norm of the
    whole step. The gradients are computed by :func:`scaled_gradient`, so that no weight
    underflows: the runs have no ceiling (unlike :func:`~maxmargin.gd_KQ_stack`, which with
    ``normalized=True`` computes the same steps while the gaps stay below about 700).

    Parameters
    ----------
    X, Y, v, K0, Q0, queries : as in :func:`~maxmargin.gd_KQ_stack`: (M, n, T, d), (M, n),
        (M, d) or (d,), (M, d, m) or (d, m), and (M, n, d).
    steps, lr : number of iterations (an integer >= 1) and step size (> 0).
    loss : keyword-only, a loss name or :class:`~maxmargin.Loss` (default "logistic").
    joint : keyword-only, normalize the step of (K, Q) together instead of each factor's.
    freeze_Q : keyword-only, keep Q at Q0 (from Q0 = I: normalized GD on W = K).
    record_every : keyword-only, as in :func:`~maxmargin.gd` (default 1).

    Returns
    -------
    KQTrajectory : the recorded factors (R, M, d, m) and risks (R, M); ``normalized`` True.

    Raises
    ------
    ValueError, TypeError : bad data or settings, naming the argument, as
        :func:`~maxmargin.gd_KQ_stack`; ``joint`` and ``freeze_Q`` not bools (TypeError).

    Examples
    --------
    One sequence whose second token keeps its key: the gap grows like `k^2` and passes 745,
    where softmax weights computed from the logits are 0 in float64, and the steps go on.

    >>> X = np.array([[[[1.0, 0.0], [0.0, 1.0]]]])
    >>> run = mm.exactstep.ngd_KQ_exact(X, [[1.0]], [1.0, -1.0], 0.1 * np.eye(2),
    ...                                 0.1 * np.eye(2), np.ones((1, 1, 2)), 200, 0.5,
    ...                                 record_every=100)
    >>> W = run.W[:, 0]
    >>> gaps = W[:, 0].sum(axis=1) - W[:, 1].sum(axis=1)
    >>> [int(g) for g in gaps]      # steps 0, 100, 200: growing like k^2
    [0, 4968, 19936]
    """
    X, gamma, Z, K, Q = _stacked_factors(X, Y, v, K0, Q0, queries)
    M, n, T, d = X.shape
    steps, lr, loss = _settings(steps, lr, loss)
    joint = _checks.flag(joint, "joint")
    freeze_Q = _checks.flag(freeze_Q, "freeze_Q")
    m = K.shape[2]
    _affordable_descent(steps, _record_count(steps, record_every), M,
                        n * T * d * 3 + 4 * d * d * m + n * d * d, 2 * d * m + n + 1, n * T)
    record = _record_steps(steps, record_every)
    R = len(record)
    Ks, Qs, risks = np.empty((R, M, d, m)), np.empty((R, M, d, m)), np.empty((R, M))
    r = 0
    for k in range(steps + 1):
        G, _, margin = scaled_gradient(X, gamma, Z, K, Q, loss)
        if record[r] == k:
            Ks[r], Qs[r], risks[r] = K, Q, np.mean(loss.value(margin), axis=1)
            r += 1
        if k == steps:
            break
        dK = G @ Q
        dQ = np.zeros_like(Q) if freeze_Q else np.swapaxes(G, 1, 2) @ K
        size_K, size_Q = np.linalg.norm(dK, axis=(1, 2)), np.linalg.norm(dQ, axis=(1, 2))
        if joint:
            size_K = size_Q = np.hypot(size_K, size_Q)
        K, Q = K - lr * _unit(dK, size_K), Q - lr * _unit(dQ, size_Q)
        if not (np.isfinite(K).all() and np.isfinite(Q).all()):
            raise ValueError(f"lr: the factors left float64 at step {k + 1} (lr = {lr:g}): a "
                             f"normalized step grows them by at most lr per step, so the start "
                             f"or lr is too large")
    return KQTrajectory(_readonly(Ks), _readonly(Qs), _readonly(risks), lr, True, 0.0,
                        _readonly(record))
