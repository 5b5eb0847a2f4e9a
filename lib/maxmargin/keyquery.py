"""Gradient descent on the key-query factors: W = K Q^T trained through K and Q.

The follow-up paper ("Transformers as Support Vector Machines", arXiv 2308.16898) trains the
attention through its key and query matrices K, Q (d, m) instead of their product W = K Q^T
(d, d), whose rank is then at most m. With one query z_i per sequence the logits are
x_it^T K Q^T z_i, and the gradients follow from the W-gradient G = dL/dW of :func:`~maxmargin.gd_W`
by the chain rule: dL/dK = G Q, dL/dQ = G^T K. Runs are batched over B starts as in
:mod:`.train`, on the same engines (:mod:`._engines`: the torch loop
:func:`maxmargin._torchdescent.descend` with :class:`~maxmargin._torchdescent.Factors`, or the
compiled kernel for one shared query and no penalty).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import _checks, _kernels
from .losses import EXPONENTIAL, Loss, rounded_mean
from ._descent import (Descent, _affordable_descent, _largest, _queries_shared, _readonly,
                       _record_count, _record_steps, _settings)
from ._engines import _descend_KQ, _descend_KQ_stack
from ._factors import _stacked_factors
from .problem import problem


def _unit_scaled(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each matrix (last two axes) of A divided by its largest |entry| (zero matrices kept), and
    those largest entries (...)."""
    top = np.max(np.abs(A), axis=(-2, -1))
    return A / np.where(top > 0, top, 1.0)[..., None, None], top


@dataclass(frozen=True)
class KQTrajectory:
    """A batch of B gradient-descent runs on the key-query factors (K, Q), recorded at R steps.

    The arrays are read-only.

    Attributes
    ----------
    K, Q : (R, B, d, m) the key and query factors at the recorded steps.
    risk : (R, B) the risk `L(K Q^T)` (the mean loss) at each recorded iterate, WITHOUT the
        penalty `reg (||K||_F^2 + ||Q||_F^2)` that the run minimized with it.
    lr, normalized, reg : the step size, whether the steps were normalized, the penalty weight.
    steps : (R,) the step index of each record.
    W : (property) (R, B, d, d) the products `K Q^T`, of rank at most m.

    Methods ``cosine(direction)``, (R, B) Frobenius cosines of W with a (d, d) matrix (see
    :func:`~maxmargin.cosine`), and ``singular_values()``, (R, B, min(d, m)) the largest
    min(d, m) singular values of each W (the others are 0), to watch the rank collapse.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> run = mm.gd_KQ(X, [1.0], [1.0, 0.5], 0.1 * np.eye(2), np.zeros((2, 2)), [1.0, 0.0],
    ...                100, 0.1, normalized=True, record_every=None)
    >>> run.steps, run.K.shape, run.W.shape, run.singular_values().shape
    (array([  0, 100]), (2, 1, 2, 2), (2, 1, 2, 2), (2, 1, 2))
    """

    K: np.ndarray
    Q: np.ndarray
    risk: np.ndarray
    lr: float
    normalized: bool
    reg: float
    steps: np.ndarray

    @property
    def W(self) -> np.ndarray:
        """(R, B, d, d) the products `W = K Q^T` of the recorded factors."""
        return self.K @ np.swapaxes(self.Q, -1, -2)

    def cosine(self, direction) -> np.ndarray:
        """(R, B) Frobenius cosine of each recorded `W = K Q^T` with the matrix ``direction``
        (d, d) (see :func:`~maxmargin.cosine`); W is formed from K and Q divided by their
        largest entries, so no product overflows."""
        d = self.K.shape[-2]
        u = _checks.as_float_array(direction, "direction")   # _checks.direction: finite, no 0
        if u.shape != (d, d):
            raise ValueError(f"direction: expected a ({d}, {d}) matrix, got shape {u.shape}")
        K, _ = _unit_scaled(self.K)
        Q, _ = _unit_scaled(self.Q)
        flat = (K @ np.swapaxes(Q, -1, -2)).reshape(self.K.shape[:2] + (-1,))
        return _kernels.cosine(flat, _checks.direction(u.reshape(-1), flat.shape, f"({d}, {d})"))

    def singular_values(self) -> np.ndarray:
        """(R, B, min(d, m)) the largest min(d, m) singular values of each `W = K Q^T`, in
        decreasing order (W has rank at most m; its other singular values are 0).

        Computed from the QR factors `K = Q_K R_K`, `Q = Q_Q R_Q` as the singular values of the
        small core `R_K R_Q^T`, after dividing K and Q by their largest entries, so they are
        accurate where W itself would overflow or underflow (a value beyond float64 is inf).
        """
        K, top_K = _unit_scaled(self.K)
        Q, top_Q = _unit_scaled(self.Q)
        core = np.linalg.qr(K, mode="r") @ np.swapaxes(np.linalg.qr(Q, mode="r"), -1, -2)
        with np.errstate(over="ignore"):
            return np.linalg.svd(core, compute_uv=False) * (top_K * top_Q)[..., None]


