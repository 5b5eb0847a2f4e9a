"""The model's numerics on a validated problem (:class:`~maxmargin.problem.Problem`) and prompts
P (B, d): attention finite at every logit scale, the risk, its gradient in p (with a loss slope
that overflows rescaled), the optimal tokens and risk L*, and the excess risk accurate where
L(p) and L* agree in every digit. The public functions of :mod:`maxmargin.model` (and
:mod:`maxmargin.optimality`) validate their arguments and call these.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from . import _kernels
from .losses import LOSSES, Loss, mean_loss
from .problem import Problem, exponents as _exponents, tie_tolerances


def _softmax(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax of validated logits along ``axis``."""
    a = np.asarray(a, dtype=np.float64)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


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


def _optimal_risk(gamma: np.ndarray, loss: Loss) -> float:
    """L* of validated scores (n, T)."""
    return float(mean_loss(loss, gamma.max(axis=-1), axis=0))


def _excess_risk(prob: Problem, P: np.ndarray, loss: Loss) -> np.ndarray:
    """L(p) - L* (B,) at validated prompts P (B, d), to a relative accuracy of a few eps for the
    built-in losses even where L(p) and L* agree in every digit.

    With z*_i = max_t gamma_it the deficit of sequence i is delta_i = z*_i - z_i =
    sum_t s_it (z*_i - gamma_it), a sum of non-negative terms (accurate even when the weights
    off the optimum are 1e-300), and its excess l(z*_i - delta_i) - l(z*_i) is the loss's own
    ``excess(delta, z*)`` (no subtraction, see :class:`~maxmargin.losses.Loss`) where
    delta_i <= 1. Elsewhere (delta > 1, where the two values differ by a factor of about e at
    least, or a loss without an excess form, :func:`_excess_form`) it is the difference
    L(p) - L*, which also raises the errors of :func:`risk` when a risk leaves float64."""
    s = _attention(prob.keys, P)
    margin, _ = _kernels.margins(s, _kernels.tensor(prob.scores[..., None]))
    plain = mean_loss(loss, margin.numpy(), axis=0) - _optimal_risk(prob.scores, loss)
    form = _excess_form(loss)
    if form is None:
        return plain
    gamma = prob.scores
    top = gamma.max(axis=1)
    delta = np.einsum("ntb,nt->nb", s.numpy(), top[:, None] - gamma)  # (n, B), >= 0
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        small = form(np.minimum(delta, 1.0), top[:, None])
        gaps = np.where(delta <= 1.0, small, loss.value(top[:, None] - delta)
                        - loss.value(top[:, None]))
        accurate = np.mean(gaps, axis=0)
    return np.where(np.isfinite(accurate), accurate, plain)


def _excess_form(loss: Loss):
    """``loss.excess``, or None where it is not this loss's: a built-in's excess form on a loss
    with other formulas (``dataclasses.replace`` keeps the field when it swaps the value)."""
    for builtin in LOSSES.values():
        if loss.excess is builtin.excess and not builtin.same_function(loss):
            return None
    return loss.excess


# Logits below 2**SAFE_EXPONENT in size are computed directly; beyond, attention is computed
# from logits scaled by exact powers of two (softmax is shift-invariant, but the products K p
# themselves would overflow).
SAFE_EXPONENT = 1000


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


def _optimal_indices(prob: Problem) -> np.ndarray:
    """:func:`optimal_indices` of a validated problem with a head (its scores (n, T))."""
    gamma = prob.scores
    top = np.sort(gamma, axis=1)[:, -2:]
    tied = top[:, 1] - top[:, 0] <= tie_tolerances(prob)
    if np.any(tied):
        i = int(np.argmax(tied))
        raise ValueError(f"X, Y, v: sequence {i} has two tokens tied for the highest score "
                         f"{top[i, 1]:.6g}; the optimal token is not unique")
    return np.argmax(gamma, axis=1)
