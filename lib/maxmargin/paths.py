"""Regularization paths p_bar(R) = argmin_{||p|| <= R} L(p), global and inside a cone.

Shapes: ``X`` is (n, T, d), ``Y`` is (n,) in {-1, +1}, ``W`` is (d, d) or ``None`` (identity),
``p`` is (..., d). The head is either a vector ``v`` of shape (d,) (the linear head
psi(z) = v^T z of the paper's main model) or an :class:`~maxmargin.heads.MLPHead`.

The constrained problem is nonconvex, so :func:`regularization_path` runs several starts at every
radius (seeded random points on the sphere plus the previous radius's solution scaled up), a
batched projected normalized-gradient phase, an SLSQP polish, and then *checks* every returned
point: it is reported with the residual of the constrained first-order (KKT) conditions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _checks, _kernels
from ._headmodel import _head_objective
from ._least_distance import norm as vector_norm
from ._least_distance import row_norms
from ._numerics import _risk, _risk_grad
from .heads import MLPHead
from .losses import Loss, get_loss
from .problem import Problem, exponents, keyed, problem


@dataclass(frozen=True)
class RegularizationPath:
    """Solutions of `min L(p) s.t. ||p|| <= R` (and p in a cone, for a local path), one per radius.

    Attributes
    ----------
    radii : (k,) the radii R, increasing.
    points : (k, d) the returned `p_bar(R)`.
    risk : (k,) `L(p_bar(R))`.
    grad_norms : (k,) `||grad L(p_bar(R))||`.
    kkt : (k,) absolute KKT residual `min_{lambda >= 0} ||grad L + sum_j lambda_j grad c_j||` over
        the active constraints `c_j <= 0` (the ball, and the cone if given).
    kkt_relative : (k,) kkt / grad_norms: the sine of the angle between -grad L and the cone of
        active constraint normals (0 means exactly stationary; an interior point has 1 unless
        its gradient vanishes).
    multipliers : (k,) `lambda` of the ball constraint, normalised so `-grad L = lambda p / ||p||`
        (+ cone terms); 0 when the ball is inactive.
    on_boundary : (k,) bool, `||p_bar(R)|| = R`.
    on_cone : (k,) bool, the cone constraint is active (always False without a cone).
    cone : (direction (d,), angle in degrees) or None.
    directions : (property) (k, d) unit vectors `p_bar(R) / ||p_bar(R)||`.

    Methods ``cosine(direction)``, (k,) cosines of the points with a (d,) direction, and
    ``is_stationary(*, rtol=1e-6, atol=1e-12)``, (k,) bool, `kkt <= max(rtol ||grad||, atol)` on
    active constraints and `||grad|| <= atol` inside.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> path = mm.regularization_path(X, [1.0], [1.0, 0.5], [1.0, 2.0], starts=2, steps=50)
    >>> path.is_stationary(), np.round(path.directions, 4)
    (array([ True,  True]), array([[ 0.7071, -0.7071],
           [ 0.7071, -0.7071]]))
    >>> bool(path.risk[1] < path.risk[0])  # a larger ball, a lower risk
    True
    """

    radii: np.ndarray
    points: np.ndarray
    risk: np.ndarray
    grad_norms: np.ndarray
    kkt: np.ndarray
    kkt_relative: np.ndarray
    multipliers: np.ndarray
    on_boundary: np.ndarray
    on_cone: np.ndarray
    cone: tuple | None = None

    losses = _checks.renamed("RegularizationPath", "losses", "risk", "L(p_bar(R)) at each radius")

    @property
    def directions(self) -> np.ndarray:
        """(k, d) unit vectors `p_bar(R) / ||p_bar(R)||`."""
        return self.points / row_norms(self.points)[:, None]

    def cosine(self, direction) -> np.ndarray:
        """(k,) cosine of each `p_bar(R)` with ``direction`` (d,) (see :func:`maxmargin.cosine`)."""
        d = self.points.shape[-1]
        return _kernels.cosine(self.points, _checks.direction(direction, self.points.shape, f"({d},)"))

    def is_stationary(self, *, rtol: float = 1e-6, atol: float = 1e-12) -> np.ndarray:
        """(k,) bool: `kkt <= max(rtol ||grad||, atol)` on active constraints, `||grad|| <= atol` inside."""
        active = self.on_boundary | self.on_cone
        return np.where(active, self.kkt <= np.maximum(rtol * self.grad_norms, atol), self.grad_norms <= atol)


def regularization_path(X, Y, v, radii, *, W=None, loss: str | Loss = "logistic", starts: int = 8,
                        seed: int = 0, steps: int = 300, cone=None) -> RegularizationPath:
    """The regularization path `p_bar(R) = argmin_{||p|| <= R} L(p)` for increasing radii.

    Parameters
    ----------
    X, Y, W : the instance, shapes (n, T, d), (n,), (d, d) or None (W keyword-only, default None:
        the identity).
    v : (d,) the linear head (the paper's model, risk ``mm.risk``), or an :class:`MLPHead`.
    radii : (k,) positive increasing radii, at most `1e300 / max ||k||` (with `max ||k||` an upper
        bound on the keys and on twice their differences): beyond, the logits `R k^T u` leave
        float64 and ``ValueError`` names ``radii`` and the limit.
    loss : keyword-only, "logistic" (the default), "exponential", "correlation" or a ``Loss``.
    starts : keyword-only, number of seeded random starts on each sphere (default 8, at least 1;
        the previous solution, scaled to the new radius, is always added).
    seed : keyword-only, seed of the random starts (default 0; the same directions are reused at
        every radius).
    steps : keyword-only, iterations of the batched projected normalized-gradient phase (default
        300).
    cone : keyword-only, None (the default), or (direction (d,), angle in degrees < 90):
        restrict p to the circular cone {p : angle(p, direction) <= angle} (the local path).

    Returns
    -------
    RegularizationPath, with KKT residuals certifying each point.

    Raises
    ------
    ValueError : bad inputs (shapes, labels, NaN or inf; radii empty, not positive, not strictly
        increasing or beyond the limit above; ``starts`` < 1 without a cone, < 0 with one;
        ``steps`` < 1; ``seed`` < 0; an MLP head whose input size is not d), every sequence has
        identical keys (the risk does not depend on p), or a cone whose angle is not in (0, 90)
        or whose direction is zero or has a component orthogonal to the span of the key
        differences (project it first); the message names the argument.
    TypeError : a non-numeric array, a non-integer ``starts``, ``steps`` or ``seed``, a ``loss``
        that is neither a string nor a ``Loss``, or a ``cone`` that is not a pair.

    Notes
    -----
    The loss depends on p only through the key differences `k_it - k_itau`; the component of p
    orthogonal to their span costs norm and changes nothing, so the search runs in that span
    (an orthonormal basis Q, p = Q q) and the minimiser has no other component.

    Among the candidates at one radius the lowest risk wins; risks that agree to a relative 1e-14
    are ranked by their relative KKT residual instead. Where the risk is flat to float64 rounding
    (large R), the returned point is therefore a certified stationary point, not necessarily the
    constrained minimiser.

    Examples
    --------
    The risk depends on p only through `p_1 - p_2` and decreases as it grows, so `p_bar(R)` is
    `R (1, -1) / sqrt(2)`, on the sphere and along `p^mm = (1/2, -1/2)`:

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> path = mm.regularization_path(X, [1.0], [1.0, 0.5], [1.0, 2.0], starts=2, steps=50)
    >>> np.round(path.points, 4)
    array([[ 0.7071, -0.7071],
           [ 1.4142, -1.4142]])
    >>> path.on_boundary, np.round(path.cosine(mm.att_svm(X, [0]).p), 4)
    (array([ True,  True]), array([1., 1.]))
    """
    return _regularization_path(X, Y, v, radii, W, loss, starts, seed, steps, cone)


def _regularization_path(X, Y, v, radii, W, loss, starts, seed, steps, cone) -> RegularizationPath:
    """The validating body of :func:`regularization_path` (and of the local path)."""
    prob = _path_problem(X, Y, v, W)
    loss = get_loss(loss)
    radii = _radii(radii)
    # Without a cone the first radius has no start but the random ones; a cone adds its axis.
    starts = _checks.positive_int(starts, "starts", minimum=0 if cone is not None else 1)
    steps = _checks.positive_int(steps, "steps")
    seed = _checks.seed(seed, "seed")
    _radius_range(prob.keys, radii)
    objective = _objective(prob, v, loss)
    with _kernels.threads_for(0):  # many tiny solves: one torch thread
        return _path(prob.keys, objective, radii, starts, seed, steps, cone)


def _path(K, objective, radii, starts, seed, steps, cone) -> RegularizationPath:
    d = K.shape[2]
    Q = _kernels.span_basis((K - K[:, :1]).reshape(-1, d))
    if Q.shape[1] == 0:
        raise ValueError("X: every sequence has identical keys, so the loss does not depend on p")
    axis, cos_angle = None, None
    if cone is not None:
        axis, cos_angle, cone = _cone(cone, Q, d)

    r = Q.shape[1]
    # SLSQP's tolerances are absolute: it runs in units of 1 / |k| (a power of two, exact), in
    # which the logits q^T k are of the size of q, whatever the units of the keys.
    unit = float(np.ldexp(1.0, 1 - int(exponents(K, None)))) if np.any(K) else 1.0
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
        if previous is not None and vector_norm(previous) > 0:
            candidates = np.vstack([(previous / vector_norm(previous)) * R, candidates])
        q_all = _projected_descent(f, candidates, R, axis, cos_angle, steps)
        best = None
        for q0 in q_all:
            q = _polish(f, q0, R, axis, cos_angle, unit)
            value, grad = f(q[None])
            kkt = _kkt(q, grad[0], R, axis, cos_angle)
            key = (float(value[0]), kkt[1])
            if best is None or _better(key, best[0]):
                best = (key, q, grad[0], kkt)
        (value, _), q, grad, (kkt, rel, lam, on_b, on_c) = best
        previous = q
        points[j] = Q @ q
        out["losses"][j], out["grad"][j] = value, vector_norm(grad)
        out["kkt"][j], out["rel"][j], out["lam"][j] = kkt, rel, lam
        boundary[j], on_cone[j] = on_b, on_c
    return RegularizationPath(radii, points, out["losses"], out["grad"], out["kkt"], out["rel"], out["lam"],
                              boundary, on_cone, cone)


def local_regularization_path(X, Y, v, radii, direction, angle: float, *, W=None,
                              loss: str | Loss = "logistic", starts: int = 8, seed: int = 0,
                              steps: int = 300) -> RegularizationPath:
    """The local path: `argmin L(p)` over `||p|| <= R` and angle(p, direction) <= ``angle`` degrees.

    A thin wrapper of :func:`regularization_path` with ``cone=(direction, angle)``; ``direction``
    (d,) is typically a locally-optimal `p^mm(alpha)`. The path is asymptotic: for moderate R the
    minimiser can sit on the cone's wall (see ``RegularizationPath.on_cone``).

    Parameters
    ----------
    X, Y, v, W : the instance, shapes (n, T, d), (n,), (d,) or an :class:`MLPHead`, (d, d) or None
        (W keyword-only, default None: the identity).
    radii : (k,) positive increasing radii (as in :func:`regularization_path`).
    direction : (d,) the cone's axis, in the span of the key differences `k_it - k_itau`.
    angle : the cone's half-angle in degrees, 0 < angle < 90.
    loss, starts, seed, steps : keyword-only, as in :func:`regularization_path` (defaults
        "logistic", 8, 0, 300; ``starts`` may be 0 here: the cone's axis is always a start).

    Returns
    -------
    RegularizationPath : with ``cone`` = (direction, angle).

    Raises
    ------
    ValueError : as in :func:`regularization_path`; for the cone: ``angle`` not in (0, 90) (naming
        angle), ``direction`` not (d,), zero, or with a component that no key difference sees
        (naming direction).
    TypeError : as in :func:`regularization_path`, or a non-numeric ``angle``.

    Examples
    --------
    In Fig. 1b, `p^mm = (1, 0, 0)` of the locally optimal selection (1,) is the axis. At these radii
    the minimiser leans toward the higher-score token 0 as far as the cone allows (its wall, at 5
    degrees) while token 1 keeps most of the attention:

    >>> inst = mm.data.fig1(variant="b")
    >>> path = mm.local_regularization_path(inst.X, inst.Y, inst.v, [1.0, 10.0], [1.0, 0.0, 0.0],
    ...                                     5.0, W=inst.W)
    >>> path.on_cone, np.round(path.cosine([1.0, 0.0, 0.0]), 4)  # cos(5 degrees) = 0.9962
    (array([ True,  True]), array([0.9962, 0.9962]))
    >>> np.argmax(mm.attention(inst.X, path.points, W=inst.W), axis=-1)
    array([[1],
           [1]])
    """
    return _regularization_path(X, Y, v, radii, W, loss, starts, seed, steps, (direction, angle))


# ----------------------------------------------------------------------------------------------
# Private machinery of the path solver
# ----------------------------------------------------------------------------------------------


def _path_problem(X, Y, v, W) -> Problem:
    """The validated instance: with the linear head v (d,) its scores too; an MLP head is
    checked by :func:`_objective`."""
    if isinstance(v, MLPHead):
        prob = keyed(X, W)
        return Problem(prob.X, _checks.labels(Y, prob.shape[0]), None, prob.W, prob.keys, None)
    return problem(X, Y, v, W)


def _objective(prob: Problem, v, loss: Loss):
    """A function (B, d) -> (risks (B,), gradients (B, d)) for the linear or the MLP head, on a
    validated problem and validated prompts."""
    if isinstance(v, MLPHead):
        return _head_objective(prob, v, loss)

    def objective(P, need_value=True):
        value = _risk(prob, P, loss) if need_value else None
        return value, _risk_grad(prob, P, loss)

    return objective


def _radii(radii) -> np.ndarray:
    radii = _checks.finite(np.atleast_1d(_checks.as_float_array(radii, "radii")), "radii")
    if radii.ndim != 1 or len(radii) == 0:
        raise ValueError(f"radii: expected a non-empty 1-D array, got shape {radii.shape}")
    if np.any(radii <= 0):
        raise ValueError(f"radii: must be positive, got {radii.min()}")
    if np.any(np.diff(radii) <= 0):
        raise ValueError("radii: must be strictly increasing")
    return radii


#: Largest R max_{i,t,tau} ||k_it - k_itau|| accepted: logits and their differences stay finite.
LOGIT_LIMIT = 1e300


def _radius_range(K: np.ndarray, radii: np.ndarray) -> None:
    """Refuse radii whose logits R ||k|| could overflow float64 (``radii`` named, with the limit);
    K (n, T, d) validated keys."""
    spread = float(np.max(np.abs(K - K[:, :1]).sum(axis=2)))  # >= every ||k_it - k_i0||
    size = float(np.max(np.abs(K).sum(axis=2)))              # >= every ||k_it||
    reach = max(2.0 * spread, size)
    if reach > 0 and radii[-1] > LOGIT_LIMIT / reach:
        raise ValueError(
            f"radii: R = {radii[-1]:.3g} is beyond the representable range: the logits "
            f"R k_it^T u reach R times {reach:.3g}, above {LOGIT_LIMIT:.0e}; the largest "
            f"accepted radius for these keys is {LOGIT_LIMIT / reach:.3g}")


def _cone(cone, Q: np.ndarray, d: int):
    try:
        direction, angle = cone
    except (TypeError, ValueError):
        raise TypeError("cone: expected (direction, angle in degrees)") from None
    direction = _checks.vector(direction, d, "direction")
    angle = _checks.positive_float(angle, "angle")
    if angle >= 90:
        raise ValueError(f"angle: the cone half-angle must be below 90 degrees, got {angle}")
    top = float(np.max(np.abs(direction)))
    if top == 0:
        raise ValueError("direction: the cone axis is zero")
    original, direction = direction.copy(), direction / top   # so that no norm overflows
    norm = np.linalg.norm(direction)
    inside = Q.T @ direction
    if np.linalg.norm(Q @ inside - direction) > 1e-9 * norm:
        raise ValueError("direction: has a component that no key difference sees (orthogonal to the "
                         "span of k_it - k_itau); project it onto that span first")
    return inside / np.linalg.norm(inside), float(np.cos(np.radians(angle))), (original, angle)


def _project_cone(q: np.ndarray, axis, cos_angle, R) -> np.ndarray:
    """Project rows q (B, r) onto the cone (if any), then onto the ball of radius R (if any)."""
    if axis is not None:
        a = q @ axis
        w = q - a[:, None] * axis
        b = row_norms(w)
        sin_angle = np.sqrt(1.0 - cos_angle**2)
        outside = b * cos_angle > a * sin_angle + 1e-15 * row_norms(q)
        unit_w = np.divide(w, b[:, None], out=np.zeros_like(w), where=b[:, None] > 0)
        edge = cos_angle * axis + sin_angle * unit_w
        reach = np.maximum(np.einsum("ij,ij->i", q, edge), 0.0)
        q = np.where(outside[:, None], reach[:, None] * edge, q)
    if R is not None:
        norms = row_norms(q)[:, None]
        shrink = np.divide(R, norms, out=np.ones_like(norms), where=norms > 0)
        q = q * np.minimum(1.0, shrink)
    return q


def _projected_descent(f, q, R, axis, cos_angle, steps):
    """Batched projected normalized gradient descent with geometrically decaying steps."""
    q = _project_cone(q, axis, cos_angle, R)
    for k in range(steps):
        _, g = f(q, need_value=False)
        size = row_norms(g)[:, None]  # scale-safe: gradients scale like the keys
        g = np.divide(g, size, out=np.zeros_like(g), where=size > 0)
        lr = 0.25 * R * 1e-5 ** (k / steps)
        q = _project_cone(q - lr * g, axis, cos_angle, R)
    return q


def _polish(f, q0, R, axis, cos_angle, key_unit):
    """SLSQP on the scaled objective (L(q) - L(q0)) / (R ||grad L(q0)||); keeps q0 if not better.

    SLSQP runs on x = q / unit with unit = key_unit (a power of two near 1 / max |k|), so that
    its absolute tolerances on x and on its steps see the same problem whatever the units of
    the keys; beyond R = 1e100 key units, unit = R (the unit ball), so that neither R^2 nor the
    iterates' squares leave float64. (x = q / R at every radius costs twice the iterations on
    unit keys: chapter 05 ran 61 s instead of 28 s.) Gradient norms are taken without
    squaring (they scale like the keys)."""
    from scipy.optimize import minimize  # deferred: importing SciPy costs about 0.5 s

    value0, grad0 = f(q0[None])
    gnorm = vector_norm(grad0[0])
    if gnorm == 0:  # stationary already: nothing to polish
        return q0
    scale = R * gnorm
    unit = key_unit if R <= 1e100 * key_unit else R

    def fun(x):
        value, grad = f((unit * x)[None])
        return float((value[0] - value0[0]) / scale), (grad[0] / gnorm) * (unit / R)

    def ball(x):
        u = x * (unit / R)
        return 1.0 - u @ u

    constraints = [{"type": "ineq", "fun": ball, "jac": lambda x: -2 * x * (unit / R) ** 2}]
    if axis is not None:
        def cone_fun(x):
            return (x @ axis - cos_angle * vector_norm(x)) * (unit / R)

        def cone_jac(x):
            size = vector_norm(x)
            return (axis - (cos_angle * x / size if size > 0 else 0.0)) * (unit / R)

        constraints.append({"type": "ineq", "fun": cone_fun, "jac": cone_jac})
    res = minimize(fun, q0 / unit, jac=True, method="SLSQP", constraints=constraints,
                   options={"ftol": 1e-16, "maxiter": 300})
    q = _project_cone((unit * res.x)[None], axis, cos_angle, R)[0]
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
    from scipy.optimize import nnls  # deferred: importing SciPy costs about 0.5 s

    normals, which = [], []
    norm = vector_norm(q)
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
    gnorm = vector_norm(g)
    if normals and gnorm > 0:  # NNLS on the unit gradient: g scales like the keys
        N = np.array(normals).T
        lam, residual = nnls(N, -g / gnorm)
        lam, residual = lam * gnorm, residual * gnorm
    elif normals:
        lam, residual = np.zeros(len(normals)), 0.0
    else:
        lam, residual = np.zeros(0), gnorm
    ball = float(lam[which.index("ball")]) if "ball" in which else 0.0
    rel = residual / gnorm if gnorm > 0 else 0.0
    return float(residual), float(rel), ball, bool(on_ball), bool(on_cone)
