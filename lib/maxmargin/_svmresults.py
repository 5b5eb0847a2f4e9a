"""The results of the SVMs of :mod:`maxmargin.svm` (re-exported there), with the norm and unit
direction every result computes from its solution, and the cvxpy program the ``*_svm_problem``
functions return.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import _least_distance as _ldp

if TYPE_CHECKING:
    import cvxpy as cp


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.array(a)
    a.setflags(write=False)
    return a


def _margin(norm: float) -> float:
    return float(np.inf) if norm == 0 else 1.0 / norm


def _nuclear_norm(W: np.ndarray) -> float:
    """||W||_* (the sum of the singular values) without overflow: W divided by its largest entry
    first."""
    top = float(np.abs(W).max(initial=0.0))
    if top == 0 or not np.isfinite(top):
        return top
    return top * float(np.linalg.svd(W / top, compute_uv=False).sum())


class _Solution:
    """``norm`` and ``direction`` of a max-margin result, from its solution (the field named by
    ``_solution``: p, v or W), next to its stored ``margin`` = 1 / norm: every SVM result has
    the three under the same names."""

    _solution = "p"

    @property
    def norm(self) -> float:
        """||solution|| (Frobenius for W), computed without overflow."""
        return _ldp.norm(getattr(self, self._solution))

    @property
    def direction(self) -> np.ndarray:
        """The unit direction solution / ||solution||, same shape (zeros when it is 0)."""
        solution = getattr(self, self._solution)
        return solution / self.norm if self.norm > 0 else np.zeros_like(solution)


class CvxpyProgram(NamedTuple):
    """A max-margin problem written out in cvxpy (the ``*_svm_problem`` functions): call
    ``problem.solve(solver=cp.CLARABEL)``, then read ``variable.value``.

    A named tuple, so ``problem, variable = mm.att_svm_problem(...)`` unpacks it.

    Attributes
    ----------
    problem : the ``cvxpy.Problem``, min of the sum of squares of the variable under the
        max-margin constraints.
    variable : the ``cvxpy.Variable`` it solves for (p, v or W).

    Examples
    --------
    >>> import cvxpy as cp
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> program = mm.att_svm_problem(X, [0])
    >>> program.variable.name()
    'p'
    >>> _ = program.problem.solve(solver=cp.CLARABEL)
    >>> np.round(program.variable.value, 4)  # the solution of mm.att_svm(X, [0])
    array([ 0.5, -0.5])
    """

    problem: cp.Problem
    variable: cp.Variable


@dataclass(frozen=True, eq=False)
class SVMResult(_Solution):
    """Solution of ATT-SVM for one selection ``alpha``.

    Attributes
    ----------
    p : (d,) the max-margin direction `p^mm` (not normalised).
    margin : `1 / ||p||` (inf when p = 0, i.e. every sequence is relaxed).
    constraints : (n, T) values `(x_{i,alpha_i} - x_it)^T W p`; inf at the selected token.
    support : (n, T) bool, constraints equal to `b_i` within ``tol``; False at the selected token.
    alpha : (n,) the selected token of each sequence.
    multipliers : (n, T) Lagrange multipliers `mu >= 0` with `p = sum mu_it (k_{i,alpha_i} - k_it)`;
        zero off the support and at the selected token.
    relaxed : (n,) bool, sequences whose constraints are relaxed to >= 0.
    norm_name : the norm p minimizes: "l2" (the default), "l1", "linf" or "l<q>" such as "l1.75"
        (``mm.att_svm(..., norm=...)``; see :mod:`maxmargin.normsvm`).
    dual : (d,) `Lambda = sum_it mu_it (k_{i,alpha_i} - k_it)`, the subgradient of the norm at p
        that certifies optimality (dual norm of `Lambda <= 1`, `<Lambda, p> = ||p||`), or None for l2
        (whose certificate is the least-distance one).
    duality_gap : `||p|| - sum_it mu_it b_i` (``|gap| <= NORM_TOL * ||p||``), or None for l2.
    norm : (property) `||p||` in the SVM's own norm.
    direction : (property) (d,) the unit vector `p / ||p||` in that norm (zeros when p = 0).

    The arrays are read-only.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> res = mm.att_svm(X, [0])  # p = (1/2, -1/2) = mu (x_0 - x_1) with mu = 1/2
    >>> np.round(res.multipliers, 4)
    array([[0. , 0.5]])
    >>> res.constraints  # the one constraint is tight
    array([[inf,  1.]])
    >>> np.round(res.direction, 4), round(res.norm, 4)
    (array([ 0.7071, -0.7071]), 0.7071)
    """

    p: np.ndarray
    margin: float
    constraints: np.ndarray
    support: np.ndarray
    alpha: np.ndarray
    multipliers: np.ndarray
    relaxed: np.ndarray
    norm_name: str = "l2"
    dual: np.ndarray | None = None
    duality_gap: float | None = None

    @property
    def norm(self) -> float:
        """`||p||` in the SVM's own norm (l2 by default), computed without overflow."""
        if self.norm_name == "l2":
            return _ldp.norm(self.p)
        return _normsvm().value(self.p, _normsvm().from_name(self.norm_name))