def _factor(A, d: int, name: str) -> np.ndarray:
    """A start of a factor: (d, m) or (B, d, m) with B, m >= 1, finite, as (B, d, m)."""
    A = _checks.as_float_array(A, name)
    if A.ndim == 2:
        A = A[None]
    if A.ndim != 3 or A.shape[1] != d or A.shape[0] < 1:
        raise ValueError(f"{name}: expected shape ({d}, m) or (B, {d}, m) with B >= 1, got {A.shape}")
    if A.shape[2] < 1:
        raise ValueError(f"{name}: the factor width m must be >= 1, got shape {A.shape}")
    return _checks.finite(A, name).copy()


def gd_KQ(X, Y, v, K0, Q0, queries, steps: int, lr: float, *, loss: str | Loss = "logistic",
          normalized: bool = False, eps: float = 1e-12, reg: float = 0.0,
          record_every: int | None = 1) -> KQTrajectory:
    """Gradient descent on the key and query factors (K, Q) of `W = K Q^T`, batched over starts.

    The logits are `x_it^T K Q^T z_i`, and the run minimizes the risk `L(K Q^T)` (the mean loss of
    the margins `Y_i f(X_i)`, as in :func:`gd_W`) plus `reg (||K||_F^2 + ||Q||_F^2)`. With
    `G = dL/dW` the gradients are `dK = G Q + 2 reg K` and `dQ = G^T K + 2 reg Q`. A plain step is
    `K <- K - lr dK`, `Q <- Q - lr dQ`; a normalized step divides each by its own Frobenius norm
    (+ eps), `K <- K - lr dK / (||dK||_F + eps)` and likewise for Q (as the follow-up paper's
    code). A zero factor has a zero gradient for the other one: from Q0 = 0 the first step
    leaves K where it is. Raises ``ValueError`` naming the step and the cause (v's scale or lr)
    if a gradient or an iterate overflows float64. With one shared query, reg = 0 and a
    built-in loss the run takes the compiled engine where :func:`gd` would (numba, chosen by
    ``MAXMARGIN_ENGINE`` as in :func:`gd`), with the same results to rounding.

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).
    K0, Q0 : (d, m) or (B, d, m) initial key and query factors (the same B and m >= 1).
    queries : (n, d) the query `z_i` of each sequence, or (d,) one query p shared by all.
    steps, lr : number of iterations (an integer >= 1) and step size (> 0).
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    normalized : keyword-only, divide each factor's gradient by (its Frobenius norm + eps)
        (default False).
    eps : keyword-only, the offset of the normalization (default 1e-12).
    reg : keyword-only, the weight of the penalty `||K||_F^2 + ||Q||_F^2`, a finite number >= 0
        (default 0; the follow-up paper uses the machine `epsilon`).
    record_every : keyword-only, as in :func:`gd` (default 1).

    Returns
    -------
    KQTrajectory : the recorded factors and risks (without the penalty) of the B runs.

    Raises
    ------
    ValueError : bad data (shapes, labels, NaN or inf; K0 or Q0 not (d, m) or (B, d, m) with
        B, m >= 1, or with another B or m than the other; queries neither (n, d) nor (d,)),
        ``steps`` < 1, ``lr`` or ``eps`` not a finite positive number, ``reg`` negative or not
        finite, ``record_every`` < 1, an unknown loss name, or a run whose estimated cost
        exceeds the library's limits (about 1e12 operations or 2 GiB of records, naming
        steps); or a gradient or iterate that is not finite in float64 (naming the step and the
        likely cause).
    TypeError : a non-numeric array, ``steps`` or ``record_every`` not an integer, ``lr``,
        ``eps`` or ``reg`` not a number, ``normalized`` not a bool, or ``loss`` neither a
        string nor a ``Loss``.

    Examples
    --------
    With one shared query p = (1, 0) and Q0 = 0, every column of Q stays parallel to p, so
    `W = K Q^T` has rank one; normalized GD heads for `W^mm` of :func:`w_svm`:

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> run = mm.gd_KQ(X, [1.0], [1.0, 0.5], 0.1 * np.eye(2), np.zeros((2, 2)), [1.0, 0.0],
    ...                100, 0.1, normalized=True)
    >>> np.round(run.cosine(mm.w_svm(X, [0], queries=[1.0, 0.0]).W)[-1], 4)
    array([1.])
    >>> np.round(run.singular_values()[-1, 0], 4)  # rank one
    array([22.4798,  0.    ])
    """
    prob = problem(X, Y, v)
    X, gamma = prob.X, prob.scores
    n, T, d = prob.shape
    K = _factor(K0, d, "K0")
    Q = _factor(Q0, d, "Q0")
    if Q.shape[0] != K.shape[0]:
        raise ValueError(f"Q0: {Q.shape[0]} starts do not pair with the {K.shape[0]} starts of K0 "
                         f"(give equal numbers of starts B)")
    if Q.shape[2] != K.shape[2]:
        raise ValueError(f"Q0: width m = {Q.shape[2]} differs from K0's m = {K.shape[2]} (the "
                         f"factors of W = K Q^T need the same m), got shapes {K.shape} and {Q.shape}")
    Z = _checks.queries(queries, n, d)
    steps, lr, loss, eps = _settings(steps, lr, loss, eps=eps)
    normalized = _checks.flag(normalized, "normalized")
    reg = _checks.real(reg, "reg", minimum=0.0)
    B, _, m = K.shape
    _affordable_descent(steps, _record_count(steps, record_every), B,
                        n * T * d * 2 + 5 * n * d * m + 4 * d * m, 2 * d * m + 1, 0)
    run = Descent(steps, lr, loss, normalized, (eps,), _record_steps(steps, record_every), "gd_KQ")
    out = _descend_KQ(X, gamma, Z, K, Q, reg, _queries_shared(queries, Z), run)
    return KQTrajectory(*(_readonly(a) for a in (*out.iterates, out.risk)), lr, normalized, reg,
                        _readonly(run.record))


