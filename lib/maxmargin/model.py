"""The prompt-attention model f(X) = <X v, softmax(X W p)>, its risk and analytic gradients.

Shapes: ``X`` is (n, T, d), ``Y`` is (n,) in {-1, +1}, ``v`` is (d,), ``W`` is (d, d) or ``None``
(the identity), ``p`` is (..., d) with optional leading batch axes that every output keeps.

The logit of token t in sequence i is ``x_it^T W p = k_it^T p`` with key ``k_it = W^T x_it``; the
token score is ``gamma_it = Y_i v^T x_it``, and ``Y_i f(X_i) = sum_t s_it gamma_it``.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from . import _checks
from .losses import Loss, get_loss


def softmax(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis`` (max-shifted, so no overflow for huge logits)."""
    a = np.asarray(a, dtype=np.float64)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def keys(X, W=None) -> np.ndarray:
    """Keys k_it = W^T x_it, shape (n, T, d). With ``W=None`` the keys are the tokens."""
    X = _checks.tokens(X)
    W = _checks.key_matrix(W, X.shape[2])
    return X if W is None else X @ W


def logits(X, p, W=None) -> np.ndarray:
    """Attention logits x_it^T W p, shape (..., n, T)."""
    K = keys(X, W)
    p = _checks.batched_vector(p, K.shape[2], "p")
    return _unbatch(_logits(_tensor(K), _batch(p)), p.shape[:-1])


def attention(X, p, W=None) -> np.ndarray:
    """Attention weights s_i = softmax(X_i W p), shape (..., n, T)."""
    K = keys(X, W)
    p = _checks.batched_vector(p, K.shape[2], "p")
    return _unbatch(_attention_from_keys(_tensor(K), _batch(p)), p.shape[:-1])


def scores(X, Y, v) -> np.ndarray:
    """Token scores gamma_it = Y_i v^T x_it, shape (n, T); (..., n, T) for batched v (..., d)."""
    X = _checks.tokens(X)
    Y = _checks.labels(Y, X.shape[0])
    v = _checks.batched_vector(v, X.shape[2], "v")
    return Y[:, None] * np.einsum("ntd,...d->...nt", X, v)


def predict(X, v, p, W=None) -> np.ndarray:
    """Model output f(X_i) = v^T X_i^T softmax(X_i W p), shape (..., n)."""
    X = _checks.tokens(X)
    v = _checks.vector(v, X.shape[2], "v")
    return np.sum(attention(X, p, W) * (X @ v), axis=-1)


