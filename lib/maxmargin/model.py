"""The prompt-attention model f(X) = <X v, softmax(X W p)>, its risk and analytic gradients.

Shapes: ``X`` is (n, T, d), ``Y`` is (n,) in {-1, +1}, ``v`` is (d,), ``W`` is (d, d) or ``None``
(the identity), ``p`` is (..., d) with optional leading batch axes that every output keeps.

The logit of token t in sequence i is ``x_it^T W p = k_it^T p`` with key ``k_it = W^T x_it``; the
token score is ``gamma_it = Y_i v^T x_it``, and ``Y_i f(X_i) = sum_t s_it gamma_it``.

The excess risk L(p) - L* measures how far a prompt is from the risk's lower bound L*; it is
evaluated here over the families of prompts the book draws: a grid in the (p1, p2) plane, rays
R u, and the circle of radius R in that plane.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from . import _checks, _kernels
from .losses import Loss, get_loss, mean_loss
from .problem import Problem, exponents as _exponents, keyed, problem, scores_of as _scores


def softmax(a, *, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis`` (max-shifted, so no overflow for huge logits).

    A logit of -inf is a masked token (weight 0); NaN, +inf, or a slice masked entirely raise a
    ValueError naming ``a``.
    """
    a = _checks.as_float_array(a, "a")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis: expected an axis of an array with {a.ndim} dimensions, got {axis!r}")
    if not np.isfinite(a).all():
        _checks.finite(np.where(a == -np.inf, 0.0, a), "a")  # names the first NaN or +inf
        if a.size and np.any(np.max(a, axis=axis) == -np.inf):
            raise ValueError("a: a slice along axis has every logit -inf (nothing to attend to)")
    with np.errstate(over="ignore"):  # a difference beyond float64 is -inf, whose exp is 0
        return _softmax(a, axis)


