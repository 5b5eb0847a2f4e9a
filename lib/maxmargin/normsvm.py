"""Max-margin problems in other norms: ATT-SVM in `l_q` (`q >= 1`, `l_inf`) and the W-SVM in the
entrywise `l_q` norms, `l_1`, `l_inf` and the spectral norm (issue 41).

Every problem is ``min N(x) s.t. <a_j, x> >= b_j`` (x the prompt p (d,), or W (d, d) with
`a_j = (x_{i,alpha_i} - x_it) z_i^T`), solved by cvxpy with Clarabel and returned only with a
**certificate**: multipliers `mu >= 0` (Clarabel's dual values) such that, each to the relative
tolerance ``NORM_TOL`` (1e-6), W is feasible, `mu_j > 0` only on tight constraints
(complementary slackness), `Lambda = sum_j mu_j a_j` has dual norm `N*(Lambda) <= 1` and
`<Lambda, x> = N(x)` (`Lambda` is a subgradient of N at x: the KKT conditions), and the duality gap
`N(x) - sum_j mu_j b_j` vanishes. The dual norms: `l_q <-> l_{q/(q-1)}`, `l_1 <-> l_inf`, spectral <->
nuclear. Any feasible x' has `N(x') >= <Lambda, x'> / N*(Lambda) >= sum mu_j b_j / N*(Lambda)`, so a
certified x is optimal to about 3 NORM_TOL (relative). A point that fails is refused with
:class:`~maxmargin.IllConditionedError` naming the data.

**Canonical point.** `l_1`, `l_inf` and the spectral norm are not strictly convex, and their optima
need not be unique (the spectral W-SVM's optimal face is large: a solver's point and another
optimum can have cosine 0.6). For these norms the returned x is the *canonical point*: the
least-Frobenius point of the optimal face, from a second solve `min ||x||_2^2 s.t. <a_j, x> >= b_j,`
``N(x) <= opt * (1 + CANONICAL_SLACK)``; the first solve's multipliers certify it (it lies within
CANONICAL_SLACK of the face). Compare runs with such SVMs through the **margin ratio**
(:func:`w_margin_ratio`, :func:`att_margin_ratio`), never through the cosine with one optimum.

**Scale.** The data are divided by powers of two near their largest entries (exact) before the
solve and x, `mu` are scaled back, so X -> c X gives x -> x / c wherever x is representable
(else ``ValueError`` naming ``X``). Sequences of very different scales are not rescaled one by
one (the least-distance solvers of ``maxmargin.svm`` do better there): such data end in a
failed certificate, refused.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import _checks
from ._attsvm import _att_inputs
from ._forward import _differences, _others
from ._least_distance import IllConditionedError
from ._svmsolve import _clarabel_certified, _kkt_verdict
from ._winputs import _w_inputs

if TYPE_CHECKING:
    import cvxpy as cp

__all__ = ["ATT_NORMS", "CANONICAL_SLACK", "NORM_TOL", "W_NORMS", "att_margin_ratio",
           "w_margin_ratio"]

#: The norms of ATT-SVM by name (``att_svm(..., norm=...)``); a number `q >= 1` names `l_q` too.
ATT_NORMS = ("l2", "l1", "linf")

#: The norms of the W-SVM by name (``w_svm(..., norm=...)``); a number q >= 1 names the
#: entrywise `l_q` norm too (2 is "frobenius"). l1, linf and `l_q` are entrywise (linf is the
#: largest `|entry|`, not the largest row sum); "spectral" is the largest singular value.
W_NORMS = ("frobenius", "nuclear", "spectral", "l1", "linf")

#: Relative tolerance of the certificate of every norm solved here (each KKT condition
#: relative to its own scale, as for the nuclear norm). Clarabel at 1e-10 meets it with
#: violations of about 1e-9 or less on random instances up to (6, 8, 10).
NORM_TOL = 1e-6

#: The optimal face of a non-strictly convex norm (`l_1`, `l_inf`, spectral) is taken as
#: ``N(x) <= opt * (1 + CANONICAL_SLACK)`` in the second (least-Frobenius) solve.
CANONICAL_SLACK = 1e-8

_NOT_UNIQUE = ("l1", "linf", "spectral")


class Norm(NamedTuple):
    """A validated norm: ``name`` ("l2", "frobenius", "nuclear", "spectral", "l1", "linf", or
    "l<q>" such as "l1.75") and its entrywise exponent ``q`` (nan for nuclear and spectral)."""

    name: str
    q: float


def _named(name: str) -> Norm:
    return Norm(name, {"l2": 2.0, "frobenius": 2.0, "l1": 1.0, "linf": math.inf}.get(name, math.nan))


def parse(norm, kind: str) -> Norm:
    """The norm argument of ``att_svm`` (kind "att") or ``w_svm`` (kind "w"): a name of
    ATT_NORMS / W_NORMS or a real number q >= 1 (1: "l1", 2: "l2" or "frobenius", inf: "linf").
    ValueError naming ``norm`` for an unknown name, NaN or q < 1; TypeError for other types."""
    names = ATT_NORMS if kind == "att" else W_NORMS
    norm = _checks._scalar(norm)
    if isinstance(norm, str):
        if norm in names:
            return _named(norm)
        hint = ""
        if kind == "w" and norm == "l2":
            hint = " ('l2' of a matrix is ambiguous: say 'frobenius' or 'spectral')"
        elif kind == "att" and norm in W_NORMS:
            hint = " (ATT-SVM's p is a vector: its l2 norm is 'l2')"
        raise ValueError(f"norm: expected one of {names} or a number q >= 1 (the l_q norm"
                         f"{', entrywise' if kind == 'w' else ''}), got {norm!r}{hint}")
    if isinstance(norm, (bool, np.bool_)) or not isinstance(norm, (int, float, np.integer,
                                                                    np.floating)):
        raise TypeError(f"norm: expected a name in {names} or a number q >= 1, got {norm!r} "
                        f"({type(norm).__name__})")
    try:
        q = float(norm)
    except OverflowError:  # a Python int beyond float64: l_q with q that large is l_inf
        q = math.inf
    if not q >= 1:  # NaN too
        raise ValueError(f"norm: the exponent q of l_q must be a number >= 1 (l_q is a norm only "
                         f"for q >= 1), got {norm!r}")
    if q == 1:
        return _named("l1")
    if q == math.inf:
        return _named("linf")
    if q == 2:
        return _named("l2" if kind == "att" else "frobenius")
    return Norm(f"l{q:.17g}", q)


def from_name(name: str) -> Norm:
    """The Norm of a result's ``norm_name``."""
    if name.startswith("l") and name not in ("l1", "l2", "linf"):
        return Norm(name, float(name[1:]))
    return _named(name)


