"""The W-SVM's program (:func:`~maxmargin.w_svm`, :mod:`._nuclear`, :mod:`maxmargin.normsvm`): its
inputs validated once (tokens, the selection, the queries and the constraint differences,
refusing per-sequence constraint matrices that leave float64's normal range), its rows
<vec(d_j z_j^T), vec(W)> >= 1 and its cvxpy form.
"""
from __future__ import annotations

import numpy as np

from . import _checks
from ._forward import _differences, _others
from ._svmresults import CvxpyProgram, _normsvm
from ._svmsolve import _sum_squares_problem, _variable


def _w_inputs(X, alpha, queries):
    """Validated tokens X (n, T, d), differences D (n, T, d), alpha (n,) and queries Z, (d,) or
    (n, d)."""
    X = _checks.tokens(X)
    n, T, d = X.shape
    alpha = _checks.indices(alpha, n, T)
    queries = _checks.as_float_array(queries, "queries")  # np.ndim fails on a ragged list
    if queries.ndim == 1:
        Z = _checks.vector(queries, d, "queries")
        if not Z.any():
            raise ValueError("queries: the query vector is zero, so x^T W z = 0 for every W")
    else:
        Z = _checks.batched_vector(queries, d, "queries")
        if Z.shape != (n, d):
            raise ValueError(f"queries: expected shape ({d},) or ({n}, {d}), got {Z.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        D = _differences(X, alpha)
    if not np.all(np.isfinite(D)):
        i = int(np.nonzero(~np.isfinite(D).all(axis=(1, 2)))[0][0])
        raise ValueError(f"X: the differences x_{{i,alpha_i}} - x_it of sequence {i} overflow "
                         "float64; rescale X")
    if Z.ndim == 2:
        _w_representable(D, alpha, Z)
    return X, D, alpha, Z


def _w_representable(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray) -> None:
    """Refuse per-sequence queries (n, d) whose constraint matrices (x_{i,alpha_i} - x_it) z_i^T
    leave float64's normal range: their largest entry, max|x_{i,alpha_i} - x_it| max|z_i|,
    overflows (then W or the constraint values at W cannot be represented) or is below the
    smallest normal number 2^-1022 (the entries lose precision, and ||W|| >= 2^1022 / d)."""
    mant_D, exp_D = np.frexp(np.abs(D).max(axis=2))  # (n, T), exact
    mant_Z, exp_Z = np.frexp(np.abs(Z).max(axis=1))  # (n,)
    mant, exp = np.frexp(mant_D * mant_Z[:, None])
    top = exp + exp_D + exp_Z[:, None]  # the largest entry is mant * 2^top, mant in [1/2, 1)
    constraint = _others(alpha, D.shape[1]) & (mant > 0)
    for outside, how in ((constraint & (top > 1024),
                          "overflows float64, so W (about 1 / that entry) or the constraint "
                          "values at W cannot be represented"),
                         (constraint & (top < -1021),
                          "is below float64's smallest normal number 2^-1022, so the constraint "
                          "data lose precision and ||W|| would be at least 1 / (d times that "
                          "entry), at the top of float64's range or beyond")):
        if outside.any():
            i, t = (int(k[0]) for k in np.nonzero(outside))
            size = float(top[i, t] + np.log2(mant[i, t]))
            raise ValueError(
                f"{_w_blame(D, Z)}: the largest entry of the constraint matrix "
                f"(x_{{i,alpha_i}} - x_it) z_i^T of sequence {i}, token {t} (about 2^{size:.1f}) "
                f"{how}; rescale X and queries to comparable sizes")


def _w_blame(D: np.ndarray, Z: np.ndarray) -> str:
    """The argument to name for a problem that float64 (or Clarabel) cannot resolve: the one
    whose largest per-sequence scale is farther from 1, by over a factor 1000 (the differences
    x_{i,alpha_i} - x_it for X, or the queries); else the one whose per-sequence scales spread
    more by over a factor 2 (mixed scales); else "X"."""
    Z = np.atleast_2d(Z)
    with np.errstate(divide="ignore"):
        tops = [np.log2(np.abs(A).reshape(len(A), -1).max(axis=1)) for A in (D, Z)]
    tops = [top[np.isfinite(top)] for top in tops]
    far = [float(np.abs(top).max()) if top.size else 0.0 for top in tops]
    if abs(far[1] - far[0]) > 10:  # one is over 1000 times farther from unit scale
        return "queries" if far[1] > far[0] else "X"
    spread = [float(np.ptp(top)) if top.size else 0.0 for top in tops]
    return "queries" if spread[1] > spread[0] + 1 else "X"


def _w_rows(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray):
    """Rows of the W-SVM as an LDP in vec(W), row-major:
    (x_{i,alpha_i} - x_it)^T W z_i = <vec((x_{i,alpha_i} - x_it) z_i^T), vec(W)>.

    Returns (G, seq, tok) with G of shape (n (T - 1), d * d).
    """
    Z = np.broadcast_to(Z, (D.shape[0], D.shape[2]))
    others = _others(alpha, D.shape[1])
    seq, tok = np.nonzero(others)
    G = np.einsum("ja,jb->jab", D[seq, tok], Z[seq]).reshape(len(seq), -1)
    return G, seq, tok


def _w_problem(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray,
               norm="frobenius") -> CvxpyProgram:
    import cvxpy as cp

    name = getattr(norm, "name", norm)
    n, T, d = D.shape
    seq, tok = np.nonzero(_others(alpha, T))
    differences, queries = D[seq, tok], np.broadcast_to(Z, (n, d))[seq]
    W = _variable((d, d), "W")
    constraints = [cp.sum(cp.multiply(differences @ W, queries), axis=1) >= 1]
    if name == "nuclear":
        return CvxpyProgram(cp.Problem(cp.Minimize(cp.normNuc(W)), constraints), W)
    if name != "frobenius":
        return CvxpyProgram(cp.Problem(cp.Minimize(_normsvm().objective(W, norm)), constraints), W)
    return _sum_squares_problem(W, constraints)
