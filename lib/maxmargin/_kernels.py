"""Internal numerical kernels shared by the model, the training loops, the heads and the SVMs.

Nothing here validates its inputs: every public function validates its arguments once, at the
boundary (:mod:`._checks`), and passes clean float64 arrays to these kernels. Two layers:

* numpy kernels: keys k_it = W^T x_it, token scores gamma_it = Y_i v^T x_it, self-attention
  logits, and an orthonormal basis of a span;
* torch kernels in a batch-last layout: attention is (n, T, B) and prompts are (d, B), so the
  softmax reductions over T run on contiguous rows of B values and the batched matmuls are
  single BLAS calls. Losses stay numpy functions of the (n, B) margins.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from .losses import EXPONENTIAL, Loss

# ----------------------------------------------------------------------------------------------
# numpy kernels
# ----------------------------------------------------------------------------------------------


def keys(X: np.ndarray, W: np.ndarray | None) -> np.ndarray:
    """Keys k_it = W^T x_it, shape (n, T, d); the tokens themselves when ``W`` is None."""
    return X if W is None else X @ W


def scores(X: np.ndarray, Y: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Token scores gamma_it = Y_i v^T x_it, shape (..., n, T) for v of shape (..., d)."""
    return Y[:, None] * np.einsum("ntd,...d->...nt", X, v)


def self_attention_logits(X: np.ndarray, W: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Logits x_it^T W z_i for W (..., d, d) and queries Z (n, d), shape (..., n, T)."""
    return np.einsum("ntd,...de,ne->...nt", X, W, Z, optimize=True)


def span_basis(rows: np.ndarray) -> np.ndarray:
    """(d, r) orthonormal basis of the span of ``rows`` (m, d)."""
    d = rows.shape[1]
    if len(rows) == 0:
        return np.zeros((d, 0))
    _, sing, Vt = np.linalg.svd(rows, full_matrices=False)
    rank = int(np.sum(sing > 1e-12 * max(sing.max(initial=0.0), 1e-300)))
    return Vt[:rank].T


# ----------------------------------------------------------------------------------------------
# torch kernels, batch-last
# ----------------------------------------------------------------------------------------------

PARALLEL_WORK = 1 << 15  # array elements per step below which one torch thread is fastest


@contextmanager
def threads_for(work: int):
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


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine along the last axis of finite arrays that broadcast; 0 where a vector is 0. Each
    vector is first divided by its largest |entry|, so no norm overflows."""
    a, b = _unit_scale(a), _unit_scale(b)
    denom = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    dots = np.sum(a * b, axis=-1)
    return np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)


def norms(a: np.ndarray) -> np.ndarray:
    """Euclidean norms along the last axis, without overflow or underflow of the squares."""
    top = np.max(np.abs(a), axis=-1, keepdims=True)
    return np.squeeze(top, -1) * np.linalg.norm(a / np.where(top > 0, top, 1.0), axis=-1)


def _unit_scale(a: np.ndarray) -> np.ndarray:
    """Each vector (last axis) divided by its largest |entry| (zero vectors kept)."""
    top = np.max(np.abs(a), axis=-1, keepdims=True)
    return a / np.where(top > 0, top, 1.0)


def power_of_two_scale(a: torch.Tensor, dims) -> torch.Tensor:
    """2^-e with 2^e just above max |a| over ``dims`` (kept): a * 2^-e is at most 1 and exact
    (1 where a is zero). Normalized steps divide a gradient's factors by it, and eps alike, where
    the contraction would overflow: the direction does not change."""
    top = torch.amax(a.abs(), dim=dims, keepdim=True)
    exponent = torch.frexp(top).exponent
    return torch.where(top > 0, torch.pow(2.0, -exponent.to(a.dtype)), 1.0)


def tensor(a) -> torch.Tensor:
    """A float64 CPU tensor (a contiguous copy of ``a`` when needed)."""
    return torch.from_numpy(np.array(a, dtype=np.float64, order="C", copy=True))


def batch(p: np.ndarray) -> torch.Tensor:
    """(..., d) prompts as a (d, B) tensor."""
    return tensor(p.reshape(-1, p.shape[-1]).T)


