"""Trap sets: groups of sequences whose optimal tokens gradient descent may never select.

Let opt_i = argmax_t gamma_it. For a non-empty proper subset S of the sequences let q be the
ATT-SVM of the optimal tokens of the sequences *not* in S (constraints only for i not in S),
and in each sequence i in S let t_i be the non-optimal token that q ranks first. S is a *trap
set* when every token u of every sequence i in S satisfies

* gap_u > 1 if gamma_iu != gamma_{i t_i} (in particular u = opt_i), and
* gap_u >= 0 if gamma_iu == gamma_{i t_i} (t_i ranked first; ties allowed),

with gap_u = (x_{i t_i} - x_iu)^T W q. With equal non-optimal scores this reads: q ranks a
non-optimal token first and puts the optimal token beyond the margin. "Equal" scores are those
that tie by the rule of :mod:`.optimality` (within tol_i = 16 (d + 2) eps s_i of each other,
relative to the scale s_i = max_t sum_j |v_j x_itj| of sequence i alone).

Why (a heuristic derivation, not a theorem of the paper). Along p = R q the descent direction
from sequence i is a positive multiple of sum_u s_iu (gamma_iu - f_i) (k_iu - k_{i t_i}), and
s_iu ~ exp(-R gap_u). The sequences outside S hold q through forces of order exp(-R) (their
support tokens sit at gap 1). In a sequence of S a token u with a different score exerts a force
of order exp(-R gap_u): toward k_iu (escape) if gamma_iu > gamma_{i t_i}, away from it (an extra
SVM constraint that bends q) if gamma_iu < gamma_{i t_i}; with gap_u > 1 both are negligible
against exp(-R), and their sum along the run is finite. Tokens with the same score as t_i exert
only higher-order forces (moving attention between equal scores does not change f_i), so they
only need to stay ranked at or below t_i. The criterion is therefore a *sufficient* condition
for q to be a locally stable direction whose induced selection never reaches opt; it is checked
numerically (``tests/lib/test_traps.py``), not proved.

The stability is asymptotic: the start must have a large norm and point close to q. The basin
shrinks as ``escape_gap`` approaches 1 and when a token with the score of t_i is ranked just
behind it (gradient descent can hand the attention to that token at no cost, and the optimal
token may be inside the margin measured from there).

The criterion is not necessary for gradient descent to miss opt: with unequal scores a
lower-score token inside the margin (0 < gap_u <= 1) bends the direction toward the ATT-SVM of
another selection, which may be locally optimal (the paper's local convergence), and the
selection stays away from opt. With equal non-optimal scores nothing can bend q (a sequence of
S has no lower-score token): every locally-optimal selection alpha != opt (see
:mod:`.optimality`) has S = {i : alpha_i != opt_i} as a trap set inducing alpha. The converse
fails: a trap set may leave a token with the score of t_i inside the margin (0 <= gap_u <= 1),
and then its induced selection is not locally optimal in that strict sense.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

from . import _checks
from ._attsvm import _att_svm, _is_feasible
from ._least_distance import norm as vector_norm
from ._least_distance import row_norms
from ._numerics import _optimal_indices
from .problem import problem, tie_tolerances, unit_keys
from .svm import IllConditionedError

GAP_TOL = 1e-9    # gap_u > 1 + GAP_TOL * max(1, ||k_{i t_i} - k_iu|| ||q||)
# Equal scores: |gamma_iu - gamma_{i t_i}| <= tol_i, the tie rule of problem.tie_tolerances (per
# sequence: a large score in another sequence must not make distinct scores of this one equal).


@dataclass(frozen=True, eq=False)
class TrapSet:
    """One trap set.

    Attributes
    ----------
    sequences : the sequences of S, 0-based and sorted.
    q : (d,) read-only ATT-SVM of the optimal tokens of the sequences outside S.
    selection : (n,) the induced selection `alpha`: opt_i outside S, `t_i` inside S.
    escape_gap : the smallest gap_u over the tokens of the S-sequences that must lie beyond
        the margin (scores different from `gamma_{i t_i}`); > 1, larger means a deeper trap.
    minimal : no proper subset of S is a trap set. A trap set that is not minimal has its own
        q and induced selection (it loses every sequence of S, not only those of a minimal
        subset), and gradient descent can end there (``tests/lib/test_traps.py`` has an
        instance); ``trap_sets(..., minimal_only=False)`` lists it.

    Examples
    --------
    >>> inst = mm.data.trap_counterexample()
    >>> trap = mm.trap_sets(inst.X, inst.Y, inst.v, W=inst.W)[0]
    >>> trap.sequences, trap.selection, trap.minimal  # sequence 0 is held on its token 1
    ((0,), (1, 0), True)
    """

    sequences: tuple[int, ...]
    q: np.ndarray
    selection: tuple[int, ...]
    escape_gap: float
    minimal: bool = True


def trap_sets(X, Y, v, *, W=None, max_sequences: int = 12,
              minimal_only: bool = True) -> list[TrapSet]:
    """The trap sets of an instance (see the module docstring for the criterion): the minimal
    ones by default, every one with ``minimal_only=False``.

    The criterion (module ``maxmargin.traps``): for a non-empty proper subset S of the sequences,
    let q be the ATT-SVM of the optimal tokens of the sequences outside S, and `t_i` the
    non-optimal token that q ranks first in each sequence i of S. S is a trap set when every
    token u of those sequences has `gap_u = (x_{i t_i} - x_iu)^T W q > 1` if `gamma_iu` differs from
    `gamma_{i t_i}` (the optimal token included), and gap_u >= 0 if it equals it.

    Subsets S are tried by increasing size; every S whose complement's ATT-SVM is infeasible is
    skipped. With ``minimal_only`` supersets of a trap set already found are skipped too (they
    are not minimal). A non-minimal trap set has its own q and induced selection, and gradient
    descent can be caught by it (it then loses every sequence of S): a classification of runs
    by trap sets needs them all. The search solves up to `2^n - 2` ATT-SVMs, hence
    ``max_sequences``.

    Tolerances: a gap counts as beyond the margin when
    gap_u > 1 + 1e-9 * max(1, `||k_{i t_i} - k_iu|| ||q||`) (the scale of gap_u in the solver's
    rounding) and as ranked first when gap_u >= -1e-9 * max(1, `||k_{i t_i} - k_iu|| ||q||`);
    two scores of sequence i are equal when they tie by the rule of ``mm.optimal_indices``
    (within `16 (d + 2) eps s_i`, `s_i = max_t sum_j |v_j x_itj|` of that sequence alone), and the
    highest score ties by the same rule. Every test is relative, and q is solved on keys scaled
    to unit size, so the trap sets of X * c (with v / c, or any head) are those of X, and their
    q scales like 1 / c, at any c that float64 represents.

    Parameters
    ----------
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    v : (d,) head.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    max_sequences : keyword-only, largest n accepted (default 12).
    minimal_only : keyword-only, return only the minimal trap sets (True, the default), or every
        trap set, each with its ``minimal`` flag.

    Returns
    -------
    list of TrapSet : sorted by (size, sequences); empty when n = 1 (S must be proper).

    Raises
    ------
    ValueError : bad shapes or values, two tokens tied for the highest score in a sequence,
        `n > max_sequences`, or ``max_sequences`` < 1.
    IllConditionedError : (a ValueError) the ATT-SVM of some complement is ill-conditioned
        (never read as "cannot be separated").
    TypeError : non-numeric arrays, a non-integer ``max_sequences`` or a non-boolean
        ``minimal_only``.

    Examples
    --------
    In the counterexample, the ATT-SVM of sequence 1 alone is q = (1, 0, 0), which ranks sequence
    0's non-optimal token (key (0, 0), logit 0) above its optimal one (key (-2, 3), logit -2) by a
    gap of 2 > 1:

    >>> inst = mm.data.trap_counterexample()
    >>> [trap] = mm.trap_sets(inst.X, inst.Y, inst.v, W=inst.W)
    >>> trap.sequences, bool(np.allclose(trap.q, [1.0, 0.0, 0.0])), round(trap.escape_gap, 4)
    ((0,), True, 2.0)
    """
    prob = problem(X, Y, v, W)
    n, T, d = prob.shape
    max_sequences = _checks.positive_int(max_sequences, "max_sequences")
    minimal_only = _checks.flag(minimal_only, "minimal_only")
    if n > max_sequences:
        raise ValueError(f"X: n={n} sequences exceed max_sequences={max_sequences}; the search "
                         f"needs up to 2^n = {2 ** n} SVM solves (raise max_sequences to allow)")
    opt = _optimal_indices(prob)  # refuses two tokens tied for the highest score
    # The criterion is scale-free (gap_u = (k_{i t_i} - k_iu)^T q does not change with the units
    # of the keys): solve on keys scaled by a power of two to unit size, where neither q nor the
    # SVM's multipliers (1 / |k|^2) leave float64, and give q back in the units of the data.
    unit, e = unit_keys(prob)
    gamma, K = prob.scores, unit.keys
    score_tol = tie_tolerances(prob)  # (n,): sequence i's scores tie within score_tol[i]

    found: list[TrapSet] = []
    for size in range(1, n):
        for S in combinations(range(n), size):
            # found holds only smaller sets (and S itself is new): a subset is a proper one
            covered = any(set(t.sequences) < set(S) for t in found)
            if covered and minimal_only:
                continue
            trap = _trap(K, gamma, opt, S, score_tol, minimal=not covered)
            if trap is not None:
                found.append(trap if e == 0 else replace(trap, q=_readonly(np.ldexp(trap.q, -e))))
    return found


def _trap(K, gamma, opt, S, score_tol, minimal: bool = True) -> TrapSet | None:
    """The trap set S with its q, or None (S fails the criterion or its complement is
    infeasible). K (n, T, d) keys, gamma (n, T) scores, opt (n,), score_tol (n,) the tie
    tolerances of the scores, all validated; ``minimal`` is stored as the set's flag."""
    n, T, _ = K.shape
    keep = np.setdiff1d(np.arange(n), S)
    try:
        q = _att_svm(K[keep], opt[keep]).p  # the keys as tokens, W = I: x^T W p = k^T p
    except IllConditionedError:  # not a verdict: let the caller see it
        raise
    except ValueError:  # documented: the complement cannot be separated
        if _is_feasible(K[keep], opt[keep]):  # it can: an error of range (multipliers), not a verdict
            raise
        return None
    q_norm = vector_norm(q)
    selection = opt.copy()
    escape = np.inf
    for i in S:
        logit = K[i] @ q
        others = np.arange(T) != opt[i]
        top = logit[others].max()
        sizes = row_norms((K[i][:, None] - K[i][None]).reshape(T * T, -1)).reshape(T, T) * q_norm
        near = others & (logit >= top - GAP_TOL * np.maximum(1.0, sizes.max(axis=1)))
        t = int(np.flatnonzero(near)[0])  # the first of the non-optimal tokens ranked first
        gap = logit[t] - logit
        tol = GAP_TOL * np.maximum(1.0, sizes[t])
        differ = np.abs(gamma[i] - gamma[i, t]) > score_tol[i]
        differ[opt[i]] = True  # the optimal token must always lie beyond the margin
        if np.any(differ & (gap <= 1.0 + tol)) or np.any(~differ & (gap < -tol)):
            return None
        escape = min(escape, float(gap[differ].min()))
        selection[i] = t
    return TrapSet(tuple(int(i) for i in S), _readonly(q), tuple(int(a) for a in selection),
                   escape, bool(minimal))


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64)
    a.setflags(write=False)
    return a