def gd_KQ_stack(X, Y, v, K0, Q0, queries, steps: int, lr: float, *,
                loss: str | Loss = "logistic", normalized: bool = False, eps: float = 1e-12,
                reg: float = 0.0, freeze_Q: bool = False,
                record_every: int | None = 1) -> KQTrajectory:
    """Gradient descent on the factors (K, Q) of `W = K Q^T` for a stack of M instances, one run each.

    Run ``j`` is ``gd_KQ(X[j], Y[j], v[j], K0[j], Q0[j], queries[j], ...)`` (each instance's
    risk is the mean over its own n sequences, and a normalized step divides each factor's
    gradient by that run's own norm), computed as one array program, so that a study over many
    random instances costs about as much as one run. Equal to rounding, except that a gradient
    whose terms are subnormal (below about 1e-304) is not recomputed from scaled factors as
    gd_KQ's is: its normalized step may then be shorter or 0. With ``freeze_Q=True`` only K
    moves: from Q0 = I (d, d) this is gradient descent on W = K, i.e. :func:`gd_W`.

    Parameters
    ----------
    X : (M, n, T, d) tokens of M instances.
    Y : (M, n) labels in {-1, +1}.
    v : (M, d) heads, or (d,) shared.
    K0, Q0 : (M, d, m) one start per instance, or (d, m) shared (the same m >= 1).
    queries : (M, n, d) the query `z_i` of each sequence of each instance.
    steps, lr : number of iterations (an integer >= 1) and step size (> 0).
    loss, normalized, eps, reg : keyword-only, as in :func:`gd_KQ`.
    freeze_Q : keyword-only, keep Q at Q0 and train K only (default False).
    record_every : keyword-only, as in :func:`gd` (default 1).

    Returns
    -------
    KQTrajectory : the recorded factors and risks, with the instance axis as the batch axis:
        ``K``, ``Q`` are (R, M, d, m), ``risk`` (R, M).

    Raises
    ------
    ValueError : bad data (X not (M, n, T, d) with M, n, d >= 1 and T >= 2, Y not (M, n) or a
        label other than -1 and +1, v neither (d,) nor (M, d), K0 or Q0 neither (d, m) nor
        (M, d, m) with m >= 1 or of different widths, queries not (M, n, d), NaN or inf), the
        settings as in :func:`gd_KQ`, or a gradient or iterate that is not finite in float64
        (naming the step and the likely cause).
    TypeError : a non-numeric array, or settings of the wrong type, as in :func:`gd_KQ`.

    Examples
    --------
    Two instances, the second with its tokens swapped: each run is the run of :func:`gd_KQ` on
    its own instance.

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> Xs, Zs = np.stack([X, X[:, ::-1]]), np.ones((2, 1, 2))
    >>> K0, Q0 = 0.1 * np.eye(2), 0.2 * np.eye(2)
    >>> stack = mm.gd_KQ_stack(Xs, np.ones((2, 1)), [1.0, 0.5], K0, Q0, Zs, 50, 0.1,
    ...                        normalized=True)
    >>> one = mm.gd_KQ(X[:, ::-1], [1.0], [1.0, 0.5], K0, Q0, Zs[1], 50, 0.1, normalized=True)
    >>> stack.K.shape, bool(np.allclose(stack.W[:, 1], one.W[:, 0]))
    ((51, 2, 2, 2), True)
    """
    X, gamma, Z, K, Q = _stacked_factors(X, Y, v, K0, Q0, queries)
    M, n, T, d = X.shape
    steps, lr, loss, eps = _settings(steps, lr, loss, eps=eps)
    normalized = _checks.flag(normalized, "normalized")
    freeze_Q = _checks.flag(freeze_Q, "freeze_Q")
    reg = _checks.real(reg, "reg", minimum=0.0)
    m = K.shape[2]
    _affordable_descent(steps, _record_count(steps, record_every), M,
                        n * T * d * 2 + 5 * n * d * m + 4 * d * m, 2 * d * m + n + 1, n * T)
    run = Descent(steps, lr, loss, normalized, (eps,), _record_steps(steps, record_every),
                  "gd_KQ_stack")
    out = _descend_KQ_stack(X, gamma, Z, K, Q, reg, freeze_Q, run)
    return KQTrajectory(*(_readonly(a) for a in (*out.iterates, out.risk)), lr, normalized, reg,
                        _readonly(run.record))


