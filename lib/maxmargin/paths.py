"""Regularization paths p_bar(R) = argmin_{||p|| <= R} L(p), global and inside a cone, and
nonlinear prediction heads f(X) = psi(X^T softmax(X W p)) with their optimal token *sets*.

Shapes: ``X`` is (n, T, d), ``Y`` is (n,) in {-1, +1}, ``W`` is (d, d) or ``None`` (identity),
``p`` is (..., d). The head is either a vector ``v`` of shape (d,) (the linear head
psi(z) = v^T z of the paper's main model) or an :class:`MLPHead`.

The constrained problem is nonconvex, so :func:`regularization_path` runs several starts at every
radius (seeded random points on the sphere plus the previous radius's solution scaled up), a
batched projected normalized-gradient phase, an SLSQP polish, and then *checks* every returned
point: it is reported with the residual of the constrained first-order (KKT) conditions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize, nnls

from . import _checks
from .losses import Loss, get_loss
from .model import _threads_for, keys, risk, risk_grad, softmax
from .svm import SetSVMResult, set_svm


# ----------------------------------------------------------------------------------------------
# Nonlinear heads
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MLPHead:
    """A fixed one-hidden-layer head psi(z) = a^T tanh(B z + b).

    Attributes
    ----------
    a : (m,) output weights.
    B : (m, d) hidden weights.
    b : (m,) hidden biases.
    """

    a: np.ndarray
    B: np.ndarray
    b: np.ndarray

    def __post_init__(self):
        B = _checks.finite(_checks._as_float_array(self.B, "B"), "B")
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
        """psi(z), shape (...) for z of shape (..., d)."""
        z = _checks.batched_vector(z, self.dim, "z")
        return np.tanh(z @ self.B.T + self.b) @ self.a

    def grad(self, z) -> np.ndarray:
        """grad psi(z) = B^T (a * (1 - tanh^2(B z + b))), shape (..., d)."""
        z = _checks.batched_vector(z, self.dim, "z")
        h = np.tanh(z @ self.B.T + self.b)
        return (self.a * (1.0 - h * h)) @ self.B


def mlp_head(a, B, b=None) -> MLPHead:
    """An :class:`MLPHead` psi(z) = a^T tanh(B z + b); ``b`` defaults to zeros."""
    B = np.asarray(B, dtype=np.float64)
    return MLPHead(a, B, np.zeros(B.shape[0]) if b is None and B.ndim == 2 else b)


def _head(head, d: int):
    if isinstance(head, MLPHead):
        if head.dim != d:
            raise ValueError(f"head: expects inputs of size {head.dim}, but tokens have d={d}")
        return head
    raise TypeError(f"head: expected an MLPHead, got {type(head).__name__}")


def _head_forward(X, Y, K, head, P, loss: Loss, sets, need_grad: bool):
    """Risk (B,) and gradient (B, d) of the head model at prompts P (B, d).

    With ``sets`` (n, T) bool, attention is restricted to each set (softmax over O_i only).
    """
    n = X.shape[0]
    logits = np.einsum("ntd,bd->bnt", K, P)
    if sets is not None:
        logits = np.where(sets, logits, -np.inf)
    s = softmax(logits)  # (B, n, T)
    z = np.einsum("bnt,ntd->bnd", s, X)  # attention output X_i^T s_i
    margin = Y * head.value(z)  # (B, n)
    value = np.mean(loss.value(margin), axis=-1)
    if not need_grad:
        return value, None
    c = (loss.derivative(margin) * Y / n)[..., None] * head.grad(z)  # dL/dz_i, (B, n, d)
    # d z_i / d logit_it = s_it (x_it - z_i)
    dlogit = s * np.einsum("ntd,bnd->bnt", X, c) - s * np.einsum("bnd,bnd->bn", z, c)[..., None]
    return value, np.einsum("bnt,ntd->bd", dlogit, K)


def _head_inputs(X, Y, head, p, W, loss, sets):
    X = _checks.tokens(X)
    n, T, d = X.shape
    Y = _checks.labels(Y, n)
    head = _head(head, d)
    K = keys(X, W)
    p = _checks.batched_vector(p, d, "p")
    sets = None if sets is None else _checks.token_sets(sets, n, T)
    return X, Y, K, head, p, get_loss(loss), sets


def head_attention(X, p, W=None, sets=None) -> np.ndarray:
    """Attention weights softmax(X_i W p), restricted to ``sets`` (n, T) if given; (..., n, T)."""
    X = _checks.tokens(X)
    K = keys(X, W)
    p = _checks.batched_vector(p, X.shape[2], "p")
    logits = np.einsum("ntd,...d->...nt", K, p)
    if sets is not None:
        logits = np.where(_checks.token_sets(sets, *X.shape[:2]), logits, -np.inf)
    return softmax(logits)


def head_predict(X, head: MLPHead, p, W=None, sets=None) -> np.ndarray:
    """Output of the nonlinear head f(X_i) = psi(X_i^T softmax(X_i W p)), shape (..., n)."""
    X = _checks.tokens(X)
    head = _head(head, X.shape[2])
    s = head_attention(X, p, W, sets)
    return head.value(np.einsum("...nt,ntd->...nd", s, X))


def head_risk(X, Y, head: MLPHead, p, W=None, loss: str | Loss = "logistic", sets=None) -> np.ndarray:
    """Risk (1/n) sum_i loss(Y_i psi(X_i^T softmax(X_i W p))), shape (...).

    With ``sets`` (n, T) bool the softmax runs over each set O_i only (the restricted risk).
    """
    X, Y, K, head, p, loss, sets = _head_inputs(X, Y, head, p, W, loss, sets)
    P = p.reshape(-1, X.shape[2])
    return _head_forward(X, Y, K, head, P, loss, sets, False)[0].reshape(p.shape[:-1])


def head_risk_grad(X, Y, head: MLPHead, p, W=None, loss: str | Loss = "logistic", sets=None) -> np.ndarray:
    """Gradient in p of :func:`head_risk`, shape (..., d).

    grad_p L = (1/n) sum_i l'_i Y_i sum_t s_it (x_it - z_i)^T grad psi(z_i) W^T x_it,
    with z_i = X_i^T s_i.
    """
    X, Y, K, head, p, loss, sets = _head_inputs(X, Y, head, p, W, loss, sets)
    P = p.reshape(-1, X.shape[2])
    return _head_forward(X, Y, K, head, P, loss, sets, True)[1].reshape(p.shape)


@dataclass(frozen=True)
class OptimalSets:
    """The loss-minimising attention mixture of every sequence.

    Attributes
    ----------
    weights : (n, T) the minimiser s_i* of loss(Y_i psi(X_i^T s)) over the simplex.
    sets : (n, T) bool, the optimal sets O_i = {t : s_it* > threshold}.
    loss : (n,) the minimal per-sequence loss.
    """

    weights: np.ndarray
    sets: np.ndarray
    loss: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        """(n,) the number of tokens in each optimal set."""
        return self.sets.sum(axis=1)


def optimal_sets(X, Y, head: MLPHead, loss: str | Loss = "logistic", threshold: float = 1e-3) -> OptimalSets:
    """Optimal token sets: minimise loss(Y_i psi(X_i^T s)) over the simplex, one sequence at a time.

    Multi-start SLSQP (every vertex, every edge midpoint and the centre of the simplex); the
    set O_i holds the tokens whose optimal weight exceeds ``threshold``.
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    Y = _checks.labels(Y, n)
    head = _head(head, d)
    loss = get_loss(loss)
    threshold = _checks.positive_float(threshold, "threshold")
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
                           options={"ftol": 1e-15, "maxiter": 500})
            s = np.clip(res.x, 0.0, None)
            s /= s.sum()
            found.append((fun(s)[0], tuple(s)))
        value, s = min(found)
        weights[i], best[i] = s, value
    return OptimalSets(weights, weights > threshold, best)


