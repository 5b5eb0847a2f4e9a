"""Optimal tokens, support tokens, and locally-optimal token selections.

A selection ``alpha`` picks one token per sequence (shape (n,), 0-based). It is *feasible* when some
prompt p ranks every selected token strictly first, i.e. its ATT-SVM exists. It is *locally optimal*
when, in addition, each selected token has a strictly higher score than every *support* token of its
sequence (the tokens whose ATT-SVM constraint is tight): gamma_{i alpha_i} > gamma_it for t in T_i.

Every comparison of scores here (and in :mod:`.traps`) follows one tie rule,
``maxmargin.problem.tie_tolerances``: two scores of sequence i tie when they differ by at
most tol_i = 16 (d + 2) eps s_i, a bound on the rounding of a difference of two computed scores
(s_i = max_t sum_j |v_j x_itj|), and a score is strictly higher than another only when it
exceeds it by more than tol_i. Scores equal in exact arithmetic can come out of float64 one
ulp apart (summed in another order): such a tie is a tie, never a strict winner. So a support
token within tol_i of the selected token's score is a violation: "strictly higher" in the
definition of local optimality means higher beyond rounding, and a tie is not strict.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _checks
from ._attsvm import _att_inputs, _att_svm, _data_name, _is_feasible
from ._numerics import _optimal_indices
from .problem import Problem, problem, tie_tolerances, unit_keys
from .svm import SVMResult


def optimal_indices(X, Y, v) -> np.ndarray:
    """(n,) index of the highest-score token of each sequence, `opt_i = argmax_t gamma_it`.

    Raises ``ValueError`` if a sequence has two tokens tied for the highest score: scores within
    `tol_i = 16 (d + 2) eps s_i` of each other (``maxmargin.problem.tie_tolerances``), with
    `s_i = max_t sum_j |v_j x_itj|` the scale of the rounding of that sequence's scores, so that
    the verdict does not depend on the units of X or v (``optimal_indices(X, Y, 1e-14 * v)`` is
    ``optimal_indices(X, Y, v)``). Scores equal in exact arithmetic differ by at most about
    `d eps s_i` once computed, below tol_i; scores further apart are told apart, also when they
    cancel (1 and 1 - 1e-6 computed from terms of size 1e6).

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).

    Returns
    -------
    (n,) int array : opt_i for each sequence.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,), v not
        (d,)), a label is not -1 or +1, or a value is NaN or inf; the message names the
        argument. Two tokens tied for the highest score name "X, Y, v" and the sequence.
    TypeError : X, Y or v is not a real numeric array (None included).

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> mm.optimal_indices(X, [1.0], [1.0, 0.5]), mm.optimal_indices(X, [-1.0], [1.0, 0.5])
    (array([0]), array([1]))
    """
    return _optimal_indices(problem(X, Y, v))


def support_tokens(X, alpha, *, W=None) -> np.ndarray:
    """(n, T) bool mask of support tokens `T_i(alpha)`: the tight constraints of ATT-SVM(`alpha`).

    The same as ``mm.att_svm(X, alpha, W=W).support`` (fast solver, default ``tol``).

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.

    Returns
    -------
    (n, T) bool array : True at the support tokens; never at the selected token.

    Raises
    ------
    ValueError : bad inputs (as in :func:`att_svm`), or ATT-SVM(`alpha`) is infeasible.
    TypeError : X or W is not a real numeric array, or ``alpha`` does not hold integers.
    IllConditionedError : (a ValueError) as in :func:`att_svm`.

    Examples
    --------
    Selecting token 0 = (1, 0): tokens (0, 1) and (0, -1) bind p = (1, 0), the far token (-3, 0)
    does not (its constraint value is 4):

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [-3.0, 0.0]]])
    >>> mm.support_tokens(X, [0])
    array([[False,  True,  True, False]])
    """
    K, alpha, relaxed = _att_inputs(X, alpha, W, None)
    return _att_svm(K, alpha, relaxed, name=_data_name(W)).support


@dataclass(frozen=True)
class Selection:
    """One feasible selection with its ATT-SVM and the local-optimality verdict.

    Attributes
    ----------
    alpha : tuple of n ints, the selected token of each sequence.
    svm : SVMResult, ATT-SVM(`alpha`).
    locally_optimal : bool, every support token scores strictly below the selected token of its
        sequence (below by more than the tie tolerance tol_i of the module docstring).
    violations : tuple of (i, t) pairs, the support tokens t of sequence i that score higher
        than the selected token or tie with it (within tol_i); empty when locally optimal.

    Examples
    --------
    >>> inst = mm.data.fig1(variant="a")  # token 2 ties token 1's score (0.9) and supports it
    >>> sel = mm.check_selection(inst.X, inst.Y, inst.v, [1], W=inst.W)
    >>> sel.alpha, sel.locally_optimal, sel.violations
    ((1,), False, ((0, 2),))
    """

    alpha: tuple[int, ...]
    svm: SVMResult
    locally_optimal: bool
    violations: tuple[tuple[int, int], ...]  # (i, t): support token t not strictly below alpha_i


def check_selection(X, Y, v, alpha, *, W=None) -> Selection:
    """Solve ATT-SVM(`alpha`) and test the local-optimality condition on its support tokens.

    Raises ``ValueError`` (from the solver) when ``alpha`` is infeasible. A support token whose
    score ties the selected token's (within `tol_i = 16 (d + 2) eps s_i`, the tie rule of
    :func:`optimal_indices`) is a violation: the selected token is not strictly higher.

    Parameters
    ----------
    X, Y, v, W : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,), (d, d) or None (W
        keyword-only, default None: the identity).
    alpha : (n,) selected token of each sequence.

    Returns
    -------
    Selection : `alpha`, its ATT-SVM, the verdict and the violating support tokens.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,), v not
        (d,), W not (d, d)), a label is not -1 or +1, or a value is NaN or inf; the message names
        the argument. Also: ``alpha`` is not one index in [0, T) per sequence, or ATT-SVM(`alpha`)
        is infeasible.
    TypeError : X, Y, v or W is not a real numeric array (None for X, Y or v included),
        or ``alpha`` does not hold integers.
    IllConditionedError : (a ValueError) as in :func:`att_svm`.

    Examples
    --------
    In Fig. 1b the scores are (1, 0.9, 0): selecting token 1 leaves token 2 (score 0) as its only
    support token, so the selection is locally optimal.

    >>> inst = mm.data.fig1(variant="b")
    >>> sel = mm.check_selection(inst.X, inst.Y, inst.v, [1], W=inst.W)
    >>> sel.locally_optimal, sel.svm.support
    (True, array([[False, False,  True]]))
    """
    prob = problem(X, Y, v, W)
    return _check_selection(prob, _checks.indices(alpha, *prob.shape[:2]))


def _check_selection(prob: Problem, alpha: np.ndarray) -> Selection:
    """:func:`check_selection` on a validated problem (with its head) and alpha (n,)."""
    n = prob.shape[0]
    gamma = prob.scores
    result = _att_svm(prob.keys, alpha, name=_data_name(prob.W))
    selected = gamma[np.arange(n), alpha][:, None]
    strictly_below = selected - gamma > tie_tolerances(prob)[:, None]  # a tie is not strict
    bad = result.support & ~strictly_below
    violations = tuple((int(i), int(t)) for i, t in np.argwhere(bad))
    return Selection(tuple(int(a) for a in alpha), result, not violations, violations)


def is_locally_optimal(X, Y, v, alpha, *, W=None) -> bool:
    """True when ``alpha`` is feasible and beats all its support tokens in score (False if infeasible).

    "Beats" is strict beyond rounding: a support token whose score ties the selected token's
    (within `tol_i = 16 (d + 2) eps s_i`, as in :func:`optimal_indices`) makes the answer False.

    Parameters
    ----------
    X, Y, v, W : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,), (d, d) or None (W
        keyword-only, default None: the identity).
    alpha : (n,) selected token of each sequence.

    Returns
    -------
    bool : the verdict of :func:`check_selection`, or False when ATT-SVM(`alpha`) is infeasible.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,), v not
        (d,), W not (d, d)), a label is not -1 or +1, or a value is NaN or inf; the message names
        the argument. Also: ``alpha`` is not one index in [0, T) per sequence.
    TypeError : X, Y, v or W is not a real numeric array (None for X, Y or v included),
        or ``alpha`` does not hold integers.
    IllConditionedError : (a ValueError) as in :func:`att_svm`.

    Examples
    --------
    Token 1 (score 0.9) is locally optimal in Fig. 1b, not in Fig. 1a, where token 2 ties it:

    >>> a, b = mm.data.fig1(variant="a"), mm.data.fig1(variant="b")
    >>> mm.is_locally_optimal(b.X, b.Y, b.v, [1], W=b.W)
    True
    >>> mm.is_locally_optimal(a.X, a.Y, a.v, [1], W=a.W)
    False
    """
    prob, _ = unit_keys(problem(X, Y, v, W))  # a verdict: scale-free, whatever the multipliers
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
    X, Y, v, W : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,), (d, d) or None (W
        keyword-only, default None: the identity).
    max_cost : keyword-only, refuse (``ValueError`` naming ``max_cost`` and the estimate) when the
        worst-case cost ``maxmargin.optimality.enumeration_cost`` exceeds it. The default, 5 000
        units of 1 to 2 ms each (measured: 3 100 units took 6 s on a loaded 2-core machine),
        bounds the work to at most about 10 s; raise it to allow more.

    Returns
    -------
    list of Selection : one per feasible selection, in lexicographic order of `alpha`.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,), v not
        (d,), W not (d, d)), a label is not -1 or +1, or a value is NaN or inf; the message names
        the argument. Also: the estimated cost exceeds ``max_cost``, or ``max_cost`` is not a
        finite positive number.
    TypeError : X, Y, v or W is not a real numeric array (None for X, Y or v included),
        or ``max_cost`` is not a number.
    IllConditionedError : (a ValueError) as in :func:`att_svm`.

    Examples
    --------
    In Fig. 1b every token is a vertex of the keys' triangle, so the three selections are
    feasible; the two tokens with the highest scores are locally optimal:

    >>> inst = mm.data.fig1(variant="b")
    >>> found = mm.feasible_selections(inst.X, inst.Y, inst.v, W=inst.W)
    >>> [(s.alpha, s.locally_optimal) for s in found]
    [((0,), True), ((1,), True), ((2,), False)]
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

    Parameters
    ----------
    X, Y, v, W : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,), (d, d) or None (W
        keyword-only, default None: the identity).
    max_cost : keyword-only, cap on the estimated work (default 5 000 units, see
        :func:`feasible_selections`).

    Returns
    -------
    list of tuples : the locally-optimal selections `alpha`, each a tuple of n ints.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,), v not
        (d,), W not (d, d)), a label is not -1 or +1, or a value is NaN or inf; the message names
        the argument. Also: the estimated cost exceeds ``max_cost``, or ``max_cost`` is not a
        finite positive number.
    TypeError : X, Y, v or W is not a real numeric array (None for X, Y or v included),
        or ``max_cost`` is not a number.
    IllConditionedError : (a ValueError) as in :func:`att_svm`.

    Examples
    --------
    >>> a, b = mm.data.fig1(variant="a"), mm.data.fig1(variant="b")
    >>> mm.locally_optimal_indices(a.X, a.Y, a.v, W=a.W)  # equal non-optimal scores
    [(0,)]
    >>> mm.locally_optimal_indices(b.X, b.Y, b.v, W=b.W)
    [(0,), (1,)]
    """
    prob, _ = unit_keys(problem(X, Y, v, W))  # only the verdicts are returned: see selection_census
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
    total : ``T ** n``, the number of selections.
    feasible : selections whose ATT-SVM exists.
    locally_optimal : tuples of the locally-optimal selections.
    global_selection : (n,) tuple `opt_i = argmax_t gamma_it`.
    global_feasible : whether ATT-SVM(opt) exists.
    n_locally_optimal : (property) the number of locally-optimal selections.
    global_is_locally_optimal : (property) whether opt is among the locally-optimal selections.

    Examples
    --------
    >>> inst = mm.data.fig1(variant="b")
    >>> census = mm.selection_census(inst.X, inst.Y, inst.v, W=inst.W)
    >>> census.n_locally_optimal, census.global_is_locally_optimal
    (2, True)
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
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    v : (d,) head.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    max_cost : keyword-only, cap on the estimated work, passed to :func:`feasible_selections`
        (default 5 000 units, about 10 s).

    Returns
    -------
    SelectionCensus
        ``global_selection`` is `opt = argmax` of the scores (``ValueError`` on a tie, judged
        relative to the scores' scale as in :func:`optimal_indices`). The census reads only
        feasibility and support tokens, which do not depend on the units of X: it is the same
        for X * c (and v / c) at any c that float64 represents, also where the multipliers of the
        ATT-SVMs (which scale like `1 / c^2`) would not be.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, Y not (n,), v not
        (d,), W not (d, d)), a label is not -1 or +1, or a value is NaN or inf; the message names
        the argument. Also: two tokens of a sequence tie for the highest score, the estimated cost
        exceeds ``max_cost``, or ``max_cost`` is not a finite positive number.
    TypeError : X, Y, v or W is not a real numeric array (None for X, Y or v included),
        or ``max_cost`` is not a number.
    IllConditionedError : (a ValueError) as in :func:`att_svm`.

    Examples
    --------
    >>> inst = mm.data.fig1(variant="b")  # one sequence of three tokens
    >>> mm.selection_census(inst.X, inst.Y, inst.v, W=inst.W)
    SelectionCensus(total=3, feasible=3, locally_optimal=((0,), (1,)), global_selection=(0,),
                    global_feasible=True)
    """
    # The census needs only feasibility and the support tokens, which do not depend on the units
    # of the keys; the multipliers (1 / |k|^2) could leave float64 at the given units (keys near
    # 1e-160), so the selections are solved on keys scaled by a power of two to unit size.
    prob, _ = unit_keys(problem(X, Y, v, W))
    n, T, _ = prob.shape
    opt = tuple(int(t) for t in _optimal_indices(prob))
    found = _feasible_selections(prob, _checks.positive_float(max_cost, "max_cost"))
    return SelectionCensus(
        total=T ** n,
        feasible=len(found),
        locally_optimal=tuple(s.alpha for s in found if s.locally_optimal),
        global_selection=opt,
        global_feasible=any(s.alpha == opt for s in found),
    )