def risk(X, Y, v, p, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Empirical risk L(p) = (1/n) sum_i loss(Y_i f(X_i)), shape (...)."""
    K, gamma, P, loss, lead = _prepare(X, Y, v, p, W, loss)
    margin, _ = _margins(_attention_from_keys(K, P), gamma)
    return np.mean(loss.value(margin.numpy()), axis=0).reshape(lead)


def risk_grad(X, Y, v, p, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in p, shape (..., d).

    grad_p L = (1/n) sum_i l'(Y_i f_i) W^T X_i^T (diag(s_i) - s_i s_i^T) gamma_i.
    """
    K, gamma, P, loss, lead = _prepare(X, Y, v, p, W, loss)
    s = _attention_from_keys(K, P)
    margin, deviation = _margins(s, gamma)
    grad = _contract_tokens(_logit_grad(s, deviation, margin, loss, out=s), K)
    return grad.T.numpy().reshape(lead + (K.shape[2],))


def risk_grad_v(X, Y, v, p, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in v, shape (..., d): (1/n) sum_i l'(Y_i f_i) Y_i X_i^T s_i."""
    K, gamma, P, loss, lead = _prepare(X, Y, v, p, W, loss)
    s = _attention_from_keys(K, P)
    Y = _tensor(Y)
    weight = _loss_derivative(loss, _margins(s, gamma)[0]) * (Y / Y.shape[0])[:, None]
    grad = _contract_tokens(s * weight[:, None, :], _tensor(X))
    return grad.T.numpy().reshape(lead + (K.shape[2],))


def self_attention_logits(X, W, queries) -> np.ndarray:
    """Logits x_it^T W z_i with one query z_i per sequence, shape (..., n, T).

    ``W`` is (..., d, d); ``queries`` is (n, d), or (d,) for one shared query (the prompt p).
    """
    X = _checks.tokens(X)
    n, _, d = X.shape
    return np.einsum("ntd,...de,ne->...nt", X, _as_batched_W(W, d), _queries(queries, n, d))


def risk_W(X, Y, v, W, queries, loss: str | Loss = "logistic") -> np.ndarray:
    """Risk as a function of the key-query matrix W (queries fixed), shape (...)."""
    gamma = scores(X, Y, v)
    s = softmax(self_attention_logits(X, W, queries))
    return np.mean(get_loss(loss).value(np.sum(s * gamma, axis=-1)), axis=-1)


def risk_grad_W(X, Y, v, W, queries, loss: str | Loss = "logistic") -> np.ndarray:
    """Gradient of the risk in W, shape (..., d, d): sum_i sum_t c_it x_it z_i^T.

    c_it is the gradient in the logits. With one shared query p the gradient is rank one,
    g p^T, where g is the gradient in u = W p.
    """
    X = _checks.tokens(X)
    n, _, d = X.shape
    W = _as_batched_W(W, d)
    lead = W.shape[:-2]
    gamma = _tensor(scores(X, Y, v)[..., None])
    s = _tensor(np.moveaxis(softmax(self_attention_logits(X, W, queries)).reshape((-1, n) + X.shape[1:2]), 0, -1))
    margin, deviation = _margins(s, gamma)
    dlogits = _logit_grad(s, deviation, margin, get_loss(loss))
    grad = torch.einsum("ntb,ntd,ne->bde", dlogits, _tensor(X), _tensor(_queries(queries, n, d)))
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


# --- private kernels, shared with the training loops ------------------------------------------
# They work on float64 torch tensors in a batch-last layout: attention is (n, T, B) and prompts
# are (d, B), so the softmax reductions over T run on contiguous rows of B values and the batched
# matmuls are single BLAS calls. Losses stay numpy functions of the (n, B) margins.

PARALLEL_WORK = 1 << 15  # array elements per step below which one torch thread is fastest


@contextmanager
def _threads_for(work: int):
    """Run torch single-threaded inside the block when a step touches fewer than PARALLEL_WORK
    elements (a thread pool only adds overhead there, and contention on a busy machine),
    then restore the caller's setting. Large batches keep torch's default threads."""
    if work >= PARALLEL_WORK:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _tensor(a) -> torch.Tensor:
    """A float64 CPU tensor (a contiguous copy of ``a`` when needed)."""
    return torch.from_numpy(np.array(a, dtype=np.float64, order="C", copy=True))


def _batch(p: np.ndarray) -> torch.Tensor:
    """(..., d) prompts as a (d, B) tensor."""
    return _tensor(p.reshape(-1, p.shape[-1]).T)


def _unbatch(a: torch.Tensor, lead: tuple) -> np.ndarray:
    """A (n, T, B) tensor as a (..., n, T) array."""
    n, T, _ = a.shape
    return a.permute(2, 0, 1).numpy().reshape(lead + (n, T))


def _logits(K: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """k_it^T p for keys K (n, T, d) and prompts P (d, B), shape (n, T, B)."""
    n, T, d = K.shape
    return (K.reshape(n * T, d) @ P).reshape(n, T, -1)


def _softmax_tokens_(s: torch.Tensor, shift: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the token axis (dim 1) of logits (N, T, B), in place.

    ``shift`` (N, 1, B) is the largest logit per sequence when the caller already has it.
    """
    s -= s.amax(dim=1, keepdim=True) if shift is None else shift
    np.exp(s.numpy(), out=s.numpy())  # numpy's SIMD exp is about twice torch's on this CPU
    s /= s.sum(dim=1, keepdim=True)
    return s


def _attention_from_keys(K: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """softmax over tokens of K p, shape (n, T, B)."""
    return _softmax_tokens_(_logits(K, P))


def _margins(s: torch.Tensor, gamma: torch.Tensor, top: torch.Tensor | None = None):
    """Margins z_i = Y_i f(X_i) = sum_t s_it gamma_it (N, B) and deviations gamma_it - z_i (N, T, B).

    ``gamma`` is (N, T, 1) or (N, T, B); ``top`` (N, 1, B) indexes the most-attended token r of
    each sequence (found here if not given). Both results are computed relative to r,
    z = gamma_r + sum_t s_t (gamma_t - gamma_r), so that when attention is nearly one-hot the
    tiny deviation gamma_r - z keeps its relative accuracy instead of cancelling to noise.
    """
    n, T, B = s.shape
    if top is None:
        top = torch.max(s, dim=1, keepdim=True).indices
    reference = torch.gather(gamma.expand(n, T, B), 1, top)
    centred = gamma - reference
    offset = torch.sum(s * centred, dim=1, keepdim=True)
    return (reference + offset)[:, 0, :], centred.sub_(offset)


def _loss_derivative(loss: Loss, margin: torch.Tensor) -> torch.Tensor:
    return loss.torch_derivative(margin)


def _logit_grad(s, deviation, margin, loss: Loss, out=None, n: int | None = None) -> torch.Tensor:
    """dL/dlogit_it = (1/n) l'(z_i) s_it (gamma_it - z_i), shape (N, T, B).

    ``deviation`` and ``margin`` come from :func:`_margins`; ``n`` is the number of sequences in
    one risk (default N; smaller when N stacks several instances). Writes into ``out`` (which may
    be ``s`` itself) to spare allocations in the training loops.
    """
    out = torch.mul(s, deviation, out=out)
    out *= (_loss_derivative(loss, margin) / (n or s.shape[0]))[:, None, :]
    return out


def _contract_tokens(weights: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """sum_{i,t} K[i, t] weights[i, t, b], shape (d, B)."""
    n, T, d = K.shape
    return K.reshape(n * T, d).T @ weights.reshape(n * T, -1)


def _prepare(X, Y, v, p, W, loss):
    """Keys (n, T, d), scores (n, T, 1), prompts (d, B) as tensors, the loss, and p's batch shape."""
    X = _checks.tokens(X)
    gamma = scores(X, Y, _checks.vector(v, X.shape[2], "v"))
    p = _checks.batched_vector(p, X.shape[2], "p")
    return _tensor(keys(X, W)), _tensor(gamma[..., None]), _batch(p), get_loss(loss), p.shape[:-1]


def _as_batched_W(W, d: int) -> np.ndarray:
    W = None if W is None else np.asarray(W, dtype=np.float64)
    if W is None or W.ndim < 2 or W.shape[-2:] != (d, d):
        raise ValueError(f"W: expected shape (..., {d}, {d}), got {None if W is None else W.shape}")
    return _checks.finite(W, "W")


def _queries(queries, n: int, d: int) -> np.ndarray:
    Z = np.asarray(queries, dtype=np.float64)
    if Z.shape == (d,):
        Z = np.broadcast_to(Z, (n, d))
    if Z.shape != (n, d):
        raise ValueError(f"queries: expected shape ({n}, {d}) or ({d},), got {Z.shape}")
    return _checks.finite(Z, "queries")