@dataclass(frozen=True)
class PenaltyPath:
    """Stationary points of the penalized risk `L(K Q^T) + lam (||K||_F^2 + ||Q||_F^2)`, one per
    penalty ``lam`` (:func:`penalty_path`). The arrays are read-only.

    Attributes
    ----------
    penalties : (k,) the penalties lam, decreasing.
    K, Q : (k, d, m) the factors found.
    risk : (k,) `L(K Q^T)`, without the penalty.
    stationarity : (k,) `||grad F|| / ||grad R||` (R the penalty), the relative size of the penalized
        gradient (0 at an exact stationary point; the loss's and the penalty's gradients cancel).
    freeze_Q : whether Q was held at Q0 (then the penalty's Q part is a constant).
    iterations : (k,) L-BFGS iterations spent on each penalty (escapes from saddles included).
    curvature : (k,) the smallest eigenvalue of the Hessian of F in (K, Q) at the answer, over
        2 lam (the penalty's own curvature): >= 0 up to rounding at a local minimizer, < 0 at a
        saddle (reported only when MAX_ESCAPES escapes did not leave it). At (K, Q) = 0, where
        the gradient vanishes and ``stationarity`` cannot tell, it is `1 - sigma_max(G) / (2 lam)`,
        `G = dL/dW` at `W = 0`: `W = 0` is a local minimizer iff `lam >= sigma_max(G) / 2`.
    W : (property) (k, d, d) the products `K Q^T`.

    Method ``cosine(direction)``: (k,) Frobenius cosines of W with a (d, d) matrix.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> path = mm.penalty_path(X, [1.0], [1.0, 0.5], np.eye(2), np.eye(2), [1.0, 0.0],
    ...                        [1e-2, 1e-3])
    >>> path.K.shape, bool(np.all(path.stationarity < 1e-6))
    ((2, 2, 2), True)
    """

    penalties: np.ndarray
    K: np.ndarray
    Q: np.ndarray
    risk: np.ndarray
    stationarity: np.ndarray
    freeze_Q: bool
    iterations: np.ndarray
    curvature: np.ndarray

    @property
    def W(self) -> np.ndarray:
        """(k, d, d) the products `K Q^T`."""
        return self.K @ np.swapaxes(self.Q, -1, -2)

    def cosine(self, direction) -> np.ndarray:
        """(k,) Frobenius cosine of each `W = K Q^T` with ``direction`` (d, d) (see
        :func:`~maxmargin.cosine`); W is formed from K and Q divided by their largest entries,
        as in :meth:`KQTrajectory.cosine`, so no product overflows."""
        d = self.K.shape[-2]
        u = _checks.as_float_array(direction, "direction")
        if u.shape != (d, d):
            raise ValueError(f"direction: expected a ({d}, {d}) matrix, got shape {u.shape}")
        K, _ = _unit_scaled(self.K)
        Q, _ = _unit_scaled(self.Q)
        flat = (K @ np.swapaxes(Q, -1, -2)).reshape(len(self.penalties), -1)
        return _kernels.cosine(flat, _checks.direction(u.reshape(-1), flat.shape, f"({d}, {d})"))


