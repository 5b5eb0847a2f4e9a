"""Nonlinear prediction heads f(X) = psi(X^T softmax(X W p)) and their optimal token *sets*.

Shapes: ``X`` is (n, T, d), ``Y`` is (n,) in {-1, +1}, ``W`` is (d, d) or ``None`` (identity),
``p`` is (..., d). The head psi is an :class:`MLPHead`, a fixed one-hidden-layer network. With a
nonlinear head the loss-minimising attention of a sequence may *mix* several tokens: the optimal
set O_i (:func:`optimal_sets`). The regularization path then behaves like
R p^mm / ||p^mm|| + p_fin, with p^mm the set-SVM of the optimal sets and p_fin the bounded
in-set offset (:func:`set_direction`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import _checks, _kernels
from ._attsvm import _set_svm
from ._headmodel import _head, _head_forward, _masked_softmax
from .losses import Loss, get_loss
from .problem import Problem, keyed, unit_keys
from .svm import SetSVMResult


@dataclass(frozen=True)
class MLPHead:
    """A fixed one-hidden-layer head `psi(z) = a^T tanh(B z + b)`.

    Built directly (all three arrays required, validated on construction) or by :func:`mlp_head`
    (``b`` defaults to zeros there).

    Attributes
    ----------
    a : (m,) output weights.
    B : (m, d) hidden weights.
    b : (m,) hidden biases.
    dim : (property) d, the size of the input z.

    Methods ``value(z)``, `psi(z)` of shape (...) for z (..., d), and ``grad(z)``,
    `grad psi(z) = B^T (a * (1 - tanh^2(B z + b)))` of shape (..., d).

    Raises
    ------
    ValueError : B is not (m, d) with m, d >= 1, a or b is not (m,), or a value is NaN or inf
        (naming a, B or b).
    TypeError : a, B or b is not a real numeric array (None included).

    Examples
    --------
    >>> head = mm.MLPHead(np.array([1.0]), np.array([[1.0, 0.0]]), np.zeros(1))  # tanh(z_1)
    >>> head.dim, round(float(head.value([0.5, 0.0])), 4)
    (2, 0.4621)
    >>> head.grad([0.0, 0.0])  # (1 - tanh^2(0)) (1, 0)
    array([1., 0.])
    """

    a: np.ndarray
    B: np.ndarray
    b: np.ndarray

    def __post_init__(self):
        B = _checks.finite(_checks.as_float_array(self.B, "B"), "B")
        if B.ndim != 2 or min(B.shape) < 1:
            raise ValueError(f"B: expected shape (m, d) with m, d >= 1, got {B.shape}")
        object.__setattr__(self, "B", B)
        object.__setattr__(self, "a", _checks.vector(self.a, B.shape[0], "a"))
        object.__setattr__(self, "b", _checks.vector(self.b, B.shape[0], "b"))

    @property
    def dim(self) -> int:
        """d, the size of the input z."""
        return self.B.shape[1]

    def value(self, z) -> np.ndarray:
        """`psi(z)`, shape (...) for z of shape (..., d)."""
        z = _checks.batched_vector(z, self.dim, "z")
        return np.tanh(z @ self.B.T + self.b) @ self.a

    def grad(self, z) -> np.ndarray:
        """`grad psi(z) = B^T (a * (1 - tanh^2(B z + b)))`, shape (..., d)."""
        z = _checks.batched_vector(z, self.dim, "z")
        h = np.tanh(z @ self.B.T + self.b)
        return (self.a * (1.0 - h * h)) @ self.B


def mlp_head(a, B, *, b=None) -> MLPHead:
    """An :class:`MLPHead` `psi(z) = a^T tanh(B z + b)`; ``b`` defaults to zeros.

    Parameters
    ----------
    a : (m,) output weights.
    B : (m, d) hidden weights.
    b : keyword-only, (m,) hidden biases, or None (the default) for zeros.

    Returns
    -------
    MLPHead : the head, validated.

    Raises
    ------
    ValueError : B is not (m, d) with m, d >= 1, a or b is not (m,), or a value is NaN or inf
        (naming a, B or b).
    TypeError : a or b is not a real numeric array.

    Examples
    --------
    >>> head = mm.mlp_head([1.0, 0.6], [[0.0, 2.0], [2.0, 0.0]])
    >>> head.b
    array([0., 0.])
    >>> round(float(head.value([1.0, 0.0])), 4)  # tanh(0) + 0.6 tanh(2)
    0.5784
    """
    B = _checks.as_float_array(B, "B")
    return MLPHead(a, B, np.zeros(B.shape[0]) if b is None and B.ndim == 2 else b)


def _head_call(X, head, p, W, sets):
    """Validate once what every head function takes: (problem without labels, head, p (..., d),
    sets (n, T) or None)."""
    prob = keyed(X, W)
    n, T, d = prob.shape
    sets = None if sets is None else _checks.token_sets(sets, n, T)
    return prob, _head(head, d), _checks.batched_vector(p, d, "p"), sets


def _head_inputs(X, Y, head, p, W, loss, sets):
    prob, head, p, sets = _head_call(X, head, p, W, sets)
    Y = _checks.labels(Y, prob.shape[0])
    return prob.X, Y, prob.keys, head, p, get_loss(loss), sets


def head_attention(X, p, *, W=None, sets=None) -> np.ndarray:
    """Attention weights `softmax(X_i W p)`, restricted to ``sets`` (n, T) if given; (..., n, T).

    Parameters
    ----------
    X : (n, T, d) tokens.
    p : (..., d) prompts; leading batch axes are kept in the output.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    sets : keyword-only, (n, T) bool, the tokens each sequence may attend to (at least one per
        sequence), or None (the default) for all.

    Returns
    -------
    (..., n, T) array : the weights, 0 outside the sets and summing to 1 over each sequence.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, p not (..., d),
        W not (d, d), sets not (n, T)), a value is NaN or inf, a set is empty, or the logits
        `k_it^T p` exceed float64 (naming p); the message names the argument.
    TypeError : X, p or W is not a real numeric array, or ``sets`` is not boolean.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    >>> np.round(mm.head_attention(X, [0.0, 0.0]), 4)
    array([[0.3333, 0.3333, 0.3333]])
    >>> mm.head_attention(X, [0.0, 0.0], sets=np.array([[True, True, False]]))
    array([[0.5, 0.5, 0. ]])
    """
    prob = keyed(X, W)
    p = _checks.batched_vector(p, prob.shape[2], "p")
    sets = None if sets is None else _checks.token_sets(sets, *prob.shape[:2])
    return _head_attention(prob.keys, p, sets)


def _head_attention(K: np.ndarray, p: np.ndarray, sets) -> np.ndarray:
    """softmax over each set of k_it^T p for validated keys (n, T, d), prompts (..., d) and
    sets (n, T) or None; shape (..., n, T)."""
    logits = np.einsum("ntd,...d->...nt", K, p)
    if sets is not None:
        logits = np.where(sets, logits, -np.inf)
    return _masked_softmax(logits)


def head_predict(X, head: MLPHead, p, *, W=None, sets=None) -> np.ndarray:
    """Output of the nonlinear head `f(X_i) = psi(X_i^T softmax(X_i W p))`, shape (..., n).

    Parameters
    ----------
    X : (n, T, d) tokens.
    head : the :class:`MLPHead` `psi`, with input size d.
    p : (..., d) prompts; leading batch axes are kept in the output.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    sets : keyword-only, (n, T) bool, restrict the softmax to each set `O_i`, or None (the
        default).

    Returns
    -------
    (..., n) array : `psi` of the attention output of each sequence.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, p not (..., d),
        W not (d, d), sets not (n, T)), a value is NaN or inf, a set is empty, or the logits
        `k_it^T p` exceed float64 (naming p); the message names the argument.
        Also: the head's input size is not d.
    TypeError : X, p or W is not a real numeric array, ``head`` is not an MLPHead, or ``sets`` is
        not boolean.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> head = mm.mlp_head([1.0], [[1.0, 0.0]])  # psi(z) = tanh(z_1)
    >>> np.round(mm.head_predict(X, head, [0.0, 0.0]), 4)  # z = (0.5, 0.5): tanh(0.5)
    array([0.4621])
    >>> np.round(mm.head_predict(X, head, [0.0, 0.0], sets=np.array([[True, False]])), 4)
    array([0.7616])
    """
    prob, head, p, sets = _head_call(X, head, p, W, sets)
    s = _head_attention(prob.keys, p, sets)
    return head.value(np.einsum("...nt,ntd->...nd", s, prob.X))


def head_risk(X, Y, head: MLPHead, p, *, W=None, loss: str | Loss = "logistic", sets=None) -> np.ndarray:
    """Risk `(1/n) sum_i loss(Y_i psi(X_i^T softmax(X_i W p)))`, shape (...).

    With ``sets`` (n, T) bool the softmax runs over each set `O_i` only (the restricted risk).

    Parameters
    ----------
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    head : the :class:`MLPHead` `psi`, with input size d.
    p : (..., d) prompts; the output has their batch shape (...).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    sets : keyword-only, (n, T) bool, restrict the softmax to each set `O_i`, or None (the
        default).

    Returns
    -------
    (...) array : the risk at each prompt.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, p not (..., d),
        W not (d, d), sets not (n, T)), a value is NaN or inf, a set is empty, or the logits
        `k_it^T p` exceed float64 (naming p); the message names the argument.
        Also: Y is not (n,) or has a label other than -1 and +1, the
        head's input size is not d, or the loss name is unknown.
    TypeError : an array is not real and numeric, ``head`` is not an MLPHead, ``sets`` is not
        boolean, or ``loss`` is neither a string nor a ``Loss``.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> head = mm.mlp_head([1.0], [[1.0, 0.0]])  # psi(z) = tanh(z_1); at p = 0, f = tanh(0.5)
    >>> round(float(mm.head_risk(X, [1.0], head, [0.0, 0.0], loss="correlation")), 4)
    -0.4621
    >>> round(float(mm.head_risk(X, [1.0], head, [0.0, 0.0])), 4)  # log(1 + exp(-tanh(0.5)))
    0.4885
    """
    X, Y, K, head, p, loss, sets = _head_inputs(X, Y, head, p, W, loss, sets)
    P = p.reshape(-1, X.shape[2])
    return _head_forward(X, Y, K, head, P, loss, sets, False)[0].reshape(p.shape[:-1])


def head_risk_grad(X, Y, head: MLPHead, p, *, W=None, loss: str | Loss = "logistic", sets=None) -> np.ndarray:
    """Gradient in p of :func:`head_risk`, shape (..., d).

    `grad_p L = (1/n) sum_i l'_i Y_i sum_t s_it (x_it - z_i)^T grad psi(z_i) W^T x_it`,
    with `z_i = X_i^T s_i`.

    Parameters
    ----------
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    head : the :class:`MLPHead` `psi`, with input size d.
    p : (..., d) prompts; the output has shape (..., d).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    sets : keyword-only, (n, T) bool, restrict the softmax to each set `O_i`, or None (the
        default).

    Returns
    -------
    (..., d) array : the gradient at each prompt.

    Raises
    ------
    ValueError : a shape is wrong (X not (n, T, d) with n, d >= 1 and T >= 2, p not (..., d),
        W not (d, d), sets not (n, T)), a value is NaN or inf, a set is empty, or the logits
        `k_it^T p` exceed float64 (naming p); the message names the argument.
        Also: Y is not (n,) or has a label other than -1 and +1, the
        head's input size is not d, or the loss name is unknown.
    TypeError : an array is not real and numeric, ``head`` is not an MLPHead, ``sets`` is not
        boolean, or ``loss`` is neither a string nor a ``Loss``.

    Examples
    --------
    At p = 0, z = (0.5, 0.5) and `grad psi(z) = (1 - tanh^2(0.5), 0) = (0.7864, 0)`; with the
    correlation loss (l' = -1) the gradient is -(1/2) (0.3932, -0.3932):

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> head = mm.mlp_head([1.0], [[1.0, 0.0]])
    >>> np.round(mm.head_risk_grad(X, [1.0], head, [0.0, 0.0], loss="correlation"), 4)
    array([-0.1966,  0.1966])
    """
    X, Y, K, head, p, loss, sets = _head_inputs(X, Y, head, p, W, loss, sets)
    P = p.reshape(-1, X.shape[2])
    return _head_forward(X, Y, K, head, P, loss, sets, True)[1].reshape(p.shape)


@dataclass(frozen=True)
class OptimalSets:
    """The loss-minimising attention mixture of every sequence.

    Attributes
    ----------
    weights : (n, T) the minimiser ``s_i*`` of `loss(Y_i psi(X_i^T s))` over the simplex.
    sets : (n, T) bool, the optimal sets `O_i` = {t : ``s_it*`` > threshold}.
    losses : (n,) the minimal per-sequence loss.
    sizes : (property) (n,) the number of tokens in each optimal set.

    Examples
    --------
    >>> inst = mm.data.mixing_example(beta=2.0)
    >>> found = mm.optimal_sets(inst.X, inst.Y, inst.head)
    >>> found.sizes, np.round(found.weights[0, :2], 4)
    (array([2, 2]), array([0.5842, 0.4158]))
    """

    weights: np.ndarray
    sets: np.ndarray
    losses: np.ndarray

    loss = _checks.renamed("OptimalSets", "loss", "losses", "the minimal loss of each sequence")

    @property
    def sizes(self) -> np.ndarray:
        """(n,) the number of tokens in each optimal set."""
        return self.sets.sum(axis=1)


#: Iteration cap of each SLSQP run of :func:`optimal_sets`.
SLSQP_ITERATIONS = 500
#: Default cap on the estimated work of :func:`optimal_sets` (see there): about 10 s.
MAX_WORK = 2e8


def optimal_sets_work(n: int, T: int) -> float:
    """Worst-case work of :func:`optimal_sets`: n sequences x T (T + 1) / 2 + 1 starts x
    SLSQP_ITERATIONS iterations x T^3 (the dense linear algebra of one SLSQP iteration on the
    simplex of dimension T). Measured here: 40 to 50 ns per unit (T = 12 to 20), so the default
    MAX_WORK = 2e8 is at most about 10 s."""
    return float(n) * (T * (T + 1) / 2 + 1) * SLSQP_ITERATIONS * float(T) ** 3


def optimal_sets(X, Y, head: MLPHead, *, loss: str | Loss = "logistic", threshold: float = 1e-3,
                 max_work: float = MAX_WORK) -> OptimalSets:
    """Optimal token sets: minimise `loss(Y_i psi(X_i^T s))` over the simplex, one sequence at a time.

    Multi-start SLSQP (every vertex, every edge midpoint and the centre of the simplex); the
    set `O_i` holds the tokens whose optimal weight exceeds ``threshold``. The work grows like
    `n T^5` (``maxmargin.heads.optimal_sets_work``); a call whose estimate exceeds ``max_work``
    (default 2e8, about 10 s: T = 14 for one sequence, T = 10 for seven) raises ``ValueError``
    naming ``max_work`` and the estimate.

    Parameters
    ----------
    X : (n, T, d) tokens (the head reads `X_i^T s`; W plays no part).
    Y : (n,) labels in {-1, +1}.
    head : the :class:`MLPHead` `psi`, with input size d.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    threshold : keyword-only, the weight in (0, 1) above which a token is in its set (default
        1e-3).
    max_work : keyword-only, cap on the estimated work (default MAX_WORK = 2e8).

    Returns
    -------
    OptimalSets : the optimal weights, sets and minimal losses.

    Raises
    ------
    ValueError : X is not (n, T, d) with n, d >= 1 and T >= 2, Y is not (n,) or has a label other
        than -1 and +1, a value is NaN or inf, the head's input size is not d, ``threshold`` is
        not in (0, 1) or leaves a sequence without a token (every optimal weight of that
        sequence at or below it), ``max_work`` is not a finite positive number, the loss name
        is unknown, or the estimated work exceeds ``max_work``.
    TypeError : X or Y is not a real numeric array, ``head`` is not an MLPHead, ``threshold`` or
        ``max_work`` is not a number, or ``loss`` is neither a string nor a ``Loss``.

    Examples
    --------
    `psi = a_1 tanh(beta z_3) + a_2 tanh(beta z_4)` with a = (1, 0.6): mixing tokens 0 and 1 pays
    once `beta > arccosh(sqrt(1 / 0.6)) = 0.75`.

    >>> inst = mm.data.mixing_example(beta=2.0)
    >>> mm.optimal_sets(inst.X, inst.Y, inst.head).sets
    array([[ True,  True, False, False],
           [ True,  True, False, False]])
    >>> inst = mm.data.mixing_example(beta=0.5)
    >>> mm.optimal_sets(inst.X, inst.Y, inst.head).sizes
    array([1, 1])
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    Y = _checks.labels(Y, n)
    return _optimal_sets(X, Y, _head(head, d), get_loss(loss), _threshold(threshold),
                         _checks.positive_float(max_work, "max_work"))


def _threshold(threshold) -> float:
    """A weight threshold in (0, 1): the weights of a sequence sum to 1, so at 1 or above
    every set would be empty."""
    threshold = _checks.positive_float(threshold, "threshold")
    if threshold >= 1:
        raise ValueError(f"threshold: expected a weight in (0, 1), got {threshold:g} (the weights "
                         "of a sequence sum to 1, so no token's weight exceeds it)")
    return threshold


def _optimal_sets(X, Y, head: MLPHead, loss: Loss, threshold: float, max_work: float) -> OptimalSets:
    """:func:`optimal_sets` on validated X (n, T, d), Y (n,), head, loss and settings."""
    from scipy.optimize import minimize  # deferred: importing SciPy costs about 0.5 s

    n, T, d = X.shape
    work = optimal_sets_work(n, T)
    if work > max_work:
        raise ValueError(
            f"max_work: the multi-start search over the simplex of n={n} sequences of T={T} "
            f"tokens costs up to {work:.3g} units (40 to 50 ns each here, about {work * 5e-8:.3g} "
            f"s), above max_work={max_work:g}; use fewer tokens or raise max_work")
    eye = np.eye(T)
    starts = [eye[t] for t in range(T)] + [(eye[t] + eye[u]) / 2 for t in range(T) for u in range(t + 1, T)]
    starts.append(np.full(T, 1.0 / T))
    weights, best = np.zeros((n, T)), np.zeros(n)
    for i in range(n):
        def fun(s, i=i):
            z = s @ X[i]
            m = Y[i] * head.value(z)
            return float(loss.value(m)), loss.derivative(m) * Y[i] * (X[i] @ head.grad(z))

        found = []
        for s0 in starts:
            res = minimize(fun, s0, jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * T,
                           constraints=[{"type": "eq", "fun": lambda s: s.sum() - 1.0,
                                         "jac": lambda s: np.ones_like(s)}],
                           options={"ftol": 1e-15, "maxiter": SLSQP_ITERATIONS})
            s = np.clip(res.x, 0.0, None)
            s /= s.sum()
            found.append((fun(s)[0], tuple(s)))
        value, s = min(found)
        weights[i], best[i] = s, value
    sets = weights > threshold
    empty = ~sets.any(axis=1)
    if np.any(empty):
        i = int(np.argmax(empty))
        raise ValueError(f"threshold: {threshold:g} leaves sequence {i} without a token (its "
                         f"largest optimal weight is {weights[i].max():.6g}); use a smaller threshold")
    return OptimalSets(weights, sets, best)


def set_offset(X, Y, head: MLPHead, sets, *, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """The bounded in-set component `p_fin` of the path, shape (d,).

    `p_fin` minimises the restricted risk (attention softmax over each set `O_i` only) over the span
    of the in-set key differences `k_it - k_itau` (`t, tau in O_i`): that span is orthogonal to the
    set-SVM direction, and the restricted risk ignores every other component. Zero when every
    set is a single token.

    Parameters
    ----------
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    head : the :class:`MLPHead` `psi`, with input size d.
    sets : (n, T) bool, the optimal set `O_i` of each sequence (at least one True).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.

    Returns
    -------
    (d,) array : `p_fin`.

    Raises
    ------
    ValueError : a shape is wrong (X, Y, W, or sets not (n, T)), a label is not -1 or +1, a value
        is NaN or inf, a set is empty, the head's input size is not d, the loss name is unknown,
        or the restricted risk has no finite minimiser in the span (naming sets: the mixture
        inside some set wants a vertex).
    TypeError : an array is not real and numeric, ``head`` is not an MLPHead, ``sets`` is not
        boolean, or ``loss`` is neither a string nor a ``Loss``.

    Examples
    --------
    In the mixing example `k_0 - k_1 = (0, 1, 0, 0)` in both sequences, so `p_fin = (0, c, 0, 0)` sets
    the in-set weights (sigmoid(c), 1 - sigmoid(c)) to the optimal (0.5842, 0.4158):
    c = log(0.5842 / 0.4158) = 0.3399.

    >>> inst = mm.data.mixing_example(beta=2.0)
    >>> sets = np.array([[True, True, False, False]] * 2)
    >>> p_fin = mm.set_offset(inst.X, inst.Y, inst.head, sets, W=inst.W)
    >>> round(float(p_fin[1]), 4), bool(np.allclose(p_fin[[0, 2, 3]], 0.0))
    (0.3399, True)
    """
    prob = keyed(X, W)
    n, T, d = prob.shape
    Y = _checks.labels(Y, n)
    head = _head(head, d)
    sets = _checks.token_sets(sets, n, T)
    return _set_offset(prob, Y, head, sets, get_loss(loss))


def _set_offset(prob: Problem, Y: np.ndarray, head: MLPHead, sets: np.ndarray, loss: Loss) -> np.ndarray:
    """:func:`set_offset` on a validated problem, labels (n,), head, sets (n, T) and loss."""
    from scipy.optimize import minimize  # deferred: importing SciPy costs about 0.5 s

    # The minimiser scales like 1 / |k| and the gradient like |k|, while BFGS's gtol and the
    # check below are absolute: solve on keys scaled by a power of two to unit size (exact, and
    # the identity for keys of size 1), and give p_fin back in the units of the data.
    unit, e = unit_keys(prob)
    X, K = prob.X, unit.keys
    n, T, d = prob.shape
    first = np.argmax(sets, axis=1)
    rows = [K[i, t] - K[i, first[i]] for i in range(n) for t in np.flatnonzero(sets[i]) if t != first[i]]
    Q = _kernels.span_basis(np.array(rows).reshape(-1, d))
    if Q.shape[1] == 0:
        return np.zeros(d)

    def fun(q):
        value, grad = _head_forward(X, Y, K, head, (Q @ q)[None], loss, sets, True)
        return float(value[0]), Q.T @ grad[0]

    res = minimize(fun, np.zeros(Q.shape[1]), jac=True, method="BFGS", options={"gtol": 1e-13, "maxiter": 2000})
    if not np.all(np.isfinite(res.x)) or np.linalg.norm(fun(res.x)[1]) > 1e-8:
        raise ValueError("sets: the restricted risk has no finite minimiser in the span of the in-set "
                         "key differences (the mixture inside some set wants a vertex)")
    return np.ldexp(Q @ res.x, -e)


class SetDirection(NamedTuple):
    """What :func:`set_direction` predicts: the path behaves like R svm.direction + offset.

    A named tuple ``(optimal, svm, offset)``.

    Attributes
    ----------
    optimal : OptimalSets, the optimal sets of the head.
    svm : SetSVMResult, the set-SVM of those sets, `p^mm`.
    offset : (d,) the in-set offset `p_fin`.

    Examples
    --------
    >>> inst = mm.data.mixing_example(beta=2.0)
    >>> optimal, svm, offset = mm.set_direction(inst.X, inst.Y, inst.head, W=inst.W)
    >>> optimal.sizes, round(svm.margin, 4)
    (array([2, 2]), 0.4)
    """

    optimal: OptimalSets   # the optimal sets of the head
    svm: SetSVMResult      # the set-SVM of those sets, p^mm
    offset: np.ndarray     # (d,) the in-set offset p_fin


def set_direction(X, Y, head: MLPHead, *, W=None, loss: str | Loss = "logistic",
                  threshold: float = 1e-3, max_work: float = MAX_WORK) -> SetDirection:
    """Optimal sets, their set-SVM and the in-set offset `p_fin`, in one call.

    Returns a :class:`SetDirection` (optimal, svm, offset), which unpacks as before: the path
    is predicted to behave like `R p^mm / ||p^mm|| + p_fin` for large R. ``max_work`` caps
    :func:`optimal_sets`.

    Parameters
    ----------
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    head : the :class:`MLPHead` `psi`, with input size d.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    threshold, max_work : keyword-only, as in :func:`optimal_sets` (defaults 1e-3 and 2e8).

    Returns
    -------
    SetDirection : (optimal, svm, offset).

    Raises
    ------
    ValueError : as in :func:`optimal_sets` and :func:`set_offset`; also when an optimal set holds
        every token (naming the optimal sets), or the set-SVM of the sets is infeasible.
    TypeError : as in :func:`optimal_sets`.
    IllConditionedError : (a ValueError) as in :func:`set_svm`.

    Examples
    --------
    With the sets {0, 1}, the in-set equality forces `p_2 = 0` and sequence 1's token 3,
    `(k_0 - k_3)^T p = 0.4 p_1 >= 1`, sets `p^mm = (2.5, 0, 0, 0)`:

    >>> inst = mm.data.mixing_example(beta=2.0)
    >>> found = mm.set_direction(inst.X, inst.Y, inst.head, W=inst.W)
    >>> bool(np.allclose(found.svm.p, [2.5, 0.0, 0.0, 0.0])), round(float(found.offset[1]), 4)
    (True, 0.3399)
    """
    prob = keyed(X, W)
    n, T, d = prob.shape
    Y = _checks.labels(Y, n)
    head, loss = _head(head, d), get_loss(loss)
    opt = _optimal_sets(prob.X, Y, head, loss, _threshold(threshold),
                        _checks.positive_float(max_work, "max_work"))
    sets = _checks.token_sets(opt.sets, n, T, proper=True, name="the optimal sets")
    return SetDirection(opt, _set_svm(prob.keys, sets), _set_offset(prob, Y, head, sets, loss))
