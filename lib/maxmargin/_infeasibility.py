"""Why a max-margin problem has no solution: the sequence, or the small group, to blame.

Every explanation takes a ``feasible(group)`` oracle (does the problem restricted to the
sequences, or samples, in ``group`` have a solution?) built by :mod:`.svm`, and returns the
exception to raise: a ``ValueError`` naming first a member that is infeasible on its own, else a
small group of members that conflict.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._least_distance import row_norms

Feasible = Callable[[list[int]], bool]


def conflicting_group(count: int, feasible: Feasible) -> list[int]:
    """A small infeasible group: add members in order until infeasible, then drop the unneeded."""
    group: list[int] = []
    for i in range(count):
        group.append(i)
        if not feasible(group):
            break
    else:
        return []
    for j in group[:-1]:
        smaller = [k for k in group if k != j]
        if not feasible(smaller):
            group = smaller
    return group


def explain(
    prefix: str,
    n: int,
    feasible: Feasible,
    alone: Callable[[int], str | None],
    jointly: Callable[[list[int]], str],
) -> Exception:
    """The error for an infeasible problem: first a member infeasible on its own, if any
    (``alone(i)`` explains it or returns None), else a small group that conflicts.

    Only when the fast solver finds the whole problem feasible after all (cvxpy/Clarabel can
    declare badly scaled problems infeasible) is the error a RuntimeError instead.
    """
    for i in range(n):
        reason = alone(i)
        if reason is not None:
            return ValueError(f"{prefix} {reason}")
    group = conflicting_group(n, feasible)
    if not group:
        return RuntimeError(
            f"{prefix.split(':')[0]}: cvxpy/Clarabel reports the problem infeasible, but the fast "
            "solver finds a feasible point (badly scaled data?); use solver='fast'"
        )
    return ValueError(f"{prefix} {jointly(group)}")


def same_key(D: np.ndarray, i: int, alpha: np.ndarray) -> int | None:
    """A token of sequence i whose key equals the selected one's (zero difference), if any."""
    size = row_norms(D[i])  # no overflow of the squares for keys near 1e200
    tie = (size <= 1e-12 * size.max()) & (np.arange(D.shape[1]) != alpha[i])  # relative: keys of any scale
    return int(np.argmax(tie)) if tie.any() else None


def unrankable(D: np.ndarray, i: int, alpha: np.ndarray, by: str) -> str:
    """Why sequence i alone is infeasible: a duplicate of the selected key, or the convex hull."""
    twin = same_key(D, i, alpha)
    why = (
        f"token {twin} has the same key, a duplicate of the selected token"
        if twin is not None
        else "its key lies in the convex hull of the others"
    )
    return f"in sequence {i} token {alpha[i]} cannot be ranked above all other tokens by any {by} ({why})"


def not_jointly(group: list[int], by: str, note: str = "") -> str:
    return (
        f"every sequence can be separated on its own, but sequences {group}{note} "
        f"cannot be separated by one common {by}"
    )


def selection(D: np.ndarray, alpha: np.ndarray, b: np.ndarray, feasible: Feasible) -> Exception:
    """ATT-SVM: why no p has D[i, t] . p >= b_i for every t != alpha_i (b_i = 0: relaxed)."""

    def alone(i: int) -> str | None:
        if b[i] == 0 or feasible([i]):
            return None
        return unrankable(D, i, alpha, "p")

    def jointly(group: list[int]) -> str:
        relaxed = [i for i in group if b[i] == 0]
        return not_jointly(group, "p", f" (relaxed among them: {relaxed})" if relaxed else "")

    prefix = "alpha: ATT-SVM is infeasible:"
    return explain(prefix, len(alpha), feasible, alone, jointly)


def token_sets(sets: np.ndarray, feasible: Feasible) -> Exception:
    """Set-SVM: why no p gives each optimal set (n, T) one common score above the other tokens."""

    def alone(i: int) -> str | None:
        if feasible([i]):
            return None
        inside = np.flatnonzero(sets[i]).tolist()
        return (
            f"in sequence {i} no p gives the tokens {inside} one common score above all "
            "other tokens"
        )

    def jointly(group: list[int]) -> str:
        return (
            f"every sequence is feasible on its own, but sequences {group} cannot be served "
            "by one common p"
        )

    return explain("sets: Set-SVM is infeasible:", len(sets), feasible, alone, jointly)


def classifier(n: int, feasible: Feasible) -> Exception:
    """v-SVM: why no v separates the n selected tokens through the origin."""

    def alone(i: int) -> str | None:
        return None if feasible([i]) else f"row {i} of R is zero, so Y_i v^T r_i = 0 for every v"

    def jointly(group: list[int]) -> str:
        return f"no v has Y_i v^T r_i > 0 for all of the samples {group}"

    prefix = "R, Y: the selected tokens are not linearly separable through the origin:"
    return explain(prefix, n, feasible, alone, jointly)


def key_query(D: np.ndarray, alpha: np.ndarray, queries: np.ndarray, feasible: Feasible) -> Exception:
    """W-SVM: why no W ranks every selected token first under the queries (n, d)."""

    def alone(i: int) -> str | None:
        if feasible([i]):
            return None
        if not queries[i].any():
            return f"the query z_{i} of sequence {i} is zero, so x^T W z_{i} = 0 for every W"
        return unrankable(D, i, alpha, "W")

    def jointly(group: list[int]) -> str:
        return not_jointly(group, "W")

    return explain("alpha: W-SVM is infeasible:", len(D), feasible, alone, jointly)