def penalty_path(X, Y, v, K0, Q0, queries, penalties, *, loss: str | Loss = "logistic",
                 freeze_Q: bool = False, gtol: float = 1e-9,
                 max_iter: int = 20000) -> PenaltyPath:
    """The regularization path of the factorized attention in penalized form: for each penalty
    lam, a stationary point of `F(K, Q) = L(K Q^T) + lam (||K||_F^2 + ||Q||_F^2)`.

    The logits are `x_it^T K Q^T z_i` as in :func:`gd_KQ`. The penalties are visited from the
    largest to the smallest, each started from the previous solution (the first from (K0, Q0)),
    and minimized by L-BFGS (SciPy) with gradients from torch autograd in float64. A first-order
    method stalls at a saddle (at (K, Q) = 0 the gradient vanishes, and 0 is a saddle when
    `2 lam < sigma_max(dL/dW)` at `W = 0`): after each solve the Hessian's smallest eigenvalue is
    checked, and below -1e-6 * 2 lam the path steps along its eigenvector and solves again. Each
    answer is reported with its ``stationarity`` `||grad F|| / ||2 lam (K, Q)||` and its
    ``curvature`` (that eigenvalue over 2 lam, negative at a saddle), so a caller can refuse
    points that are not local minimizers. L-BFGS finds a local minimizer, not necessarily the
    global one. With ``freeze_Q=True`` only K moves: from Q0 = I this is the path of W = K under the
    penalty `lam ||W||_F^2` (the Frobenius-norm path, in penalized form).

    Parameters
    ----------
    X, Y, v : the instance, shapes (n, T, d), (n,) in {-1, +1}, (d,).
    K0, Q0 : (d, m) the start of the first (largest) penalty.
    queries : (n, d) the query `z_i` of each sequence, or (d,) one query shared by all.
    penalties : (k,) positive finite penalties lam, in any order (visited decreasing).
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    freeze_Q : keyword-only, keep Q at Q0 (default False).
    gtol : keyword-only, L-BFGS's tolerance on the projected gradient, relative to the
        penalty's gradient at the start of each penalty (default 1e-9).
    max_iter : keyword-only, iterations of L-BFGS per penalty, an integer >= 1 (default 20000).

    Returns
    -------
    PenaltyPath : the factors, risks, stationarity and curvature, one per penalty (decreasing).

    Raises
    ------
    ValueError : bad data (as in :func:`gd_KQ`; K0 or Q0 not (d, m) of one width m >= 1), a
        penalty not finite and > 0, an empty ``penalties``, ``gtol`` not a finite positive
        number, or ``max_iter`` < 1; K0 or Q0 whose penalty is beyond float64 (naming it), or
        a penalized risk, gradient or Hessian beyond float64 (naming the likely cause: the
        scale of v, of X or v, or of K0, Q0).
    TypeError : a non-numeric array, ``freeze_Q`` not a bool, ``max_iter`` not an integer, or
        ``loss`` neither a string nor a ``Loss``.

    Examples
    --------
    The path of W (``freeze_Q=True``, Q0 = I) for one sequence and the query (1, 0) turns toward
    the W-SVM direction `(1/2, -1/2) p^T` as the penalty vanishes:

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> path = mm.penalty_path(X, [1.0], [1.0, 0.5], np.zeros((2, 2)), np.eye(2), [1.0, 0.0],
    ...                        [1e-1, 1e-3], freeze_Q=True)
    >>> W_mm = mm.w_svm(X, [0], queries=[1.0, 0.0]).W
    >>> np.round(path.cosine(W_mm), 4)
    array([1., 1.])
    """
    from scipy.optimize import minimize

    prob = problem(X, Y, v)
    X, gamma = prob.X, prob.scores
    n, T, d = prob.shape
    K = _checks.finite(_checks.as_float_array(K0, "K0"), "K0")
    Q = _checks.finite(_checks.as_float_array(Q0, "Q0"), "Q0")
    if K.ndim != 2 or K.shape[0] != d or K.shape[1] < 1:
        raise ValueError(f"K0: expected shape ({d}, m) with m >= 1, got {K.shape}")
    if Q.shape != K.shape:
        raise ValueError(f"Q0: expected the shape {K.shape} of K0, got {Q.shape}")
    Z = _checks.queries(queries, n, d)
    lams = _checks.as_float_array(penalties, "penalties").reshape(-1)
    if lams.size == 0 or not np.all(np.isfinite(lams)) or np.any(lams <= 0):
        raise ValueError(f"penalties: expected finite numbers > 0, got {lams}")
    lams = np.sort(lams)[::-1]
    _, _, loss = _settings(1, 1.0, loss)
    freeze_Q = _checks.flag(freeze_Q, "freeze_Q")
    gtol = _checks.positive_float(gtol, "gtol")
    max_iter = _checks.positive_int(max_iter, "max_iter")
    return _penalty_path(X, gamma, Z, K.copy(), Q.copy(), lams, loss, freeze_Q, gtol, max_iter,
                         minimize)


