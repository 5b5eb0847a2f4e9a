"""The validated inputs of gradient descent on the factors (K, Q) of W = K Q^T for a stack of M
instances (:func:`~maxmargin.gd_KQ_stack`, :func:`~maxmargin.exactstep.ngd_KQ_exact`): one
validation of (X, Y, v, queries, K0, Q0) for both.
"""
from __future__ import annotations

import numpy as np

from . import _checks
from .problem import stacked


def _stack_factor(A, M: int, d: int, name: str) -> np.ndarray:
    """A start of a factor for a stack of M instances: (d, m) shared or (M, d, m), as (M, d, m)."""
    A = _checks.as_float_array(A, name)
    if A.ndim == 2:
        A = np.broadcast_to(A, (M,) + A.shape)
    if A.ndim != 3 or A.shape[:2] != (M, d):
        raise ValueError(f"{name}: expected shape ({d}, m) or ({M}, {d}, m), got {A.shape}")
    if A.shape[2] < 1:
        raise ValueError(f"{name}: the factor width m must be >= 1, got shape {A.shape}")
    return _checks.finite(A, name).copy()


def _stacked_factors(X, Y, v, K0, Q0, queries) -> tuple:
    """(X (M, n, T, d), scores gamma (M, n, T), queries Z (M, n, d), K (M, d, m), Q (M, d, m)):
    the stack of instances and the factors' starts (copies), validated (errors name the
    argument)."""
    problems = stacked(X, Y, v)
    M, (n, T, d) = len(problems), problems[0].shape
    gamma = np.stack([prob.scores for prob in problems])     # (M, n, T)
    X = np.stack([prob.X for prob in problems])
    Z = _checks.as_float_array(queries, "queries")
    if Z.shape != (M, n, d):
        raise ValueError(f"queries: expected shape ({M}, {n}, {d}), got {Z.shape}")
    Z = _checks.finite(Z, "queries")
    K = _stack_factor(K0, M, d, "K0")
    Q = _stack_factor(Q0, M, d, "Q0")
    if Q.shape[2] != K.shape[2]:
        raise ValueError(f"Q0: width m = {Q.shape[2]} differs from K0's m = {K.shape[2]} (the "
                         f"factors of W = K Q^T need the same m), got shapes {K.shape} and {Q.shape}")
    return X, gamma, Z, K, Q
