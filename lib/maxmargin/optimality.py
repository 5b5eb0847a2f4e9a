"""Optimal tokens, support tokens, and locally-optimal token selections.

A selection ``alpha`` picks one token per sequence (shape (n,), 0-based). It is *feasible* when some
prompt p ranks every selected token strictly first, i.e. its ATT-SVM exists. It is *locally optimal*
when, in addition, each selected token has a strictly higher score than every *support* token of its
sequence (the tokens whose ATT-SVM constraint is tight): gamma_{i alpha_i} > gamma_it for t in T_i.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _checks
from .problem import Problem, problem
from .svm import SVMResult, _att_inputs, _att_svm, _is_feasible


def optimal_indices(X, Y, v) -> np.ndarray:
    """(n,) index of the highest-score token of each sequence, opt_i = argmax_t gamma_it.

    Raises ``ValueError`` if a sequence has two tokens tied for the highest score.
    """
    return _optimal_indices(problem(X, Y, v).scores)


def _optimal_indices(gamma: np.ndarray) -> np.ndarray:
    """:func:`optimal_indices` of validated scores (n, T)."""
    top = np.sort(gamma, axis=1)[:, -2:]
    tied = np.isclose(top[:, 0], top[:, 1], rtol=0.0, atol=1e-12)
    if np.any(tied):
        i = int(np.argmax(tied))
        raise ValueError(f"X, Y, v: sequence {i} has two tokens tied for the highest score "
                         f"{top[i, 1]:.6g}; the optimal token is not unique")
    return np.argmax(gamma, axis=1)


def support_tokens(X, alpha, *, W=None) -> np.ndarray:
    """(n, T) bool mask of support tokens T_i(alpha): the tight constraints of ATT-SVM(alpha)."""
    K, alpha, relaxed = _att_inputs(X, alpha, W, None)
    return _att_svm(K, alpha, relaxed).support


@dataclass(frozen=True)
class Selection:
    """One feasible selection with its ATT-SVM and the local-optimality verdict."""

    alpha: tuple[int, ...]
    svm: SVMResult
    locally_optimal: bool
    violations: tuple[tuple[int, int], ...]  # (i, t): support token t scores >= the selected token


def check_selection(X, Y, v, alpha, *, W=None) -> Selection:
    """Solve ATT-SVM(alpha) and test the local-optimality condition on its support tokens.

    Raises ``ValueError`` (from the solver) when ``alpha`` is infeasible.
    """
    prob = problem(X, Y, v, W)
    return _check_selection(prob, _checks.indices(alpha, *prob.shape[:2]))


def _check_selection(prob: Problem, alpha: np.ndarray) -> Selection:
    """:func:`check_selection` on a validated problem (with its head) and alpha (n,)."""
    n = prob.shape[0]
    gamma = prob.scores
    result = _att_svm(prob.keys, alpha)
    selected = gamma[np.arange(n), alpha][:, None]
    bad = result.support & (gamma >= selected)
    violations = tuple((int(i), int(t)) for i, t in np.argwhere(bad))
    return Selection(tuple(int(a) for a in alpha), result, not violations, violations)


def is_locally_optimal(X, Y, v, alpha, *, W=None) -> bool:
    """True when ``alpha`` is feasible and beats all its support tokens in score (False if infeasible)."""
    prob = problem(X, Y, v, W)
    alpha = _checks.indices(alpha, *prob.shape[:2])
    if not _is_feasible(prob.keys, alpha):
        return False
    return _check_selection(prob, alpha).locally_optimal


#: Default cap on the estimated cost of an enumeration, in units of one small SVM solve (about
#: 1 ms on an idle 2-core machine, 2 ms on a loaded one; see :func:`enumeration_cost`): at
#: most about 10 s of work.
MAX_COST = 5_000
#: A solve of ROWS_PER_UNIT constraint entries (rows x (d + 1)) costs one more unit.
ROWS_PER_UNIT = 1000


def enumeration_cost(selectable: list[int], T: int, d: int) -> float:
    """Worst-case cost of :func:`feasible_selections`, in units of one small SVM solve.

    ``selectable[k]`` is the number of tokens of sequence k that can be selected on their own.
    The search tests every prefix of k >= 2 sequences (at most prod_{j<=k} selectable[j] of
    them, each an SVM of k (T - 1) rows) and solves the ATT-SVM of every full selection; each solve
    costs 1 + k (T - 1) (d + 1) / ROWS_PER_UNIT units (a fixed overhead plus the NNLS size).
    """
    n = len(selectable)
    cost, prefixes = 0.0, 1.0
    for k, count in enumerate(selectable, start=1):
        prefixes *= count
        solves = prefixes * ((k >= 2) + (k == n))  # prefix tests, then the final checks
        cost += solves * (1.0 + k * (T - 1) * (d + 1) / ROWS_PER_UNIT)
    return cost


def feasible_selections(X, Y, v, *, W=None, max_cost: float = MAX_COST) -> list[Selection]:
    """Every feasible selection, each with its ATT-SVM and local-optimality verdict.

    Depth-first over sequences: a partial selection that no prompt can realise on the first k
    sequences is pruned with all its completions, and tokens that cannot be selected even in their
    own sequence are never tried.

    Parameters
    ----------
    X : (n, T, d) tokens; Y : (n,) labels; v : (d,) head; W : (d, d) or None.
    max_cost : refuse (``ValueError`` naming ``max_cost`` and the estimate) when the worst-case
        cost :func:`enumeration_cost` exceeds it. The default, 5 000 units of 1 to 2 ms each
        (measured: 3 100 units took 6 s on a loaded 2-core machine), bounds the work to at most
        about 10 s; raise it to allow more.
    """
    prob = problem(X, Y, v, W)
    return _feasible_selections(prob, _checks.positive_float(max_cost, "max_cost"))


def _feasible_selections(prob: Problem, max_cost: float) -> list[Selection]:
    """:func:`feasible_selections` on a validated problem (with its head)."""
    n, T, d = prob.shape
    K = prob.keys
    if n * (T - 1) * (d + 1) / ROWS_PER_UNIT > max_cost:  # even one solve is too much
        raise ValueError(f"max_cost: one ATT-SVM of this instance costs "
                         f"{1 + n * (T - 1) * (d + 1) / ROWS_PER_UNIT:.3g} units, above "
                         f"max_cost={max_cost:g}")
    selectable = [[t for t in range(T) if _is_feasible(K[i:i + 1], np.array([t]))]
                  for i in range(n)]
    cost = enumeration_cost([len(c) for c in selectable], T, d)
    if cost > max_cost:
        raise ValueError(
            f"max_cost: enumerating the selections of this instance (n={n}, T={T}, d={d}) costs "
            f"up to {cost:.3g} units (1 to 2 ms each, so "
            f"{cost / 1000:.3g} to {cost / 500:.3g} s), above max_cost={max_cost:g}; use a smaller instance or "
            "raise max_cost")
    found: list[Selection] = []

    def extend(prefix: list[int]) -> None:
        k = len(prefix)
        if k == n:
            found.append(_check_selection(prob, np.array(prefix)))
            return
        for t in selectable[k]:
            candidate = prefix + [t]
            if k == 0 or _is_feasible(K[:k + 1], np.array(candidate)):
                extend(candidate)

    extend([])
    return found


def locally_optimal_indices(X, Y, v, *, W=None, max_cost: float = MAX_COST) -> list[tuple[int, ...]]:
    """All locally-optimal selections of a small instance, as tuples of token indices.

    ``max_cost`` bounds the work as in :func:`feasible_selections` (default: about 10 s).
    """
    prob = problem(X, Y, v, W)
    found = _feasible_selections(prob, _checks.positive_float(max_cost, "max_cost"))
    return [s.alpha for s in found if s.locally_optimal]


# ----------------------------------------------------------------------------------------------
# Counting selections
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectionCensus:
    """Counts of the selections of one instance (see :func:`selection_census`).

    Attributes
    ----------
    total : T**n, the number of selections.
    feasible : selections whose ATT-SVM exists.
    locally_optimal : tuples of the locally-optimal selections.
    global_selection : (n,) tuple opt_i = argmax_t gamma_it.
    global_feasible : whether ATT-SVM(opt) exists.
    """

    total: int
    feasible: int
    locally_optimal: tuple[tuple[int, ...], ...]
    global_selection: tuple[int, ...]
    global_feasible: bool

    @property
    def n_locally_optimal(self) -> int:
        """Number of locally-optimal selections."""
        return len(self.locally_optimal)

    @property
    def global_is_locally_optimal(self) -> bool:
        """Whether opt is among the locally-optimal selections."""
        return self.global_selection in self.locally_optimal


def selection_census(X, Y, v, *, W=None, max_cost: float = MAX_COST) -> SelectionCensus:
    """Enumerate the selections of a small instance and count the feasible and locally-optimal ones.

    Parameters
    ----------
    X : (n, T, d) tokens; Y : (n,) labels; v : (d,) head; W : (d, d) or None.
    max_cost : cap on the estimated work, passed to :func:`feasible_selections`.

    Returns
    -------
    SelectionCensus
        ``global_selection`` is opt = argmax of the scores (``ValueError`` on a tie).
    """
    prob = problem(X, Y, v, W)
    n, T, _ = prob.shape
    opt = tuple(int(t) for t in _optimal_indices(prob.scores))
    found = _feasible_selections(prob, _checks.positive_float(max_cost, "max_cost"))
    return SelectionCensus(
        total=T ** n,
        feasible=len(found),
        locally_optimal=tuple(s.alpha for s in found if s.locally_optimal),
        global_selection=opt,
        global_feasible=any(s.alpha == opt for s in found),
    )