def dual(norm: Norm) -> Norm:
    """The dual norm: l_q <-> l_{q/(q-1)}, l1 <-> l_inf, spectral <-> nuclear, l2 and Frobenius
    self-dual."""
    if norm.name == "spectral":
        return _named("nuclear")
    if norm.name == "nuclear":
        return _named("spectral")
    if norm.name in ("l2", "frobenius"):
        return norm
    q = norm.q
    if q == 1:
        return _named("linf")
    if q == math.inf:
        return _named("l1")
    conjugate = q / (q - 1)
    return Norm(f"l{conjugate:.17g}", conjugate)


def value(x: np.ndarray, norm: Norm) -> float:
    """N(x) without overflow or underflow: x divided by its largest |entry| first. Entrywise for
    the l_q norms; spectral and nuclear of a 2-d x."""
    x = np.asarray(x, dtype=np.float64)
    top = float(np.abs(x).max(initial=0.0))
    if top == 0 or not np.isfinite(top):
        return top
    unit = x / top  # signed: the singular values need the signs
    if norm.name in ("spectral", "nuclear"):
        s = np.linalg.svd(unit, compute_uv=False)
        return top * float(s[0] if norm.name == "spectral" else s.sum())
    q = norm.q
    if q == math.inf:
        return top
    if q == 1:
        return top * float(np.abs(unit).sum())
    return top * float(np.sum(np.abs(unit) ** q) ** (1.0 / q))


