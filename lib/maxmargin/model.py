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

import numpy as np
import torch

from . import _checks, _kernels
from .losses import Loss, get_loss


def softmax(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis`` (max-shifted, so no overflow for huge logits)."""
    a = np.asarray(a, dtype=np.float64)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def keys(X, W=None) -> np.ndarray:
    """Keys k_it = W^T x_it, shape (n, T, d). With ``W=None`` the keys are the tokens."""
    X = _checks.tokens(X)
    return _kernels.keys(X, _checks.key_matrix(W, X.shape[2]))


def logits(X, p, W=None) -> np.ndarray:
    """Attention logits x_it^T W p, shape (..., n, T)."""
    K = keys(X, W)
    p = _checks.batched_vector(p, K.shape[2], "p")
    return _kernels.unbatch(_kernels.logits(_kernels.tensor(K), _kernels.batch(p)), p.shape[:-1])


def attention(X, p, W=None) -> np.ndarray:
    """Attention weights s_i = softmax(X_i W p), shape (..., n, T)."""
    K = keys(X, W)
    return _attention(K, _checks.batched_vector(p, K.shape[2], "p"))


def scores(X, Y, v) -> np.ndarray:
    """Token scores gamma_it = Y_i v^T x_it, shape (n, T); (..., n, T) for batched v (..., d)."""
    X = _checks.tokens(X)
    Y = _checks.labels(Y, X.shape[0])
    v = _checks.batched_vector(v, X.shape[2], "v")
    return _kernels.scores(X, Y, v)


def predict(X, v, p, W=None) -> np.ndarray:
    """Model output f(X_i) = v^T X_i^T softmax(X_i W p), shape (..., n)."""
    X = _checks.tokens(X)
    v = _checks.vector(v, X.shape[2], "v")
    K = _kernels.keys(X, _checks.key_matrix(W, X.shape[2]))
    s = _attention(K, _checks.batched_vector(p, X.shape[2], "p"))
    return np.sum(s * (X @ v), axis=-1)


def risk(X, Y, v, p, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Empirical risk L(p) = (1/n) sum_i loss(Y_i f(X_i)), shape (...)."""
    _, _, K, gamma, P, loss, lead = _prepare(X, Y, v, p, W, loss)
    margin, _ = _kernels.margins(_kernels.attention_from_keys(K, P), gamma)
    return np.mean(loss.value(margin.numpy()), axis=0).reshape(lead)


def risk_grad(X, Y, v, p, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in p, shape (..., d).

    grad_p L = (1/n) sum_i l'(Y_i f_i) W^T X_i^T (diag(s_i) - s_i s_i^T) gamma_i.
    """
    _, _, K, gamma, P, loss, lead = _prepare(X, Y, v, p, W, loss)
    s = _kernels.attention_from_keys(K, P)
    margin, deviation = _kernels.margins(s, gamma)
    grad = _kernels.contract_tokens(_kernels.logit_grad(s, deviation, margin, loss, out=s), K)
    return grad.T.numpy().reshape(lead + (K.shape[2],))


def risk_grad_v(X, Y, v, p, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in v, shape (..., d): (1/n) sum_i l'(Y_i f_i) Y_i X_i^T s_i."""
    X, Y, K, gamma, P, loss, lead = _prepare(X, Y, v, p, W, loss)
    s = _kernels.attention_from_keys(K, P)
    Y = _kernels.tensor(Y)
    weight = loss.torch_derivative(_kernels.margins(s, gamma)[0]) * (Y / Y.shape[0])[:, None]
    grad = _kernels.contract_tokens(s * weight[:, None, :], _kernels.tensor(X))
    return grad.T.numpy().reshape(lead + (K.shape[2],))


def self_attention_logits(X, W, queries) -> np.ndarray:
    """Logits x_it^T W z_i with one query z_i per sequence, shape (..., n, T).

    ``W`` is (..., d, d); ``queries`` is (n, d), or (d,) for one shared query (the prompt p).
    """
    X = _checks.tokens(X)
    n, _, d = X.shape
    W = _checks.batched_key_matrix(W, d)
    return _kernels.self_attention_logits(X, W, _checks.queries(queries, n, d))


def risk_W(X, Y, v, W, queries, loss: str | Loss = "logistic") -> np.ndarray:
    """Risk as a function of the key-query matrix W (queries fixed), shape (...)."""
    X = _checks.tokens(X)
    n, _, d = X.shape
    gamma = _kernels.scores(X, _checks.labels(Y, n), _checks.batched_vector(v, d, "v"))
    W = _checks.batched_key_matrix(W, d)
    s = softmax(_kernels.self_attention_logits(X, W, _checks.queries(queries, n, d)))
    return np.mean(get_loss(loss).value(np.sum(s * gamma, axis=-1)), axis=-1)


def risk_grad_W(X, Y, v, W, queries, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in W, shape (..., d, d): sum_i sum_t c_it x_it z_i^T.

    c_it is the gradient in the logits. With one shared query p the gradient is rank one,
    g p^T, where g is the gradient in u = W p.
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    W = _checks.batched_key_matrix(W, d)
    lead = W.shape[:-2]
    gamma = _kernels.scores(X, _checks.labels(Y, n), _checks.batched_vector(v, d, "v"))
    Z = _checks.queries(queries, n, d)
    s = softmax(_kernels.self_attention_logits(X, W, Z)).reshape((-1, n, T))
    s = _kernels.tensor(np.moveaxis(s, 0, -1))
    margin, deviation = _kernels.margins(s, _kernels.tensor(gamma[..., None]))
    dlogits = _kernels.logit_grad(s, deviation, margin, get_loss(loss))
    grad = torch.einsum("ntb,ntd,ne->bde", dlogits, _kernels.tensor(X), _kernels.tensor(Z))
    return grad.numpy().reshape(lead + (d, d))


def optimal_risk(X, Y, v, loss: str | Loss = "logistic") -> float:
    """The lower bound L* = (1/n) sum_i loss(max_t gamma_it) of the risk at every p.

    L* is the infimum of the risk when ATT-SVM(opt) is feasible (some p ranks every optimal token
    strictly first; unique optimal tokens, strictly decreasing continuous loss), and then it is
    approached only as ||p|| -> inf and reached by no finite p. Otherwise the infimum is strictly
    larger than L* (e.g. when an optimal key lies in the convex hull of its sequence's other keys).
    """
    gamma = scores(X, Y, v)
    return float(np.mean(get_loss(loss).value(gamma.max(axis=-1))))


# ----------------------------------------------------------------------------------------------
# The excess risk L(p) - L* over families of prompts
# ----------------------------------------------------------------------------------------------


def excess_risk(X, Y, v, p, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Excess risk L(p) - L* (see :func:`optimal_risk`), shape (...) for p of shape (..., d)."""
    return risk(X, Y, v, p, W, loss) - optimal_risk(X, Y, v, loss)


def excess_risk_on_plane(X, Y, v, W=None, loss: str | Loss = "logistic",
                         extent=(-4.0, 8.0, -3.0, 7.0), resolution: int = 161):
    """The excess risk L(p) - L* over a grid of prompts in the plane of p's first two coordinates.

    The other coordinates of p are 0. ``extent`` is (p1_min, p1_max, p2_min, p2_max).
    Returns (p1 (r,), p2 (r,), gap (r, r)) with gap[j, k] at p = (p1[k], p2[j], 0, ...).
    """
    X = _plane_tokens(X)
    extent = np.asarray(extent, dtype=float)
    if extent.shape != (4,) or not np.all(np.isfinite(extent)) or extent[0] >= extent[1] \
            or extent[2] >= extent[3]:
        raise ValueError(f"extent: expected finite (p1_min, p1_max, p2_min, p2_max) with min < max, "
                         f"got {extent.tolist()}")
    resolution = _checks.positive_int(resolution, "resolution", minimum=2)
    p1 = np.linspace(extent[0], extent[1], resolution)
    p2 = np.linspace(extent[2], extent[3], resolution)
    P = np.zeros((resolution, resolution, X.shape[2]))
    P[..., 0], P[..., 1] = np.meshgrid(p1, p2)
    return p1, p2, excess_risk(X, Y, v, P, W, loss)


def excess_risk_on_rays(X, Y, v, directions, W=None, radii=None, loss: str | Loss = "logistic"):
    """Excess risk L(R u) - L* along rays R u, u = direction / ||direction||.

    directions : (k, d) non-zero directions; radii : (m,) values of R, default 81 in [0, 20].
    Returns (radii (m,), gaps (k, m)).
    """
    U = np.asarray(directions, dtype=float)
    if U.ndim != 2:
        raise ValueError(f"directions: expected shape (k, d), got {U.shape}")
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("directions: every direction must be non-zero")
    radii = np.linspace(0.0, 20.0, 81) if radii is None else np.asarray(radii, dtype=float)
    return radii, excess_risk(X, Y, v, radii[None, :, None] * (U / norms)[:, None, :], W, loss)


def excess_risk_on_circle(X, Y, v, R: float, W=None, loss: str | Loss = "logistic", num: int = 721):
    """Excess risk L(R u) - L* on the circle of radius R in the (p1, p2) plane (p3, ... = 0).

    Returns (angles in degrees (num,) from -180 to 180, excess risk (num,)); the paper's
    instances attend to the first two coordinates, so this circle holds every prompt of norm R
    that matters. The best direction on the circle is ``angles[np.argmin(excess)]``.
    """
    X = _plane_tokens(X)
    R = _checks.positive_float(R, "R")
    num = _checks.positive_int(num, "num", minimum=2)
    theta = np.linspace(-180.0, 180.0, num)
    ring = np.zeros((num, X.shape[2]))
    ring[:, 0], ring[:, 1] = R * np.cos(np.radians(theta)), R * np.sin(np.radians(theta))
    return theta, excess_risk(X, Y, v, ring, W, loss)


# ----------------------------------------------------------------------------------------------
# Validation shared by the functions above
# ----------------------------------------------------------------------------------------------


def _attention(K: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Attention weights (..., n, T) from validated keys (n, T, d) and prompts (..., d)."""
    s = _kernels.attention_from_keys(_kernels.tensor(K), _kernels.batch(p))
    return _kernels.unbatch(s, p.shape[:-1])


def _prepare(X, Y, v, p, W, loss):
    """Validate once; return X, Y, keys (n, T, d) and scores (n, T, 1) and prompts (d, B) as
    tensors, the loss, and p's batch shape."""
    X = _checks.tokens(X)
    n, _, d = X.shape
    v = _checks.vector(v, d, "v")
    Y = _checks.labels(Y, n)
    gamma = _kernels.scores(X, Y, v)
    p = _checks.batched_vector(p, d, "p")
    K = _kernels.keys(X, _checks.key_matrix(W, d))
    return X, Y, _kernels.tensor(K), _kernels.tensor(gamma[..., None]), _kernels.batch(p), \
        get_loss(loss), p.shape[:-1]


def _plane_tokens(X) -> np.ndarray:
    """Tokens whose prompts have a (p1, p2) plane, i.e. d >= 2."""
    X = _checks.tokens(X)
    if X.shape[2] < 2:
        raise ValueError(f"X: the prompt plane needs d >= 2, got d={X.shape[2]}")
    return X