def set_offset(X, Y, head: MLPHead, sets, W=None, loss: str | Loss = "logistic") -> np.ndarray:
    """The bounded in-set component p_fin of the path, shape (d,).

    p_fin minimises the restricted risk (attention softmax over each set O_i only) over the span
    of the in-set key differences k_it - k_itau (t, tau in O_i): that span is orthogonal to the
    set-SVM direction, and the restricted risk ignores every other component. Zero when every
    set is a single token.
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    Y = _checks.labels(Y, n)
    head = _head(head, d)
    sets = _checks.token_sets(sets, n, T)
    loss = get_loss(loss)
    K = keys(X, W)
    first = np.argmax(sets, axis=1)
    rows = [K[i, t] - K[i, first[i]] for i in range(n) for t in np.flatnonzero(sets[i]) if t != first[i]]
    Q = _basis(np.array(rows).reshape(-1, d))
    if Q.shape[1] == 0:
        return np.zeros(d)

    def fun(q):
        value, grad = _head_forward(X, Y, K, head, (Q @ q)[None], loss, sets, True)
        return float(value[0]), Q.T @ grad[0]

    res = minimize(fun, np.zeros(Q.shape[1]), jac=True, method="BFGS", options={"gtol": 1e-13, "maxiter": 2000})
    if not np.all(np.isfinite(res.x)) or np.linalg.norm(fun(res.x)[1]) > 1e-8:
        raise ValueError("sets: the restricted risk has no finite minimiser in the span of the in-set "
                         "key differences (the mixture inside some set wants a vertex)")
    return Q @ res.x


def set_direction(X, Y, head: MLPHead, W=None, loss: str | Loss = "logistic",
                  threshold: float = 1e-3) -> tuple[OptimalSets, SetSVMResult, np.ndarray]:
    """Optimal sets, their set-SVM and the in-set offset p_fin, in one call.

    Returns (optimal sets, ``mm.set_svm`` result, p_fin (d,)): the path is predicted to behave
    like R p^mm / ||p^mm|| + p_fin for large R.
    """
    opt = optimal_sets(X, Y, head, loss, threshold)
    svm = set_svm(X, opt.sets, W)
    return opt, svm, set_offset(X, Y, head, opt.sets, W, loss)


@dataclass(frozen=True)
class HeadInstance:
    """A data set for a nonlinear head: ``X`` (n, T, d), ``Y`` (n,), ``W`` (d, d), ``head``."""

    name: str
    X: np.ndarray
    Y: np.ndarray
    W: np.ndarray
    head: MLPHead
    notes: str = ""


def mixing_example(beta: float = 2.0, a=(1.0, 0.6)) -> HeadInstance:
    """Two sequences of four tokens whose best output may *mix* two tokens.

    Coordinates are (key1, key2, value1, value2) and W = diag(1, 1, 0, 0): attention sees the
    keys, the head sees the values. Token 0 has value (1, 0), token 1 value (0, 1), tokens 2
    and 3 value (0, 0). The head psi(z) = a_1 tanh(beta z_3) + a_2 tanh(beta z_4) is an MLP with
    two tanh units. For small ``beta`` it is nearly linear and token 0 alone is best; once
    beta > arccosh(sqrt(a_1 / a_2)) mixing tokens 0 and 1 gives a larger output. In both
    sequences k_0 - k_1 = (0, 1), so one prompt can set both in-set mixtures at once.
    """
    beta = _checks.positive_float(beta, "beta")
    a = _checks.vector(a, 2, "a")
    X = np.array([
        [[1.0, 0.5, 1.0, 0.0], [1.0, -0.5, 0.0, 1.0], [-0.5, 1.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0]],
        [[0.6, 0.8, 1.0, 0.0], [0.6, -0.2, 0.0, 1.0], [-1.0, 0.0, 0.0, 0.0], [0.2, -1.2, 0.0, 0.0]],
    ])
    B = beta * np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    return HeadInstance(f"mixing-beta{beta:g}", X, np.ones(2), np.diag([1.0, 1.0, 0.0, 0.0]),
                        mlp_head(a, B), notes="token 0 value (1,0), token 1 value (0,1), others (0,0)")


# ----------------------------------------------------------------------------------------------
# Regularization paths
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegularizationPath:
    """Solutions of min L(p) s.t. ||p|| <= R (and p in a cone, for a local path), one per radius.

    Attributes
    ----------
    radii : (k,) the radii R, increasing.
    points : (k, d) the returned p_bar(R).
    losses : (k,) L(p_bar(R)).
    grad_norms : (k,) ||grad L(p_bar(R))||.
    kkt : (k,) absolute KKT residual min_{lambda >= 0} ||grad L + sum_j lambda_j grad c_j|| over
        the active constraints c_j <= 0 (the ball, and the cone if given).
    kkt_relative : (k,) kkt / grad_norms: the sine of the angle between -grad L and the cone of
        active constraint normals (0 means exactly stationary; an interior point has 1 unless
        its gradient vanishes).
    multipliers : (k,) lambda of the ball constraint, normalised so -grad L = lambda p / ||p||
        (+ cone terms); 0 when the ball is inactive.
    on_boundary : (k,) bool, ||p_bar(R)|| = R.
    on_cone : (k,) bool, the cone constraint is active (always False without a cone).
    cone : (direction (d,), angle in degrees) or None.
    """

    radii: np.ndarray
    points: np.ndarray
    losses: np.ndarray
    grad_norms: np.ndarray
    kkt: np.ndarray
    kkt_relative: np.ndarray
    multipliers: np.ndarray
    on_boundary: np.ndarray
    on_cone: np.ndarray
    cone: tuple | None = None

    @property
    def directions(self) -> np.ndarray:
        """(k, d) unit vectors p_bar(R) / ||p_bar(R)||."""
        return self.points / np.linalg.norm(self.points, axis=1, keepdims=True)

    def cosine(self, direction) -> np.ndarray:
        """(k,) cosine of each p_bar(R) with ``direction`` (d,)."""
        u = np.asarray(direction, dtype=np.float64)
        return self.directions @ (u / np.linalg.norm(u))

    def is_stationary(self, rtol: float = 1e-6, atol: float = 1e-12) -> np.ndarray:
        """(k,) bool: kkt <= max(rtol * ||grad||, atol) on active constraints, ||grad|| <= atol inside."""
        active = self.on_boundary | self.on_cone
        return np.where(active, self.kkt <= np.maximum(rtol * self.grad_norms, atol), self.grad_norms <= atol)


def regularization_path(X, Y, v, radii, W=None, loss: str | Loss = "logistic", starts: int = 8,
                        seed: int = 0, steps: int = 300, cone=None) -> RegularizationPath:
    """The regularization path p_bar(R) = argmin_{||p|| <= R} L(p) for increasing radii.

    Parameters
    ----------
    X, Y, W : the instance, shapes (n, T, d), (n,), (d, d) or None.
    v : (d,) the linear head (the paper's model, risk ``mm.risk``), or an :class:`MLPHead`.
    radii : (k,) positive increasing radii.
    loss : "logistic", "exponential", "correlation" or a ``Loss``.
    starts : number of seeded random starts on each sphere (the previous solution, scaled to the
        new radius, is always added).
    seed : seed of the random starts (the same directions are reused at every radius).
    steps : iterations of the batched projected normalized-gradient phase.
    cone : None, or (direction (d,), angle in degrees < 90): restrict p to the circular cone
        {p : angle(p, direction) <= angle} (the local path).

    Returns
    -------
    RegularizationPath, with KKT residuals certifying each point.

    Notes
    -----
    The loss depends on p only through the key differences k_it - k_itau; the component of p
    orthogonal to their span costs norm and changes nothing, so the search runs in that span
    (an orthonormal basis Q, p = Q q) and the minimiser has no other component.
    """
    X = _checks.tokens(X)
    n, T, d = X.shape
    Y = _checks.labels(Y, n)
    W = _checks.key_matrix(W, d)
    loss = get_loss(loss)
    radii = _radii(radii)
    starts = _checks.positive_int(starts, "starts", minimum=0)
    steps = _checks.positive_int(steps, "steps")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed: expected an integer, got {type(seed).__name__}")
    objective = _objective(X, Y, v, W, loss)
    with _threads_for(0):  # many tiny solves: one torch thread
        return _path(X, W, objective, radii, starts, seed, steps, cone)


def _path(X, W, objective, radii, starts, seed, steps, cone) -> RegularizationPath:
    d = X.shape[2]
    K = keys(X, W)
    Q = _basis((K - K[:, :1]).reshape(-1, d))
    if Q.shape[1] == 0:
        raise ValueError("X: every sequence has identical keys, so the loss does not depend on p")
    axis, cos_angle = None, None
    if cone is not None:
        axis, cos_angle, cone = _cone(cone, Q, d)

    r = Q.shape[1]
    rng = np.random.default_rng(seed)
    random_dirs = _project_cone(rng.standard_normal((starts, r)), axis, cos_angle, None)
    if axis is not None:
        zero = np.linalg.norm(random_dirs, axis=1) < 1e-12
        random_dirs[zero] = axis
        random_dirs = np.vstack([random_dirs, axis[None]])
    random_dirs = random_dirs / np.linalg.norm(random_dirs, axis=1, keepdims=True)

    def f(qs, need_value=True):
        values, grads = objective(qs @ Q.T, need_value)
        return values, grads @ Q

    k = len(radii)
    out = {name: np.zeros(k) for name in ("losses", "grad", "kkt", "rel", "lam")}
    points = np.zeros((k, d))
    boundary, on_cone = np.zeros(k, bool), np.zeros(k, bool)
    previous = None
    for j, R in enumerate(radii):
        candidates = random_dirs * R
        if previous is not None and np.linalg.norm(previous) > 0:
            candidates = np.vstack([previous * (R / np.linalg.norm(previous)), candidates])
        q_all = _projected_descent(f, candidates, R, axis, cos_angle, steps)
        best = None
        for q0 in q_all:
            q = _polish(f, q0, R, axis, cos_angle)
            value, grad = f(q[None])
            kkt = _kkt(q, grad[0], R, axis, cos_angle)
            key = (float(value[0]), kkt[1])
            if best is None or _better(key, best[0]):
                best = (key, q, grad[0], kkt)
        (value, _), q, grad, (kkt, rel, lam, on_b, on_c) = best
        previous = q
        points[j] = Q @ q
        out["losses"][j], out["grad"][j] = value, np.linalg.norm(grad)
        out["kkt"][j], out["rel"][j], out["lam"][j] = kkt, rel, lam
        boundary[j], on_cone[j] = on_b, on_c
    return RegularizationPath(radii, points, out["losses"], out["grad"], out["kkt"], out["rel"], out["lam"],
                              boundary, on_cone, cone)


def local_regularization_path(X, Y, v, radii, direction, angle: float, W=None,
                              loss: str | Loss = "logistic", starts: int = 8, seed: int = 0,
                              steps: int = 300) -> RegularizationPath:
    """The local path: argmin L(p) over ||p|| <= R and angle(p, direction) <= ``angle`` degrees.

    A thin wrapper of :func:`regularization_path` with ``cone=(direction, angle)``; ``direction``
    (d,) is typically a locally-optimal p^mm(alpha). The path is asymptotic: for moderate R the
    minimiser can sit on the cone's wall (see ``RegularizationPath.on_cone``).
    """
    return regularization_path(X, Y, v, radii, W, loss, starts, seed, steps, cone=(direction, angle))


# ----------------------------------------------------------------------------------------------
# Private machinery of the path solver
# ----------------------------------------------------------------------------------------------


def _objective(X, Y, v, W, loss: Loss):
    """A function (B, d) -> (risks (B,), gradients (B, d)) for the linear or the MLP head."""
    d = X.shape[2]
    if isinstance(v, MLPHead):
        head = _head(v, d)
        K = keys(X, W)
        return lambda P, need_value=True: _head_forward(X, Y, K, head, P, loss, None, True)
    v = _checks.vector(v, d, "v")

    def objective(P, need_value=True):
        value = risk(X, Y, v, P, W, loss) if need_value else None
        return value, risk_grad(X, Y, v, P, W, loss)

    return objective


def _radii(radii) -> np.ndarray:
    radii = _checks.finite(np.atleast_1d(_checks._as_float_array(radii, "radii")), "radii")
    if radii.ndim != 1 or len(radii) == 0:
        raise ValueError(f"radii: expected a non-empty 1-D array, got shape {radii.shape}")
    if np.any(radii <= 0):
        raise ValueError(f"radii: must be positive, got {radii.min()}")
    if np.any(np.diff(radii) <= 0):
        raise ValueError("radii: must be strictly increasing")
    return radii


def _basis(rows: np.ndarray) -> np.ndarray:
    """(d, r) orthonormal basis of the span of ``rows`` (m, d)."""
    d = rows.shape[1]
    if len(rows) == 0:
        return np.zeros((d, 0))
    _, sing, Vt = np.linalg.svd(rows, full_matrices=False)
    rank = int(np.sum(sing > 1e-12 * max(sing.max(initial=0.0), 1e-300)))
    return Vt[:rank].T


def _cone(cone, Q: np.ndarray, d: int):
    try:
        direction, angle = cone
    except (TypeError, ValueError):
        raise TypeError("cone: expected (direction, angle in degrees)") from None
    direction = _checks.vector(direction, d, "direction")
    angle = _checks.positive_float(angle, "angle")
    if angle >= 90:
        raise ValueError(f"angle: the cone half-angle must be below 90 degrees, got {angle}")
    norm = np.linalg.norm(direction)
    if norm == 0:
        raise ValueError("direction: the cone axis is zero")
    inside = Q.T @ direction
    if np.linalg.norm(Q @ inside - direction) > 1e-9 * norm:
        raise ValueError("direction: has a component that no key difference sees (orthogonal to the "
                         "span of k_it - k_itau); project it onto that span first")
    return inside / np.linalg.norm(inside), float(np.cos(np.radians(angle))), (direction.copy(), angle)


def _project_cone(q: np.ndarray, axis, cos_angle, R) -> np.ndarray:
    """Project rows q (B, r) onto the cone (if any), then onto the ball of radius R (if any)."""
    if axis is not None:
        a = q @ axis
        w = q - a[:, None] * axis
        b = np.linalg.norm(w, axis=1)
        sin_angle = np.sqrt(1.0 - cos_angle**2)
        outside = b * cos_angle > a * sin_angle + 1e-15 * np.linalg.norm(q, axis=1)
        unit_w = np.divide(w, b[:, None], out=np.zeros_like(w), where=b[:, None] > 0)
        edge = cos_angle * axis + sin_angle * unit_w
        reach = np.maximum(np.einsum("ij,ij->i", q, edge), 0.0)
        q = np.where(outside[:, None], reach[:, None] * edge, q)
    if R is not None:
        norms = np.linalg.norm(q, axis=1, keepdims=True)
        q = q * np.minimum(1.0, R / np.maximum(norms, 1e-300))
    return q


def _projected_descent(f, q, R, axis, cos_angle, steps):
    """Batched projected normalized gradient descent with geometrically decaying steps."""
    q = _project_cone(q, axis, cos_angle, R)
    for k in range(steps):
        _, g = f(q, need_value=False)
        g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300)
        lr = 0.25 * R * 1e-5 ** (k / steps)
        q = _project_cone(q - lr * g, axis, cos_angle, R)
    return q


def _polish(f, q0, R, axis, cos_angle):
    """SLSQP on the scaled objective (L(q) - L(q0)) / (R ||grad L(q0)||); keeps q0 if not better."""
    value0, grad0 = f(q0[None])
    scale = max(R * float(np.linalg.norm(grad0[0])), 1e-300)

    def fun(q):
        value, grad = f(q[None])
        return float((value[0] - value0[0]) / scale), grad[0] / scale

    constraints = [{"type": "ineq", "fun": lambda q: (R * R - q @ q) / (R * R), "jac": lambda q: -2 * q / (R * R)}]
    if axis is not None:
        def cone_fun(q):
            return (q @ axis - cos_angle * np.linalg.norm(q)) / R

        def cone_jac(q):
            return (axis - cos_angle * q / max(np.linalg.norm(q), 1e-300)) / R

        constraints.append({"type": "ineq", "fun": cone_fun, "jac": cone_jac})
    res = minimize(fun, q0, jac=True, method="SLSQP", constraints=constraints,
                   options={"ftol": 1e-16, "maxiter": 300})
    q = _project_cone(res.x[None], axis, cos_angle, R)[0]
    if not np.all(np.isfinite(q)):
        return q0
    v_new, g_new = f(q[None])
    old, new = _kkt(q0, grad0[0], R, axis, cos_angle), _kkt(q, g_new[0], R, axis, cos_angle)
    return q if _better((float(v_new[0]), new[1]), (float(value0[0]), old[1])) else q0


def _better(a, b) -> bool:
    """Compare (loss, relative kkt): lower loss, unless the losses tie to rounding; then lower kkt."""
    tie = abs(a[0] - b[0]) <= 1e-14 * max(1.0, abs(a[0]), abs(b[0]))
    return a[1] < b[1] if tie else a[0] < b[0]


def _kkt(q, g, R, axis, cos_angle, tol: float = 1e-9):
    """KKT residual at q for min f s.t. ||q|| <= R (and the cone). Returns
    (absolute residual, relative residual, ball multiplier, ball active, cone active)."""
    normals, which = [], []
    norm = np.linalg.norm(q)
    on_ball = norm >= R * (1 - tol)
    if on_ball:
        normals.append(q / norm)
        which.append("ball")
    on_cone = False
    if axis is not None and norm > 0:
        on_cone = q @ axis <= cos_angle * norm + tol * norm
        if on_cone:
            normals.append(cos_angle * q / norm - axis)
            which.append("cone")
    gnorm = float(np.linalg.norm(g))
    if normals:
        N = np.array(normals).T
        lam, residual = nnls(N, -g)
    else:
        lam, residual = np.zeros(0), gnorm
    ball = float(lam[which.index("ball")]) if "ball" in which else 0.0
    rel = residual / gnorm if gnorm > 0 else 0.0
    return float(residual), float(rel), ball, bool(on_ball), bool(on_cone)