def objective(variable, norm: Norm):
    """N(variable) as a cvxpy expression; the entrywise norms of the flattened variable (for a
    matrix ``cp.norm(W, 1)`` and ``cp.norm(W, "inf")`` are column and row sums, not these)."""
    import cvxpy as cp

    if norm.name == "spectral":
        return cp.sigma_max(variable)
    if norm.name == "nuclear":
        return cp.normNuc(variable)
    flat = cp.vec(variable, order="C") if len(variable.shape) == 2 else variable
    if norm.q == 1:
        return cp.sum(cp.abs(flat))
    if norm.q == math.inf:
        return cp.max(cp.abs(flat))
    return cp.pnorm(flat, norm.q)


def kkt(rows: np.ndarray, b: np.ndarray, x: np.ndarray, mu: np.ndarray,
        norm: Norm) -> dict[str, float]:
    """The KKT violations of (x, mu) for min N(x) s.t. rows @ vec(x) >= b (rows (m, k), vec
    row-major), each relative to its scale, 0 when it holds exactly: primal feasibility (slack
    over |rows| |x| + 1), dual feasibility (-min mu / max |mu|), complementary slackness
    (sum mu |slack| / sum mu, mu clipped at 0 from here on), dual norm N*(Lambda) - 1 with
    Lambda = sum mu_j a_j, alignment |N(x) - <Lambda, x>| / N(x) and the duality gap
    |N(x) - sum mu_j b_j| / N(x)."""
    keys = ("primal feasibility", "dual feasibility", "complementary slackness", "dual norm",
            "alignment", "duality gap")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(mu))):
        return dict.fromkeys(keys, np.inf)
    flat = x.reshape(-1)
    slack = (rows @ flat - b) / (np.abs(rows) @ np.abs(flat) + 1.0)
    top = float(np.abs(mu).max(initial=0.0))
    positive = np.maximum(mu, 0.0)
    total = float(positive.sum())
    Lambda = (positive @ rows).reshape(x.shape)
    size = value(x, norm)
    size = size if size > 0 else np.inf
    return dict(zip(keys, (
        max(0.0, -float(slack.min(initial=0.0))),
        max(0.0, -float(mu.min(initial=0.0))) / top if top > 0 else np.inf,
        float(positive @ np.abs(slack)) / total if total > 0 else np.inf,
        max(0.0, value(Lambda, dual(norm)) - 1.0),
        abs(value(x, norm) - float(np.sum(Lambda * x))) / size,
        abs(value(x, norm) - float(positive @ b)) / size,
    )))


def certify(rows: np.ndarray, b: np.ndarray, x: np.ndarray, mu: np.ndarray, norm: Norm,
            name: str = "X") -> None:
    """IllConditionedError naming ``name`` and the worst KKT condition unless every violation of
    :func:`kkt` is at most NORM_TOL."""
    _kkt_verdict(kkt(rows, b, x, mu, norm), NORM_TOL, name, f"{norm.name} SVM")


class Solved(NamedTuple):
    """A certified solution: x (the shape asked for), mu (m,) >= 0, Lambda = sum mu_j a_j (the
    shape of x, scale-free) and the duality gap N(x) - sum mu_j b_j (in the units of N(x))."""

    x: np.ndarray
    mu: np.ndarray
    dual: np.ndarray
    gap: float


