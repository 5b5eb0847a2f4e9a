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
    |l'(f_i)| s_u s_w is formed as a logarithm and all are scaled by the largest before exp.

    X : (n, T, d) tokens; Y : (n,) labels; v : (d,) head; P : (B, d) starts; W : (d, d) or None.
    Returns the iterates every ``record_every`` steps, (steps // record_every + 1, B, d).
    """
    K = keys(X, W=W)
    gamma = scores(X, Y, v)
    n, T, d = K.shape
    P = np.array(P, dtype=float, ndmin=2)
    if P.ndim != 2 or P.shape[1] != d:
        raise ValueError(f"P: expected shape (B, {d}), got {P.shape}")
    iu, iw = np.triu_indices(T, 1)
    pair_terms = ((gamma[:, iu] - gamma[:, iw])[..., None]
                  * (K[:, iu] - K[:, iw])).reshape(-1, d)      # (n * pairs, d)
    flat_keys = K.reshape(n * T, d).T
    out = [P.copy()]
    for k in range(steps):
        z = (P @ flat_keys).reshape(len(P), n, T)
        z -= z.max(-1, keepdims=True)
        log_s = z - np.log(np.exp(z).sum(-1, keepdims=True))   # (B, n, T)
        f = (np.exp(log_s) * gamma).sum(-1)                    # (B, n)
        log_w = (-np.logaddexp(0.0, f))[..., None] + log_s[..., iu] + log_s[..., iw]
        log_w = log_w.reshape(len(P), -1)
        descent = np.exp(log_w - log_w.max(-1, keepdims=True)) @ pair_terms   # -g, rescaled
        P = P + lr * descent / np.linalg.norm(descent, axis=-1, keepdims=True)
        if (k + 1) % record_every == 0:
            out.append(P.copy())
    return np.array(out)