@dataclass(frozen=True, eq=False)
class SetSVMResult(_Solution):
    """Solution of the set version of ATT-SVM (one optimal set of tokens per sequence).

    Attributes
    ----------
    p : (d,) the max-margin direction.
    margin : `1 / ||p||`.
    constraints : (n, T) for `tau` outside the set, min over t in `O_i` of `(x_it - x_itau)^T W p`;
        inf inside the set.
    support : (n, T) bool, constraints equal to 1 within ``tol``.
    sets : (n, T) bool, the optimal sets `O_i`.
    norm : (property) `||p||`.
    direction : (property) (d,) the unit vector `p / ||p||`.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    >>> res = mm.set_svm(X, np.array([[True, True, False]]))
    >>> res.constraints, res.support
    (array([[inf, inf,  1.]]), array([[False, False,  True]]))
    """

    p: np.ndarray
    margin: float
    constraints: np.ndarray
    support: np.ndarray
    sets: np.ndarray


@dataclass(frozen=True, eq=False)
class VSVMResult(_Solution):
    """Solution of the v-SVM on the selected tokens.

    Attributes
    ----------
    v : (d,) the max-margin classifier `v^mm`.
    margin : `1 / ||v||`.
    margins : (n,) values `Y_i v^T r_i` (all >= 1).
    support : (n,) bool, margins equal to 1 within ``tol`` (the support set S).
    multipliers : (n,) Lagrange multipliers with `v = sum lambda_i Y_i r_i`; zero off the support.
    norm : (property) `||v||`.
    direction : (property) (d,) the unit vector `v / ||v||`.

    Examples
    --------
    >>> res = mm.v_svm(np.array([[1.0, 1.0], [1.0, -1.0]]), [1.0, -1.0])
    >>> res.support  # both samples on the margin
    array([ True,  True])
    >>> np.round(res.multipliers, 4)  # v = 0.5 (1, 1) - 0.5 (1, -1) = (0, 1)
    array([0.5, 0.5])
    """

    _solution = "v"

    v: np.ndarray
    margin: float
    margins: np.ndarray
    support: np.ndarray
    multipliers: np.ndarray


@dataclass(frozen=True, eq=False)
class WSVMResult(_Solution):
    """Solution of the W-SVM for one selection ``alpha``, in the Frobenius norm (the default),
    the nuclear norm (``mm.w_svm(..., norm="nuclear")``) or another norm of ``W_NORMS`` (spectral,
    entrywise l1, `l_inf`, `l_q`; see :mod:`maxmargin.normsvm`).

    Attributes
    ----------
    W : (d, d) the max-margin key-query matrix `W^mm` (`W^mm_*` for the nuclear norm).
    margin : `1 / ||W||` in the SVM's own norm: `1 / ||W||_F`, or `1 / ||W||_*` for the nuclear norm.
    constraints : (n, T) values `(x_{i,alpha_i} - x_it)^T W z_i`; inf at the selected token.
    support : (n, T) bool, constraints equal to 1 within ``tol``.
    alpha : (n,) the selected token of each sequence.
    norm_name : "frobenius", "nuclear", "spectral", "l1", "linf" or "l<q>" (e.g. "l1.75"), the
        norm that W minimizes (the field is not called ``norm``: that is the number `||W||`, as in
        every SVM result).
    multipliers : (n, T) Lagrange multipliers `mu >= 0` of `min ||W||` (not squared), zero at the
        selected token, or None for the Frobenius norm (whose certificate is the
        least-distance one of ``maxmargin._least_distance``).
    dual : (d, d) `Lambda = sum_it mu_it (x_{i,alpha_i} - x_it) z_i^T`, the subgradient of the
        norm at W that certifies optimality (dual norm of `Lambda <= 1`, `<Lambda, W> = ||W||`; for
        the nuclear norm `||Lambda||_2 <= 1`), or None for the Frobenius norm.
    duality_gap : `||W|| - sum_it mu_it`, in the units of `||W||` (the certificate bounds
        ``|duality_gap| <= NUCLEAR_TOL * ||W||`` (or ``NORM_TOL``)), or None for the Frobenius norm.
    norm : (property) `||W||` in the SVM's own norm (`||W||_F`, `||W||_*` = the sum of the singular
        values, ...), computed without overflow.
    direction : (property) (d, d) the matrix W / norm, of norm 1 in that norm.

    The arrays are read-only.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> res = mm.w_svm(X, [0], queries=[1.0, 0.0])
    >>> res.constraints, res.support
    (array([[inf,  1.]]), array([[False,  True]]))
    >>> round(res.norm, 4)  # = ||p^mm|| of ATT-SVM on the tokens, since ||p|| = 1
    0.7071
    >>> res.norm_name, res.multipliers, res.duality_gap
    ('frobenius', None, None)
    >>> nuc = mm.w_svm(X, [0], queries=[1.0, 0.0], norm="nuclear")  # rank 1: the same W
    >>> nuc.norm_name, round(nuc.norm, 4), np.round(nuc.multipliers, 4)
    ('nuclear', 0.7071, array([[0.    , 0.7071]]))
    """

    _solution = "W"

    W: np.ndarray
    margin: float
    constraints: np.ndarray
    support: np.ndarray
    alpha: np.ndarray
    norm_name: str = "frobenius"
    multipliers: np.ndarray | None = None
    dual: np.ndarray | None = None
    duality_gap: float | None = None

    @property
    def norm(self) -> float:
        """`||W||` in the SVM's own norm (Frobenius, nuclear, spectral, entrywise l1, `l_inf`, `l_q`)."""
        if self.norm_name == "nuclear":
            return _nuclear_norm(self.W)
        if self.norm_name == "frobenius":
            return _ldp.norm(self.W)
        return _normsvm().value(self.W, _normsvm().from_name(self.norm_name))


def _normsvm():
    """The module of the other norms (imported on use: it imports this one)."""
    from . import normsvm

    return normsvm