def solve(rows: np.ndarray, b: np.ndarray, shape: tuple, norm: Norm, name: str = "X",
          exponent: int = 0) -> Solved:
    """min N(x) s.t. rows @ vec(x) >= b for unit-scale rows (m, k) (the data divided by
    2^exponent, exact), certified, with x and mu scaled back by 2^-exponent (ValueError naming
    ``name`` when they leave float64). Feasibility must have been checked by the caller. For
    l1, l_inf and the spectral norm, x is the canonical (least-Frobenius) optimal point."""
    import cvxpy as cp

    variable = cp.Variable(shape, name="W" if len(shape) == 2 else "p")
    flat = cp.vec(variable, order="C") if len(shape) == 2 else variable
    constraint = rows @ flat >= b
    problem = cp.Problem(cp.Minimize(objective(variable, norm)), [constraint])
    _clarabel_certified(problem, name, f"{norm.name} SVM", "a feasible point")
    if constraint.dual_value is None or variable.value is None:
        raise IllConditionedError(f"{name}: cvxpy/Clarabel returns no multipliers for the "
                                  f"{norm.name} SVM")
    mu = np.asarray(constraint.dual_value, dtype=np.float64).reshape(-1)
    x = np.asarray(variable.value, dtype=np.float64)
    if norm.name in _NOT_UNIQUE:  # the least-Frobenius point of the optimal face
        optimum = max(value(x, norm), float(problem.value))
        face = cp.Problem(cp.Minimize(cp.sum_squares(flat)),
                          [rows @ flat >= b, objective(variable, norm)
                           <= optimum * (1 + CANONICAL_SLACK)])
        _clarabel_certified(face, name, f"{norm.name} SVM", "a feasible point")
        x = np.asarray(variable.value, dtype=np.float64)
    certify(rows, b, x, mu, norm, name)
    mu = np.maximum(mu, 0.0)
    Lambda = (mu @ rows).reshape(shape)
    gap = value(x, norm) - float(mu @ b)
    top = float(np.abs(x).max(initial=0.0))
    with np.errstate(over="ignore", under="ignore"):
        largest = np.ldexp(max(top, float(mu.max(initial=0.0))), exponent)
    if not (np.isfinite(largest) and (top == 0 or np.ldexp(top, exponent)
                                      >= np.finfo(np.float64).tiny)):
        raise ValueError(f"{name}: the {norm.name} SVM's solution scales like 1 / (the scale of "
                         f"the data) and its entries (about 2^{np.frexp(top)[1] + exponent}) "
                         "leave the range of float64 at these scales; rescale the data")
    return Solved(np.ldexp(x, exponent), np.ldexp(mu, exponent), Lambda,
                  float(np.ldexp(gap, exponent)))


# ----------------------------------------------------------------------------------------------
# The margin ratio: how close a direction is to an SVM's, in that SVM's norm
# ----------------------------------------------------------------------------------------------


def _ratio(values: np.ndarray, solution: np.ndarray, norm: Norm, optimum: float,
           argument: str) -> float:
    size = value(solution, norm)
    if not size > 0:
        raise ValueError(f"{argument}: the margin ratio of a zero {argument} is undefined")
    if not np.isfinite(size):
        raise ValueError(f"{argument}: the norm of {argument} overflows float64; rescale it")
    return float(np.min(values) / size * optimum)


def w_margin_ratio(X, W, alpha, *, queries, norm="frobenius", svm=None) -> float:
    """The margin ratio `rho_N(W) = gamma_N(W) N(W_N)` of a key-query matrix W against the W-SVM
    in the norm N: `gamma_N(W) = min_{i, t != alpha_i} (x_{i,alpha_i} - x_it)^T W z_i / N(W)` is
    W's margin in that norm and `N(W_N)` = 1 / (the SVM's margin). `rho <= 1`, with equality exactly
    when W is an optimum up to a positive scale (any optimum: the test for norms whose optimum
    is not unique, where a cosine with one optimum is not); negative when W misranks a token.

    Parameters
    ----------
    X : (n, T, d) tokens.
    W : (d, d) the key-query matrix to rate (e.g. a run's last iterate).
    alpha : (n,) the selected token of each sequence.
    queries : keyword-only (required), (n, d) or (d,), as in :func:`maxmargin.w_svm`.
    norm : keyword-only, the SVM's norm, as in :func:`maxmargin.w_svm` (default "frobenius").
    svm : keyword-only, a ``WSVMResult`` of the same X, `alpha`, queries and norm to reuse (its
        norm is read, not recomputed), or None (the default: solve ``w_svm``).

    Returns
    -------
    float : `rho_N(W)`, at most 1 (up to the SVM's tolerance).

    Raises
    ------
    ValueError : bad inputs as in :func:`maxmargin.w_svm`, W zero or not (d, d), or an ``svm``
        of another norm or selection (naming ``svm``); the SVM's own errors.
    TypeError : as in :func:`maxmargin.w_svm`, or ``svm`` not a WSVMResult.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]])
    >>> Z = np.eye(2)  # the constraints are W_11 >= 1 and W_22 >= 1
    >>> round(mm.normsvm.w_margin_ratio(X, 3 * np.eye(2), [0, 0], queries=Z, norm="spectral"), 4)
    1.0
    >>> round(mm.normsvm.w_margin_ratio(X, np.diag([1.0, 2.0]), [0, 0], queries=Z,
    ...                                 norm="linf"), 4)  # margin 1/2, optimum 1
    0.5
    """
    from . import svm as _svm

    X, D, alpha, Z = _w_inputs(X, alpha, queries)
    spec = parse(norm, "w")
    d = D.shape[2]
    W = _checks.finite(_checks.as_float_array(W, "W"), "W")
    if W.shape != (d, d):
        raise ValueError(f"W: expected shape ({d}, {d}), got {W.shape}")
    result = _svm.w_svm(X, alpha, queries=queries, norm=norm) if svm is None else svm
    _matches(result, _svm.WSVMResult, spec, alpha)
    others = _others(alpha, D.shape[1])
    each = np.broadcast_to(Z, (D.shape[0], d))
    values = np.einsum("ita,ia->it", D, each @ W.T)[others]
    return _ratio(values, W, spec, result.norm, "W")