def _softmax(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax of validated logits along ``axis``."""
    a = np.asarray(a, dtype=np.float64)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def keys(X, *, W=None) -> np.ndarray:
    """Keys k_it = W^T x_it, shape (n, T, d). With ``W=None`` the keys are the tokens."""
    return keyed(X, W).keys


def logits(X, p, *, W=None) -> np.ndarray:
    """Attention logits x_it^T W p, shape (..., n, T)."""
    K = keyed(X, W).keys
    p = _checks.batched_vector(p, K.shape[2], "p")
    out = _kernels.unbatch(_kernels.logits(_kernels.tensor(K), _kernels.batch(p)), p.shape[:-1])
    if not np.all(np.isfinite(out)):
        size = _log10_bound(K, p)
        raise ValueError(f"p: the logits x^T W p reach about 10^{size:.0f}, beyond float64 "
                         f"(at most 1.8e308); attention, risk and gradients stay finite there, "
                         f"the logits themselves cannot be represented")
    return out


def attention(X, p, *, W=None) -> np.ndarray:
    """Attention weights s_i = softmax(X_i W p), shape (..., n, T)."""
    K = keyed(X, W).keys
    p = _checks.batched_vector(p, K.shape[2], "p")
    return _kernels.unbatch(_attention(K, p.reshape(-1, K.shape[2])), p.shape[:-1])


def scores(X, Y, v) -> np.ndarray:
    """Token scores gamma_it = Y_i v^T x_it, shape (n, T); (..., n, T) for batched v (..., d)."""
    prob = keyed(X)
    Y = _checks.labels(Y, prob.shape[0])
    return _scores(prob.X, Y, _checks.batched_vector(v, prob.shape[2], "v"))


def predict(X, v, p, *, W=None) -> np.ndarray:
    """Model output f(X_i) = v^T X_i^T softmax(X_i W p), shape (..., n)."""
    prob = keyed(X, W)
    d = prob.shape[2]
    values = _scores(prob.X, np.ones(prob.shape[0]), _checks.vector(v, d, "v"))  # v^T x_it
    p = _checks.batched_vector(p, d, "p")
    s = _kernels.unbatch(_attention(prob.keys, p.reshape(-1, d)), p.shape[:-1])
    return np.sum(s * values, axis=-1)


def risk(X, Y, v, p, *, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Empirical risk L(p) = (1/n) sum_i loss(Y_i f(X_i)), shape (...).

    Finite whenever the risk is representable in float64 (huge prompts included); a risk beyond
    float64 (e.g. the exponential loss at margins below -710) raises a ValueError naming ``v``.
    """
    prob, P, lead = _prepare(X, Y, v, p, W)
    return _risk(prob, P, get_loss(loss)).reshape(lead)


def risk_grad(X, Y, v, p, *, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in p, shape (..., d).

    grad_p L = (1/n) sum_i l'(Y_i f_i) W^T X_i^T (diag(s_i) - s_i s_i^T) gamma_i.
    """
    prob, P, lead = _prepare(X, Y, v, p, W)
    return _risk_grad(prob, P, get_loss(loss)).reshape(lead + (P.shape[1],))


def risk_grad_v(X, Y, v, p, *, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in v, shape (..., d): (1/n) sum_i l'(Y_i f_i) Y_i X_i^T s_i."""
    prob, P, lead = _prepare(X, Y, v, p, W)
    loss = get_loss(loss)
    s, margin, _, scaled, log_factor = _forward(prob, P, loss)
    Y = _kernels.tensor(prob.Y)
    weight = scaled.torch_derivative(margin) * (Y / Y.shape[0])[:, None]
    grad = _kernels.contract_tokens(s * weight[:, None, :], _kernels.tensor(prob.X))
    return _rescaled(grad, log_factor, loss).T.reshape(lead + (P.shape[1],))


def _forward(prob: Problem, P: np.ndarray, loss: Loss):
    """What both risk gradients start from, at validated prompts P (B, d): attention s
    (n, T, B), margins (n, B), deviations gamma_it - margin (n, T, B), and the loss whose
    derivative is rescaled by exp(-log_factor) where l' itself overflows (see _slope_scaled)."""
    s = _attention(prob.keys, P)
    margin, deviation = _kernels.margins(s, _kernels.tensor(prob.scores[..., None]))
    scaled, log_factor = _slope_scaled(loss, margin)
    return s, margin, deviation, scaled, log_factor


def _risk(prob: Problem, P: np.ndarray, loss: Loss) -> np.ndarray:
    """L(p) (B,) at validated prompts P (B, d) of a validated problem with a head."""
    margin, _ = _kernels.margins(_attention(prob.keys, P), _kernels.tensor(prob.scores[..., None]))
    return mean_loss(loss, margin.numpy(), axis=0)


def _risk_grad(prob: Problem, P: np.ndarray, loss: Loss) -> np.ndarray:
    """grad_p L (B, d) at validated prompts P (B, d) of a validated problem with a head."""
    s, margin, deviation, scaled, log_factor = _forward(prob, P, loss)
    grad = _kernels.contract_tokens(_kernels.logit_grad(s, deviation, margin, scaled, out=s),
                                    _kernels.tensor(prob.keys))
    return _rescaled(grad, log_factor, loss).T


def self_attention_logits(X, W, queries) -> np.ndarray:
    """Logits x_it^T W z_i with one query z_i per sequence, shape (..., n, T).

    ``W`` is (..., d, d); ``queries`` is (n, d), or (d,) for one shared query (the prompt p).
    """
    X = _checks.tokens(X)
    n, _, d = X.shape
    W = _checks.batched_key_matrix(W, d)
    with np.errstate(over="ignore", invalid="ignore"):
        out = _kernels.self_attention_logits(X, W, _checks.queries(queries, n, d))
    if not np.all(np.isfinite(out)):
        raise ValueError("W: the logits x_it^T W z_i exceed float64 (at most 1.8e308); risk_W "
                         "and risk_grad_W stay finite there, the logits themselves cannot be "
                         "represented")
    return out


def risk_W(X, Y, v, W, queries, *, loss: str | Loss = "logistic") -> np.ndarray:
    """Risk as a function of the key-query matrix W (queries fixed), shape (...)."""
    X = _checks.tokens(X)
    n, _, d = X.shape
    gamma = _scores(X, _checks.labels(Y, n), _checks.batched_vector(v, d, "v"))
    W = _checks.batched_key_matrix(W, d)
    s = _self_attention(X, W, _checks.queries(queries, n, d))
    return mean_loss(get_loss(loss), np.sum(s * gamma, axis=-1), axis=-1)


def risk_grad_W(X, Y, v, W, queries, *, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in W, shape (..., d, d): sum_i sum_t c_it x_it z_i^T.

    c_it is the gradient in the logits. With one shared query p the gradient is rank one,
    g p^T, where g is the gradient in u = W p.
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    W = _checks.batched_key_matrix(W, d)
    lead = W.shape[:-2]
    gamma = _scores(X, _checks.labels(Y, n), _checks.batched_vector(v, d, "v"))
    Z = _checks.queries(queries, n, d)
    loss = get_loss(loss)
    s = _self_attention(X, W, Z).reshape((-1, n, T))
    s = _kernels.tensor(np.moveaxis(s, 0, -1))
    margin, deviation = _kernels.margins(s, _kernels.tensor(gamma[..., None]))
    scaled, log_factor = _slope_scaled(loss, margin)
    dlogits = _kernels.logit_grad(s, deviation, margin, scaled)
    grad = torch.einsum("ntb,ntd,ne->dbe", dlogits, _kernels.tensor(X), _kernels.tensor(Z))
    grad = _rescaled(grad.reshape(d, -1), log_factor.repeat(d) if log_factor is not None
                     else None, loss)  # columns (b, e) share run b's factor
    return np.moveaxis(grad.reshape(d, -1, d), 0, 1).reshape(lead + (d, d))


def optimal_risk(X, Y, v, *, loss: str | Loss = "logistic") -> float:
    """The lower bound L* = (1/n) sum_i loss(max_t gamma_it) of the risk at every p.

    L* is the infimum of the risk when ATT-SVM(opt) is feasible (some p ranks every optimal token
    strictly first; unique optimal tokens, strictly decreasing continuous loss), and then it is
    approached only as ||p|| -> inf and reached by no finite p. Otherwise the infimum is strictly
    larger than L* (e.g. when an optimal key lies in the convex hull of its sequence's other keys).
    """
    return _optimal_risk(problem(X, Y, v).scores, get_loss(loss))


def _optimal_risk(gamma: np.ndarray, loss: Loss) -> float:
    """L* of validated scores (n, T)."""
    return float(mean_loss(loss, gamma.max(axis=-1), axis=0))


# ----------------------------------------------------------------------------------------------
# The excess risk L(p) - L* over families of prompts
# ----------------------------------------------------------------------------------------------


def excess_risk(X, Y, v, p, *, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Excess risk L(p) - L* (see :func:`optimal_risk`), shape (...) for p of shape (..., d)."""
    prob, P, lead = _prepare(X, Y, v, p, W)
    return _excess_risk(prob, P, get_loss(loss)).reshape(lead)


def _excess_risk(prob: Problem, P: np.ndarray, loss: Loss) -> np.ndarray:
    """L(p) - L* (B,) at validated prompts P (B, d)."""
    return _risk(prob, P, loss) - _optimal_risk(prob.scores, loss)


# ----------------------------------------------------------------------------------------------
# Validation shared by the functions above
# ----------------------------------------------------------------------------------------------


# Logits below 2**SAFE_EXPONENT in size are computed directly; beyond, attention is computed
# from logits scaled by exact powers of two (softmax is shift-invariant, but the products K p
# themselves would overflow).
SAFE_EXPONENT = 1000


def _log10_bound(K: np.ndarray, p: np.ndarray) -> float:
    """log10 of a bound on |k^T p|, without overflow."""
    e = int(_exponents(K, None)) + int(np.max(_exponents(p, -1), initial=0))
    return (e + np.log2(K.shape[-1])) * np.log10(2.0)


def _attention(K: np.ndarray, P: np.ndarray) -> torch.Tensor:
    """Attention weights (n, T, B) from validated keys K (n, T, d) and prompts P (B, d).

    Finite for every finite K and P: when the logits K p could exceed 2**SAFE_EXPONENT, K and
    each prompt are divided by powers of two (exact), the scaled logits b are shifted by their
    maximum, and exp(2**e (b - max b)) underflows to 0 where the true weight does.
    """
    eK = int(_exponents(K, None))
    eP = _exponents(P, 1)
    if eK + int(eP.max(initial=0)) + int(np.ceil(np.log2(K.shape[2]))) <= SAFE_EXPONENT:
        return _kernels.attention_from_keys(_kernels.tensor(K), _kernels.tensor(P.T))
    b = np.einsum("ntd,bd->ntb", np.ldexp(K, -eK), np.ldexp(P, -eP[:, None]))
    return torch.from_numpy(_scaled_softmax(b, eK + eP, axis=1))


def _scaled_softmax(b: np.ndarray, exponent, axis: int) -> np.ndarray:
    """softmax along ``axis`` of the logits b * 2**exponent (b of moderate size, exponent
    integers broadcasting against b), without forming the logits."""
    with np.errstate(over="ignore", under="ignore"):
        z = np.ldexp(b - b.max(axis=axis, keepdims=True), exponent)
    w = np.exp(z)
    return w / w.sum(axis=axis, keepdims=True)


def _self_attention(X: np.ndarray, W: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """softmax over tokens of x_it^T W z_i, shape (..., n, T), finite for every finite input
    (the same power-of-two scaling as :func:`_attention`, per W of the batch and per query)."""
    eX = int(_exponents(X, None))
    eW = _exponents(W, (-2, -1))
    eZ = _exponents(Z, 1)
    margin = 2 * int(np.ceil(np.log2(X.shape[2])))
    if eX + int(np.max(eW, initial=0)) + int(eZ.max(initial=0)) + margin <= SAFE_EXPONENT:
        return _softmax(_kernels.self_attention_logits(X, W, Z))
    b = _kernels.self_attention_logits(np.ldexp(X, -eX), np.ldexp(W, -eW[..., None, None]),
                                       np.ldexp(Z, -eZ[:, None]))
    return _scaled_softmax(b, eX + eW[..., None, None] + eZ[:, None], axis=-1)


def _slope_scaled(loss: Loss, margin: torch.Tensor):
    """(loss, log_factor): the loss to differentiate with, and None; or, when l'(margin)
    overflows, a copy whose derivative is l'(z) / exp(m_b) with m_b = max_i log(-l'(z_ib)) per
    run b, and m (B,), by which the gradient must be multiplied back (:func:`_rescaled`)."""
    slope = loss.torch_derivative(margin)
    if bool(torch.all(torch.isfinite(slope))):
        return loss, None
    if loss.log_slope is None:
        raise ValueError(f"v: the slope of the {loss.name} loss overflows float64 at these "
                         f"margins; scale v or X down")
    top = np.max(loss.log_slope(margin.numpy()), axis=0)

    def derivative(z: torch.Tensor) -> torch.Tensor:
        return -torch.from_numpy(np.exp(loss.log_slope(z.numpy()) - top))

    return replace(loss, torch_derivative=derivative), top


def _rescaled(grad: torch.Tensor, log_factor, loss: Loss) -> np.ndarray:
    """The gradient (d, B) times exp(log_factor) (B,) per column, refused beyond float64."""
    g = grad.numpy()
    if log_factor is not None:
        with np.errstate(divide="ignore", over="ignore"):
            g = np.sign(g) * np.exp(np.log(np.abs(g)) + log_factor)
    if not np.all(np.isfinite(g)):
        scale = "" if log_factor is None else \
            f" (the loss's slope reaches about 10^{float(np.max(log_factor)) / np.log(10.0):.0f})"
        raise ValueError(f"v: with the {loss.name} loss the gradient exceeds float64 (at most "
                         f"1.8e308){scale}; scale v or X down, or use loss='logistic'")
    return g


def _prepare(X, Y, v, p, W):
    """Validate once: the problem (with its head) and the prompts p as (B, d), with p's batch
    shape."""
    prob = problem(X, Y, v, W)
    p = _checks.batched_vector(p, prob.shape[2], "p")
    return prob, p.reshape(-1, prob.shape[2]), p.shape[:-1]


