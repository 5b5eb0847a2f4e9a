"""One validated instance of the prompt-attention model, checked once at the public boundary.

``problem(X, Y, v, W)`` validates the data and derives what every computation on p reads: the
keys k_it = W^T x_it and the token scores gamma_it = Y_i v^T x_it; ``keyed(X, W)`` does the
same without labels and head. Public functions call it
once and hand the :class:`Problem` to private kernels (the risk and its gradients, the SVMs'
constraint rows, the enumerations, the trap search, the path objective, the GD engines), which
never validate again.

Shapes: ``X`` (n, T, d), ``Y`` (n,) in {-1, +1}, ``v`` (d,), ``W`` (d, d) or None (the identity);
``keys`` (n, T, d), ``scores`` (n, T).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import _checks, _kernels


@dataclass(frozen=True, eq=False)
class Problem:
    """Validated data of one instance and the keys and scores derived from it.

    ``Y``, ``v`` and ``scores`` are None for a problem built without labels or head (the SVMs
    and the attention weights need only X and W).
    """

    X: np.ndarray                   # (n, T, d) tokens, float64, finite
    Y: np.ndarray | None            # (n,) labels in {-1, +1}
    v: np.ndarray | None            # (d,) linear head
    W: np.ndarray | None            # (d, d) key-query matrix; None is the identity
    keys: np.ndarray                # (n, T, d) k_it = W^T x_it (X itself when W is None)
    scores: np.ndarray | None       # (n, T) gamma_it = Y_i v^T x_it

    @property
    def shape(self) -> tuple[int, int, int]:
        """(n, T, d)."""
        return self.X.shape


def problem(X, Y, v, W=None) -> Problem:
    """Validate an instance once: X (n, T, d), Y (n,), v (d,), W (d, d) or None. Raises
    ``ValueError``/``TypeError`` naming the argument (None for Y or v included), and for keys or
    scores beyond float64 naming W or v."""
    X = _checks.tokens(X)
    n, _, d = X.shape
    W = _checks.key_matrix(W, d)
    v = _checks.vector(v, d, "v")
    Y = _checks.labels(Y, n)
    return Problem(X, Y, v, W, keys_of(X, W), scores_of(X, Y, v))


def stacked(X, Y, v, W=None) -> list[Problem]:
    """Validate a stack of M instances once: X (M, n, T, d), Y (M, n), v (d,) or (M, d), W None,
    (d, d) or (M, d, d); a Problem per instance. Raises ``ValueError``/``TypeError`` naming the
    argument, as :func:`problem` does for each instance."""
    X = _checks.as_float_array(X, "X")
    if X.ndim != 4:
        raise ValueError(f"X: expected shape (M, n, T, d), got an array with shape {X.shape}")
    M, n, T, d = X.shape
    if M < 1:
        raise ValueError(f"X: needs at least one instance (M >= 1), got shape {X.shape}")
    _checks.token_shape(X.shape[1:], "X")
    Y = _checks.as_float_array(Y, "Y")
    if Y.shape != (M, n):
        raise ValueError(f"Y: expected shape ({M}, {n}) to match X, got {Y.shape}")
    v = _checks.batched_vector(v, d, "v")
    if v.shape not in ((d,), (M, d)):
        raise ValueError(f"v: expected shape ({d},) or ({M}, {d}), got {v.shape}")
    v = np.broadcast_to(v, (M, d))
    Ws = [None] * M
    if W is not None:
        Wa = _checks.as_float_array(W, "W")
        if Wa.shape == (d, d):
            Wa = np.broadcast_to(Wa, (M, d, d))
        if Wa.shape != (M, d, d):
            raise ValueError(f"W: expected shape ({d}, {d}) or ({M}, {d}, {d}), got {Wa.shape}")
        Ws = list(Wa)
    return [problem(X[m], Y[m], v[m], Ws[m]) for m in range(M)]  # each instance once


def keyed(X, W=None) -> Problem:
    """Validate tokens X (n, T, d) and W (d, d) or None once, for the computations that need no
    labels or head (attention, the SVMs): a Problem whose Y, v and scores are None."""
    X = _checks.tokens(X)
    W = _checks.key_matrix(W, X.shape[2])
    return Problem(X, None, None, W, keys_of(X, W), None)


def exponents(a: np.ndarray, axis) -> np.ndarray:
    """Binary exponent e of the largest |entry| along ``axis`` (max |a| < 2**e; 0 for zeros)."""
    return np.frexp(np.max(np.abs(a), axis=axis, initial=0.0))[1]


def score_scales(prob: Problem) -> np.ndarray:
    """(n,) s_i = max_t sum_j |v_j x_itj| of a validated problem with a head: the scale of the
    rounding of sequence i's scores gamma_it = Y_i v^T x_it (each is computed with an error of
    at most about d u s_i, u = eps / 2). Ties between scores are judged relative to it
    (:func:`tie_tolerances`), so that they do not depend on the units of X or v. Capped at the
    largest float64 (the sum can overflow where the scores, which may cancel, do not)."""
    with np.errstate(over="ignore"):
        s = np.einsum("ntd,d->nt", np.abs(prob.X), np.abs(prob.v)).max(axis=1)
    return np.minimum(s, np.finfo(np.float64).max)


#: Safety factor of the tie rule (:func:`tie_tolerances`) over the rounding bound of a difference
#: of two scores.
TIE_FACTOR = 16


def tie_tolerances(prob: Problem) -> np.ndarray:
    """(n,) tol_i = TIE_FACTOR (d + 2) eps s_i: the one tie rule for the scores of a validated
    problem with a head. Two scores of sequence i *tie* when they differ by at most tol_i, and
    one is *strictly higher* than another only when it exceeds it by more than tol_i.

    Why this size: each computed score gamma_it = Y_i sum_j v_j x_itj (d products, summed in
    any order, with or without FMA) is within d u s_i of its exact value (u = eps / 2, s_i of
    :func:`score_scales`), so the computed difference of two scores is within d eps s_i of the
    exact one; 2 eps s_i more cover ties exact in decimal (0.1 + 0.2 against 0.3), whose x and
    v are each rounded by u on conversion to float64. The factor 16 leaves room for the
    rounding of s_i and of the difference itself (a tie is never missed), and keeps the rule
    a few dozen roundings wide, so that scores further apart than rounding can explain are
    never called tied: at d = 3, tol_i = 1.8e-14 s_i (the former fixed 1e-12 s_i, 4500 eps s_i,
    refused scores 1 and 1 - 1e-6 computed from terms of size 1e6)."""
    d = prob.shape[2]
    return TIE_FACTOR * (d + 2) * np.finfo(np.float64).eps * score_scales(prob)


def unit_keys(prob: Problem) -> tuple[Problem, int]:
    """(the problem with its keys divided by 2^e, e), with e chosen so that max |k_it| lies in
    [1, 2) (e = 0 for zero keys). X, W, Y, v and the scores are kept as given.

    For the computations whose answer does not depend on the units of the keys (feasibility,
    support tokens, selections, trap sets): their intermediates (the SVM's multipliers scale
    like 1 / |k|^2, its solution like 1 / |k|) then stay inside float64 at any key scale. A
    power of two is exact, so at unit scale nothing changes; a solution p of the scaled keys is
    ``np.ldexp(p, -e)`` for the given ones."""
    e = int(exponents(prob.keys, None)) - 1 if np.any(prob.keys) else 0
    return (prob if e == 0 else replace(prob, keys=np.ldexp(prob.keys, -e))), e


def keys_of(X: np.ndarray, W: np.ndarray | None) -> np.ndarray:
    """Keys X W of validated X (n, T, d) and W (d, d) or None, refused (naming W) beyond float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        K = _kernels.keys(X, W)
    if W is not None and not np.all(np.isfinite(K)):
        size = (int(exponents(X, None)) + int(exponents(W, None)) + np.log2(X.shape[2])) * np.log10(2)
        raise ValueError(f"W: the keys k_it = W^T x_it reach about 10^{size:.0f}, beyond float64 "
                         f"(at most 1.8e308); scale W or X down")
    return K


def scores_of(X: np.ndarray, Y: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Scores Y_i v^T x_it of validated inputs, shape (..., n, T) for v (..., d), refused
    (naming v) beyond float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        gamma = _kernels.scores(X, Y, v)
    if not np.all(np.isfinite(gamma)):
        size = (int(exponents(X, None)) + int(exponents(v, None)) + np.log2(X.shape[2])) * np.log10(2)
        raise ValueError(f"v: the scores Y_i v^T x_it reach about 10^{size:.0f}, beyond float64 "
                         f"(at most 1.8e308); scale v or X down")
    return gamma