def att_margin_ratio(X, p, alpha, *, W=None, norm="l2", svm=None) -> float:
    """The margin ratio `rho_N(p) = gamma_N(p) N(p_N)` of a prompt p against ATT-SVM in the norm N:
    `gamma_N(p) = min_{i, t != alpha_i} (x_{i,alpha_i} - x_it)^T W p / N(p)` and `N(p_N)` = 1 / (the
    SVM's margin); `rho <= 1`, equal to 1 exactly at the optima up to a positive scale.

    Parameters
    ----------
    X : (n, T, d) tokens.
    p : (d,) the prompt to rate.
    alpha : (n,) the selected token of each sequence.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    norm : keyword-only, the SVM's norm, as in :func:`maxmargin.att_svm` (default "l2").
    svm : keyword-only, an ``SVMResult`` of the same data and norm to reuse, or None (solve).

    Returns
    -------
    float : `rho_N(p)`, at most 1 (up to the SVM's tolerance).

    Raises
    ------
    ValueError : bad inputs as in :func:`maxmargin.att_svm`, p zero or not (d,), or an ``svm``
        of another norm or selection (naming ``svm``); the SVM's own errors.
    TypeError : as in :func:`maxmargin.att_svm`, or ``svm`` not an SVMResult.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])  # p_1 - p_2 >= 1: l1 optimum 1
    >>> round(mm.normsvm.att_margin_ratio(X, [2.0, -1.0], [0], norm="l1"), 4)  # margin 3 / 3
    1.0
    >>> round(mm.normsvm.att_margin_ratio(X, [1.0, 0.0], [0], norm="linf"), 4)  # optimum 1/2
    0.5
    """
    from . import svm as _svm

    K, alpha, _ = _att_inputs(X, alpha, W, None)
    spec = parse(norm, "att")
    p = _checks.vector(p, K.shape[2], "p")
    result = _svm.att_svm(X, alpha, W=W, norm=norm) if svm is None else svm
    _matches(result, _svm.SVMResult, spec, alpha)
    if np.any(result.relaxed):
        raise ValueError("svm: the margin ratio is defined for an SVM without relaxed sequences")
    D = _differences(K, alpha)
    values = (D @ p)[_others(alpha, K.shape[1])]
    return _ratio(values, p, spec, result.norm, "p")


def _matches(result, cls, spec: Norm, alpha: np.ndarray) -> None:
    if not isinstance(result, cls):
        raise TypeError(f"svm: expected a {cls.__name__}, got {type(result).__name__}")
    if result.norm_name != spec.name:
        raise ValueError(f"svm: the SVM is in the norm {result.norm_name!r}, not {spec.name!r}")
    if not np.array_equal(result.alpha, alpha):
        raise ValueError("svm: the SVM is of another selection alpha")
