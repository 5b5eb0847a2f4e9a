"""Chapter 4, traps and stress tests: normalized GD that float64 cannot stall.

Once attention saturates, the terms of the prompt gradient are as small as the attention left on
the other tokens, and past logit gaps of about 700 they underflow: float64 normalized GD then
stops (the gradient falls below ``eps``, then to zero) although exact arithmetic would go on.
:func:`ngd_log_domain` computes the same normalized step from the logarithms of those terms, so
it keeps moving, with float64's relative accuracy, at any gap.
"""
from __future__ import annotations

import numpy as np

from ..model import keys, scores


def ngd_log_domain(X, Y, v, P, steps: int, *, lr: float = 0.1, W=None,
                   record_every: int = 1000) -> np.ndarray:
    """Normalized GD on the logistic risk, ``p <- p - lr g / |g|``, with the direction of g
    computed from log-magnitudes: no term underflows, whatever the logit gaps.

    The prompt gradient of sequence i is l'(f_i) Cov_s(gamma, k) with the covariance written
    over pairs of tokens, sum_{u<w} s_u s_w (gamma_u - gamma_w)(k_u - k_w): each term's weight
    |l'(f_i)| s_u s_w is formed as a logarithm and all are scaled by the largest before exp
    (the largest among the pairs whose term is not zero: a pair of tokens with equal scores
    adds nothing, however large its weight).

    X : (n, T, d) tokens; Y : (n,) labels; v : (d,) head; P : (B, d) starts; W : (d, d) or None.
    Returns the iterates every ``record_every`` steps, (steps // record_every + 1, B, d).
    """
    K = keys(X, W=W)
    gamma = scores(X, Y, v)
    n, T, d = K.shape
    P = np.array(P, dtype=float, ndmin=2)
    if P.ndim != 2 or P.shape[1] != d:
        raise ValueError(f"P: expected shape (B, {d}), got {P.shape}")
    flat_keys = K.reshape(n * T, d).T
    return _log_domain_steps(lambda P: (P @ flat_keys).reshape(len(P), n, T), K, gamma, P,
                             steps, lr, record_every)


def ngd_log_domain_stack(X, Y, v, P, steps: int, *, lr: float = 0.1, W=None,
                         record_every: int = 1000) -> np.ndarray:
    """:func:`ngd_log_domain` for B runs on B instances of one shape, one run each.

    X : (B, n, T, d) tokens, run b on instance X[b]; Y : (B, n) labels; v : (d,) head;
    P : (B, d) starts; W : (d, d) or None, shared by the instances.
    Returns the iterates every ``record_every`` steps, (steps // record_every + 1, B, d).
    """
    X = np.asarray(X, dtype=float)
    if X.ndim != 4:
        raise ValueError(f"X: expected shape (B, n, T, d), got {X.shape}")
    B, n, T, d = X.shape
    Y = np.asarray(Y, dtype=float)
    if Y.shape != (B, n):
        raise ValueError(f"Y: expected shape ({B}, {n}), got {Y.shape}")
    P = np.array(P, dtype=float, ndmin=2)
    if P.shape != (B, d):
        raise ValueError(f"P: expected shape ({B}, {d}), got {P.shape}")
    K = np.stack([keys(x, W=W) for x in X])                    # (B, n, T, d)
    gamma = np.stack([scores(x, y, v) for x, y in zip(X, Y)])  # (B, n, T)
    return _log_domain_steps(lambda P: np.einsum("bntd,bd->bnt", K, P), K, gamma, P,
                             steps, lr, record_every)


def _log_domain_steps(logits, K, gamma, P, steps, lr, record_every):
    """The steps of :func:`ngd_log_domain` from P (B, d): ``logits(P)`` is (B, n, T); K is
    (n, T, d) or (B, n, T, d), gamma (n, T) or (B, n, T), one instance or one per run."""
    T, d = K.shape[-2:]
    iu, iw = np.triu_indices(T, 1)
    pair_terms = ((gamma[..., iu] - gamma[..., iw])[..., None]
                  * (K[..., iu, :] - K[..., iw, :]))
    pair_terms = pair_terms.reshape(*pair_terms.shape[:-3], -1, d)    # ([B,] n * pairs, d)
    live = np.any(pair_terms != 0, axis=-1)                            # ([B,] n * pairs)
    if not np.all(live.any(-1)):
        raise ValueError("v: every pair of tokens with different keys has equal scores, so "
                         "the gradient is zero everywhere and has no direction")
    out = [P.copy()]
    for k in range(steps):
        z = logits(P)
        z -= z.max(-1, keepdims=True)
        log_s = z - np.log(np.exp(z).sum(-1, keepdims=True))   # (B, n, T)
        f = (np.exp(log_s) * gamma).sum(-1)                    # (B, n)
        log_w = (-np.logaddexp(0.0, f))[..., None] + log_s[..., iu] + log_s[..., iw]
        log_w = np.where(live, log_w.reshape(len(P), -1), -np.inf)
        weights = np.exp(log_w - log_w.max(-1, keepdims=True))
        descent = (weights[..., None] * pair_terms).sum(-2)    # -g, rescaled
        P = P + lr * descent / np.linalg.norm(descent, axis=-1, keepdims=True)
        if (k + 1) % record_every == 0:
            out.append(P.copy())
    return np.array(out)