#: A point of the penalty path is a saddle when its Hessian has an eigenvalue below
#: -SADDLE_TOL * 2 lam (the penalty's own curvature); penalty_path then leaves it along that
#: eigenvector, at most MAX_ESCAPES times per penalty.
SADDLE_TOL = 1e-6
MAX_ESCAPES = 8
#: Up to this many parameters the Hessian is formed densely; beyond, its lowest eigenvalue is
#: found by Lanczos (scipy's eigsh) on Hessian-vector products.
DENSE_HESSIAN = 1024


def _penalty_path(X, gamma, Z, K, Q, lams, loss, freeze_Q, gtol, max_iter,
                  minimize) -> PenaltyPath:
    """The loop of :func:`penalty_path` on validated inputs."""
    d, m = K.shape
    Xt, Gt, Zt = (_kernels.tensor(a) for a in (X, gamma, Z))
    Q_fixed = _kernels.tensor(Q)

    def parts(t, lam):  # (F, margins, penalty) of the flat parameters t, a float64 tensor
        Kt = t[: d * m].reshape(d, m)
        Qt = Q_fixed if freeze_Q else t[d * m:].reshape(d, m)
        s = torch.softmax(torch.einsum("ntd,de,ne->nt", Xt, Kt @ Qt.T, Zt), dim=-1)
        margins = torch.sum(s * Gt, dim=-1)
        risk = torch.mean(loss.torch_value(margins))
        penalty = (Kt ** 2).sum() + (0.0 if freeze_Q else (Qt ** 2).sum())
        return risk + lam * penalty, margins, penalty

    def objective(theta, lam):
        """(F, its gradient, the risk (the one risk recorder), ||grad of the penalty||)."""
        t = _kernels.tensor(theta).requires_grad_(True)
        total, margins, penalty = parts(t, lam)
        (grad,) = torch.autograd.grad(total, t)
        return (float(total.detach()), grad.numpy().copy(),
                float(rounded_mean(loss, margins.detach().numpy())),
                float(2 * lam * penalty.detach().sqrt()))

    def refuse(what, lam):
        """The error for F, its gradient or its Hessian not finite at the penalty lam, naming
        the argument whose scale is the likely cause (as :func:`~maxmargin._descent._overflow`)."""
        low, top = float(np.min(gamma)), _largest(gamma)
        sizes = (2.0, top, _largest(X), _largest(Z))
        bound = 2.0 * sum(np.log10(a) for a in sizes) if min(sizes) > 0 else 0.0   # (no overflow)
        if EXPONENTIAL.same_function(loss) and low < -700.0:
            cause = (f"the exponential loss exp(-z) and its derivatives overflow for margins z "
                     f"below -709.8, and the scores Y_i v^T x_it reach {low:.3g}: reduce the "
                     f"scale of v")
        elif bound >= 300.0:
            cause = (f"its terms reach up to (2 max|Y_i v^T x_it| max|x| max|z|)^2 times the "
                     f"factors' squares, about 10^{bound:.0f}: reduce the scale of X or v")
        else:
            entries = max(_largest(theta_now[0]), _largest(Q) if freeze_Q else 0.0)
            cause = (f"the factors reached entries of {entries:.3g}: start from smaller K0, Q0, "
                     f"or use larger penalties")
        return ValueError(f"penalty_path: {what} at the penalty lam = {lam:g} is not finite in "
                          f"float64; {cause}")

    def lowest_curvature(theta, lam):
        """(smallest eigenvalue of the Hessian of F at theta, its unit eigenvector); refuses a
        value, gradient or Hessian of F that is not finite (eigh would not converge)."""
        theta_now[0] = theta
        total, grad = objective(theta, lam)[:2]
        if not (np.isfinite(total) and np.all(np.isfinite(grad))):
            raise refuse("the penalized risk or its gradient", lam)
        t0 = _kernels.tensor(theta)
        if t0.numel() <= DENSE_HESSIAN:
            H = torch.autograd.functional.hessian(lambda t: parts(t, lam)[0], t0).numpy()
            if not np.all(np.isfinite(H)):
                raise refuse("the Hessian of the penalized risk", lam)
            values, vectors = np.linalg.eigh((H + H.T) / 2)
            return float(values[0]), vectors[:, 0]
        from scipy.sparse.linalg import LinearOperator, eigsh

        def hvp(u):
            out = torch.autograd.functional.hvp(lambda t: parts(t, lam)[0], t0,
                                                _kernels.tensor(np.ravel(u)))[1].numpy()
            if not np.all(np.isfinite(out)):
                raise refuse("the Hessian of the penalized risk", lam)
            return out

        op = LinearOperator((t0.numel(), t0.numel()), matvec=hvp, dtype=np.float64)
        values, vectors = eigsh(op, k=1, which="SA", tol=1e-10)
        return float(values[0]), vectors[:, 0]

    def solve(theta, lam):
        scale = max(objective(theta, lam)[3], 1e-300)
        res = minimize(lambda th: objective(th, lam)[:2], theta, jac=True,
                       method="L-BFGS-B", options=dict(maxiter=max_iter, maxfun=2 * max_iter,
                                                       gtol=gtol * scale, ftol=0.0))
        return res.x, int(res.nit)

    def escape(theta, lam, direction):
        """The lowest F on a grid of steps +-t direction (t = 2^-20 ... 2^4 times max(1,
        |theta|)), or None when no step lowers F."""
        f0 = objective(theta, lam)[0]
        reach = max(1.0, float(np.linalg.norm(theta)))
        best, where = f0, None
        for t in reach * 2.0 ** np.arange(-20, 5):
            for candidate in (theta + t * direction, theta - t * direction):
                f = objective(candidate, lam)[0]
                if f < best:
                    best, where = f, candidate
        return where

    Ks, Qs, risks, stat, curv, iterations = [], [], [], [], [], []
    theta = K.ravel() if freeze_Q else np.concatenate([K.ravel(), Q.ravel()])
    theta_now = [theta]   # the iterate of the last check (refuse names its scale)
    with np.errstate(over="ignore", invalid="ignore"):
        for name, factor in (("K0", K), ("Q0", None if freeze_Q else Q)):
            if factor is not None and not np.isfinite(np.sum(factor * factor)):
                raise ValueError(f"{name}: its squared Frobenius norm, in the penalty, is beyond "
                                 f"float64 (entries up to {_largest(factor):.3g}): start from "
                                 f"a smaller {name}")
        total, grad = objective(theta, lams[0])[:2]
        start_logits = _kernels.self_attention_logits(X, K @ Q.T, Z)
    if not (np.isfinite(total) and np.all(np.isfinite(grad))):
        if not np.all(np.isfinite(start_logits)):
            raise ValueError("K0, Q0: the logits x_it^T K0 Q0^T z_i of the start leave float64: "
                             "start from smaller K0, Q0")
        raise refuse("the penalized risk or its gradient at the start (K0, Q0)", lams[0])
    for lam in lams:
        with _kernels.threads_for(X.size):   # one thread: tiny tensors, many calls
            theta, spent = solve(theta, lam)
            # A first-order method stalls at a saddle (at (K, Q) = 0 the gradient is exactly 0,
            # a saddle when 2 lam < sigma_max(dL/dW(0))): leave it along the Hessian's lowest
            # eigenvector and solve again.
            low, vector = lowest_curvature(theta, lam)
            for _ in range(MAX_ESCAPES):
                if low >= -SADDLE_TOL * 2 * lam:
                    break
                start = escape(theta, lam, vector)
                if start is None:
                    break
                theta, more = solve(start, lam)
                spent += more
                low, vector = lowest_curvature(theta, lam)
            _, grad, risk, pen_grad = objective(theta, lam)
        iterations.append(spent)
        Ks.append(theta[: d * m].reshape(d, m))
        Qs.append(Q.copy() if freeze_Q else theta[d * m:].reshape(d, m))
        risks.append(risk)
        stat.append(float(np.linalg.norm(grad)) / max(pen_grad, 1e-300))
        curv.append(low / (2 * lam))
    return PenaltyPath(_readonly(lams.copy()), _readonly(np.array(Ks)), _readonly(np.array(Qs)),
                       _readonly(np.array(risks)), _readonly(np.array(stat)), freeze_Q,
                       _readonly(np.array(iterations)), _readonly(np.array(curv)))