def unbatch(a: torch.Tensor, lead: tuple) -> np.ndarray:
    """A (n, T, B) tensor as a (..., n, T) array."""
    n, T, _ = a.shape
    return a.permute(2, 0, 1).numpy().reshape(lead + (n, T))


def logits(K: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """k_it^T p for keys K (n, T, d) and prompts P (d, B), shape (n, T, B)."""
    n, T, d = K.shape
    return (K.reshape(n * T, d) @ P).reshape(n, T, -1)


def softmax_tokens_(s: torch.Tensor, shift: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the token axis (dim 1) of logits (N, T, B), in place.

    ``shift`` (N, 1, B) is the largest logit per sequence when the caller already has it.
    """
    s -= s.amax(dim=1, keepdim=True) if shift is None else shift
    np.exp(s.numpy(), out=s.numpy())  # numpy's SIMD exp is about twice torch's on this CPU
    s /= s.sum(dim=1, keepdim=True)
    return s


def attend(logits: torch.Tensor, gamma: torch.Tensor) -> tuple:
    """(s, z, gamma - z) of logits (N, T, B), in place, and scores gamma (N, T, 1 or B): the
    attention (softmax over tokens), the margins (N, B) and the deviations (N, T, B), both
    relative to each sequence's most-attended token (:func:`margins`)."""
    shift, top = torch.max(logits, dim=1, keepdim=True)
    s = softmax_tokens_(logits, shift)
    margin, deviation = margins(s, gamma, top)
    return s, margin, deviation


def attention_from_keys(K: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """softmax over tokens of K p, shape (n, T, B)."""
    return softmax_tokens_(logits(K, P))


def margins(s: torch.Tensor, gamma: torch.Tensor, top: torch.Tensor | None = None):
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


def logit_grad(s, deviation, margin, loss: Loss, out=None, n: int | None = None) -> torch.Tensor:
    """dL/dlogit_it = (1/n) l'(z_i) s_it (gamma_it - z_i), shape (N, T, B).

    ``deviation`` and ``margin`` come from :func:`margins`; ``n`` is the number of sequences in
    one risk (default N; smaller when N stacks several instances). Writes into ``out`` (which may
    be ``s`` itself) to spare allocations in the training loops.
    """
    out = torch.mul(s, deviation, out=out)
    out *= (loss.torch_derivative(margin) / (n or s.shape[0]))[:, None, :]
    return out


def derivative_weights(margin: torch.Tensor, loss: Loss, normalized: bool, *,
                       large: bool = False):
    """(weights, scale): weights (1/n) l'(z_i) for margins (..., n, B) of risks over n sequences.

    When a weight overflows float64 and the step is ``normalized`` (whose direction does not
    change when the gradient is scaled), the exponential loss's weights of each affected run
    (column) are computed in the log domain, divided by exp(c) with c = max_i -z_i, and ``scale``
    (..., 1, B) holds exp(-c) (1 for the other runs), by which the caller multiplies its eps.
    ``large``: also the runs whose weights are finite but above 1 (a weight near float64's top
    times gamma - z overflowed the logit gradient); (None, None) when there are none.
    ``scale`` is None when nothing overflowed; (None, None) when the weights are not finite and
    cannot be rescaled (plain GD, another loss, or non-finite margins).
    """
    n = margin.shape[-2]
    weights = loss.torch_derivative(margin) / n
    if not large and bool(torch.isfinite(weights).all()):
        return weights, None
    if not (normalized and EXPONENTIAL.same_function(loss)) or not bool(torch.isfinite(margin).all()):
        return None, None
    bad = ~torch.isfinite(weights).all(dim=-2, keepdim=True)
    if large:
        bad |= torch.amax(weights.abs(), dim=-2, keepdim=True) > 1.0
        if not bool(bad.any()):
            return None, None
    c = torch.where(bad, torch.amax(-margin, dim=-2, keepdim=True), 0.0)
    return -torch.exp(-margin - c) / n, torch.exp(-c)


def contract_tokens(weights: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """sum_{i,t} K[i, t] weights[i, t, b], shape (d, B)."""
    n, T, d = K.shape
    return K.reshape(n * T, d).T @ weights.reshape(n * T, -1)
