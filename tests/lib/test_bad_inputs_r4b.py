"""Bad and extreme inputs, round four, helper B (causes 4, 5 and 6 of the review).

Cause 6: a Python int beyond float64 (10**400) as a scalar setting let numpy's "ufunc 'isfinite'
not supported" (or Python's OverflowError) escape, naming no argument; a ragged nested list as an
array argument failed inside numpy ("inhomogeneous shape") before validation. Each case here
must raise a ValueError / TypeError whose message starts with the argument's name.
"""
from __future__ import annotations

import inspect

import re

import numpy as np
import pytest

import maxmargin as mm

inst = mm.data.fig2()
X, Y, v = inst.X, inst.Y, inst.v
n, T, d = X.shape
P = np.zeros(d)
I = np.eye(d)
Z = np.ones((n, d))
ALPHA = np.zeros(n, dtype=int)
SETS = np.eye(T, dtype=bool)[ALPHA]
HEAD = mm.mlp_head([1.0], [[1.0] * d])

# A valid call of each public function, by keyword; a case replaces one argument.
CALLS = {
    "gd": (mm.gd, dict(X=X, Y=Y, v=v, p0=P, steps=2, lr=0.1)),
    "gd_stack": (mm.gd_stack, dict(X=X[None], Y=Y[None], v=v, p0=P, steps=2, lr=0.1, track=ALPHA[None])),
    "gd_W": (mm.gd_W, dict(X=X, Y=Y, v=v, W0=I, queries=Z, steps=2, lr=0.1)),
    "gd_KQ": (mm.gd_KQ, dict(X=X, Y=Y, v=v, K0=I, Q0=I, queries=Z, steps=2, lr=0.1, reg=0.1)),
    "gd_KQ_stack": (mm.gd_KQ_stack, dict(X=X[None], Y=Y[None], v=v, K0=I, Q0=I, queries=Z[None],
                                         steps=2, lr=0.1, reg=0.1)),
    "gd_joint": (mm.gd_joint, dict(X=X, Y=Y, v0=v, p0=P, steps=2, lr=0.1, normalized=True, track=ALPHA)),
    "penalty_path": (mm.penalty_path, dict(X=X, Y=Y, v=v, K0=I, Q0=I, queries=Z, penalties=[0.1],
                                           max_iter=5)),
    "regularization_path": (mm.regularization_path, dict(X=X, Y=Y, v=v, radii=[1.0], starts=1, steps=2)),
    "local_regularization_path": (mm.local_regularization_path, dict(
        X=X, Y=Y, v=v, radii=[1.0], direction=[1.0, 0.0, 0.0], angle=0.5, starts=1, steps=2)),
    "att_svm": (mm.att_svm, dict(X=X, alpha=ALPHA, W=I, relaxed=np.zeros(n, bool))),
    "set_svm": (mm.set_svm, dict(X=X, sets=SETS, W=I)),
    "v_svm": (mm.v_svm, dict(R=X[:, 0], Y=Y)),
    "w_svm": (mm.w_svm, dict(X=X, alpha=ALPHA, queries=Z)),
    "least_distance": (mm.least_distance, dict(G=[[1.0, 0.0]], h=[1.0])),
    "risk_W": (mm.risk_W, dict(X=X, Y=Y, v=v, W=I, queries=Z)),
    "risk_grad": (mm.risk_grad, dict(X=X, Y=Y, v=v, p=P, W=I)),
    "attention": (mm.attention, dict(X=X, p=P, W=I)),
    "check_selection": (mm.check_selection, dict(X=X, Y=Y, v=v, alpha=ALPHA, W=I)),
    "selection_census": (mm.selection_census, dict(X=X, Y=Y, v=v, W=I)),
    "trap_sets": (mm.trap_sets, dict(X=X, Y=Y, v=v, W=I)),
    "head_risk_grad": (mm.head_risk_grad, dict(X=X, Y=Y, head=HEAD, p=P, W=I, sets=SETS)),
    "optimal_sets": (mm.optimal_sets, dict(X=X, Y=Y, head=HEAD)),
    "set_offset": (mm.set_offset, dict(X=X, Y=Y, head=HEAD, sets=SETS)),
    "mlp_head": (mm.mlp_head, dict(a=[1.0], B=[[1.0, 0.0]], b=[0.0])),
    "softmax": (mm.softmax, dict(a=[1.0, 2.0])),
    "cosine": (mm.cosine, dict(a=[1.0, 2.0], b=[1.0, 2.0])),
    "random_instance": (mm.data.random_instance, dict(n=2, T=3, d=2, seed=0, margin=0.5, spread=1.0)),
    "fig1_moved": (mm.data.fig1_moved, dict(x3_score=0.0, x2=(1.0, 0.0))),
    "fig4": (mm.data.fig4, dict(C=1.0)),
    "mixing_example": (mm.data.mixing_example, dict(beta=2.0, a=(1.0, 0.6))),
}

# Real-valued settings of each function (grep of the signatures: lr, eps, eps_v, eps_p, reg,
# gtol, tol, angle, feasibility_tol, threshold, max_work, max_cost, margin, spread, ...).
SCALARS = [(f, a) for f, (fn, _) in CALLS.items() for a, prm in inspect.signature(fn).parameters.items()
           if prm.annotation in ("float", "float | None") or a in ("C", "beta", "x3_score")]
COUNTS = [(f, a) for f, (fn, _) in CALLS.items() for a, prm in inspect.signature(fn).parameters.items()
          if prm.annotation in ("int", "int | None") and a not in ("seed", "axis")]
ARRAYS = [(f, a) for f, (fn, kw) in CALLS.items() for a in kw
          if isinstance(kw[a], (np.ndarray, list, tuple))]
RAGGED = {1: [[1.0, 2.0], [3.0]], 2: [[[1.0, 2.0]], [[3.0]]], 3: [[[[1.0]], [[2.0, 3.0]]]]}


def _call(f, **change):
    fn, kw = CALLS[f]
    return fn(**{**kw, **change})


def test_every_valid_call_runs():
    """The base calls are valid, so each case below fails for its one replaced argument."""
    for f in CALLS:
        _call(f)


def test_the_tables_cover_the_settings_the_review_named():
    found = {a for _, a in SCALARS}
    assert {"lr", "eps", "eps_v", "eps_p", "reg", "gtol", "tol", "angle"} <= found
    assert {"steps", "max_iter", "starts"} <= {a for _, a in COUNTS}


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("f,a", SCALARS, ids=[f"{f}-{a}" for f, a in SCALARS])
def test_an_int_beyond_float64_as_a_setting_is_named(f, a, sign):
    with pytest.raises(ValueError, match=rf"^{a}: .*finite"):
        _call(f, **{a: sign * 10 ** 400})


@pytest.mark.parametrize("f,a", COUNTS, ids=[f"{f}-{a}" for f, a in COUNTS])
def test_an_int_beyond_int64_as_a_count_is_named(f, a):
    with pytest.raises(ValueError, match=rf"^{a}: ") as err:
        _call(f, **{a: 10 ** 400})
    assert len(str(err.value)) < 400  # the 401 digits are not printed


@pytest.mark.parametrize("f,a", ARRAYS, ids=[f"{f}-{a}" for f, a in ARRAYS])
def test_a_ragged_list_as_an_array_is_named(f, a):
    good = np.asarray(CALLS[f][1][a])
    ragged = RAGGED[min(max(good.ndim, 1), 3)]
    with pytest.raises(ValueError, match=rf"^{a}: expected a rectangular array"):
        _call(f, **{a: ragged})


@pytest.mark.parametrize("f,a", [(f, a) for f, a in ARRAYS if np.asarray(CALLS[f][1][a]).dtype == np.float64],
                         ids=[f"{f}-{a}" for f, a in ARRAYS if np.asarray(CALLS[f][1][a]).dtype == np.float64])
def test_an_int_beyond_float64_inside_an_array_is_named(f, a):
    good = np.asarray(CALLS[f][1][a]).astype(object)
    good.flat[0] = 10 ** 400
    with pytest.raises(ValueError, match=rf"^{a}: holds an integer beyond float64"):
        _call(f, **{a: good.tolist()})


def test_ints_inside_float64_still_work_as_settings():
    """Python ints and numpy scalars within range are accepted with their float value (the
    overflow check must not refuse a valid int): gd with lr=1 equals gd with lr=1.0. (A guard
    against an over-eager fix; it passes on the old code too.)"""
    a = mm.gd(X, Y, v, P, 3, 1, W=I)
    b = mm.gd(X, Y, v, P, 3, 1.0, W=I)
    assert np.array_equal(a.p, b.p)
    c = mm.gd(X, Y, v, P, 3, np.int64(1), W=I)
    assert np.array_equal(a.p, c.p)


# ----------------------------------------------------------------------------------------------
# Cause 5: a valid tol refused with a false claim. Bug caught: tol = 0.5 (or 0.45 on data of
# order 1) refused with an IllConditionedError naming X and blaming the scales of the data,
# where the tolerance itself admits constraints more than 1/2 from their right side.
# ----------------------------------------------------------------------------------------------

def _svms(third):
    """Each SVM on one sequence with tokens (1, 0), (0, 1), (-third, 0) selecting token 0 (or
    the v-SVM on the samples (1, 0), (s, 0)): by hand the answer is p = u = (1/2, -1/2)
    (v = (1, 0)), and the constraint values, free of cancellation so equal to their terms, are
    1 and s = (1 + third) / 2."""
    Xs = np.array([[[1.0, 0.0], [0.0, 1.0], [-third, 0.0]]])
    sets = np.array([[True, False, False]])
    return {
        "att_svm": (lambda tol: mm.att_svm(Xs, [0], tol=tol), (1 + third) / 2),
        "set_svm": (lambda tol: mm.set_svm(Xs, sets, tol=tol), (1 + third) / 2),
        "v_svm": (lambda tol: mm.v_svm([[1.0, 0.0], [(1 + third) / 2, 0.0]], [1.0, 1.0], tol=tol),
                  (1 + third) / 2),
        "w_svm": (lambda tol: mm.w_svm(Xs, [0], queries=[1.0, 0.0], tol=tol), (1 + third) / 2),
        "w_svm nuclear": (lambda tol: mm.w_svm(Xs, [0], queries=[1.0, 0.0], norm="nuclear", tol=tol),
                          (1 + third) / 2),
    }


SVM_NAMES = list(_svms(5.0))


def _support_by_hand(s, tol):
    """The support rule |value - 1| <= tol * max(1, terms) on values (1, s), terms (1, s)."""
    return [abs(1 - 1) <= tol, abs(s - 1) <= tol * max(1.0, s)]


@pytest.mark.parametrize("svm", SVM_NAMES)
def test_the_largest_accepted_tol_works_and_the_first_refused_names_tol(svm):
    call, s = _svms(5.0)[svm]          # the slack value s = 3: 2 > 1/2 from 1
    largest = np.nextafter(0.5, 0.0)
    res = call(largest)
    support = np.asarray(res.support).reshape(-1)[-2:]
    assert list(support) == _support_by_hand(s, largest) == [True, False]
    with pytest.raises(ValueError, match=r"^tol: must be below 0.5") as err:
        call(0.5)
    assert not isinstance(err.value, mm.IllConditionedError)


@pytest.mark.parametrize("svm", SVM_NAMES)
def test_a_tol_too_large_for_the_data_names_tol_and_the_largest_that_fits(svm):
    """third = 2.6: the slack constraint's value s = 1.8 is 0.8 from 1, within tol * s at the
    accepted tol = 0.45: the message names tol and the bound |s - 1| / s it must stay below; at
    0.5 / s the call works and gives the support by hand."""
    call, s = _svms(2.6)[svm]
    tol = 0.45
    assert abs(s - 1) > 0.5 and abs(s - 1) <= tol * s      # the premise, by hand
    with pytest.raises(ValueError, match=r"^tol: tol = 0.45 counts as support") as err:
        call(tol)
    assert not isinstance(err.value, mm.IllConditionedError)
    # the bound is the constraint's |s - 1| / s (tol must stay below it), 0.444 here
    bound = float(re.search(r"tol must be below ([0-9.e+-]+)", str(err.value)).group(1))
    assert bound == pytest.approx(abs(s - 1) / s, rel=1e-9)
    fits = 0.5 / s
    res = call(fits)
    assert list(np.asarray(res.support).reshape(-1)[-2:]) == _support_by_hand(s, fits) == [True, False]


def test_huge_scales_at_the_default_tol_still_blame_the_data():
    """The old refusal where it is right: terms beyond 1 / (2 tol) at the default tol (a slack
    constraint of value 1e9 + 1 in a sequence whose scale the default tol multiplies past 1/2)
    still raise the IllConditionedError naming X."""
    Xs = np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [-1e9, 0.0]]])
    try:
        res = mm.att_svm(Xs, [0, 0])
    except mm.IllConditionedError as exc:
        assert str(exc).startswith("X:")
    else:  # the slack constraint is far outside tol * its terms: not support, no refusal
        values = res.constraints
        assert not res.support[1, 1] and values[1, 1] - 1 > 1e-8 * abs(values[1, 1])


# ----------------------------------------------------------------------------------------------
# Cause 4: penalty_path returned a saddle. Bug caught: at a penalty where (K, Q) = 0 is a saddle
# (2 lam < sigma_max(G), G = dL/dW at W = 0), a path that reached 0 at a larger penalty (or
# started there) stayed at 0 (the gradient is exactly 0), and its stationarity could not tell.
# ----------------------------------------------------------------------------------------------

PX = np.array([[[1.0, 0.0], [0.0, 1.0]]])   # the docstring's instance: Y = 1, v = (1, 1/2),
PY, PV, PZ = np.array([1.0]), np.array([1.0, 0.5]), np.array([[1.0, 0.0]])   # query (1, 0)


def _np_objective(theta, lam, d, m):
    """F(K, Q) = mean_i log(1 + exp(-sum_t s_it gamma_it)) + lam (|K|^2 + |Q|^2) in numpy."""
    K, Q = theta[: d * m].reshape(d, m), theta[d * m:].reshape(d, m)
    logits = np.einsum("ntd,de,ne->nt", PX, K @ Q.T, PZ)
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    gamma = PY[:, None] * (PX @ PV)
    return float(np.mean(np.log1p(np.exp(-(s * gamma).sum(axis=1)))) + lam * (theta ** 2).sum())


def _sigma_at_zero():
    """sigma_max of G = dL/dW at W = 0, in closed form: uniform attention s = 1/T,
    G = mean_i l'(m_i) sum_t s (gamma_it - m_i) x_it z_i^T, l'(x) = -1 / (1 + e^x)."""
    gamma = PY[:, None] * (PX @ PV)
    m = gamma.mean(axis=1)
    slope = -1.0 / (1.0 + np.exp(m))
    G = np.einsum("n,nt,ntd,ne->de", slope, (gamma - m[:, None]) / PX.shape[1], PX, PZ) / len(PY)
    return float(np.linalg.svd(G, compute_uv=False)[0])


def _best_minimum(lam, d, m, starts=12):
    """The lowest F found by scipy's BFGS (finite-difference gradients) from seeded random
    starts, and its W = K Q^T."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    best = None
    for _ in range(starts):
        res = minimize(_np_objective, rng.standard_normal(2 * d * m), args=(lam, d, m), method="BFGS",
                       options=dict(gtol=1e-10))
        if best is None or res.fun < best.fun:
            best = res
    K, Q = best.x[: d * m].reshape(d, m), best.x[d * m:].reshape(d, m)
    return best.fun, K @ Q.T


@pytest.mark.parametrize("m", [1, 2])
@pytest.mark.parametrize("start", ["small", "zero"])
def test_penalty_path_leaves_the_saddle_at_zero(m, start):
    """Penalties 1e-1 (above the threshold sigma/2 = 0.028: W = 0 is the local minimizer) and
    1e-2 (below it: W = 0 is a saddle). The first answer is 0 with curvature 1 - sigma/(2 lam)
    (closed form), the second is the minimizer found by an own numpy/BFGS search from random
    starts, with a nonnegative curvature."""
    d = 2
    sigma = _sigma_at_zero()
    assert 1e-2 < sigma / 2 < 1e-1
    K0 = np.full((d, m), 0.1) if start == "small" else np.zeros((d, m))
    path = mm.penalty_path(PX, PY, PV, K0, K0.copy(), PZ[0], [1e-1, 1e-2])
    assert np.abs(path.W[0]).max() < 1e-6
    np.testing.assert_allclose(path.curvature[0], 1 - sigma / (2 * 1e-1), rtol=1e-6)
    F_best, W_best = _best_minimum(1e-2, d, m)
    F_path = _np_objective(np.concatenate([path.K[1].ravel(), path.Q[1].ravel()]), 1e-2, d, m)
    assert F_path <= F_best + 1e-9
    np.testing.assert_allclose(path.W[1], W_best, atol=1e-4)
    assert F_best < _np_objective(np.zeros(2 * d * m), 1e-2, d, m) - 1e-3   # 0 is not the answer
    assert path.curvature[1] > -1e-6 and path.stationarity[1] < 1e-6


@pytest.mark.parametrize("factor,zero", [(1.05, True), (0.95, False)])
def test_the_zero_answer_follows_the_closed_form_threshold(factor, zero):
    """lam = factor * sigma / 2 from K0 = Q0 = 0: above the threshold the answer is W = 0 with
    curvature 1 - 1/factor > 0; below it W != 0 and F is lower than F(0)."""
    lam = factor * _sigma_at_zero() / 2
    path = mm.penalty_path(PX, PY, PV, np.zeros((2, 1)), np.zeros((2, 1)), PZ[0], [lam])
    if zero:
        assert np.abs(path.W[0]).max() == 0
        np.testing.assert_allclose(path.curvature[0], 1 - 1 / factor, rtol=1e-6)
    else:
        theta = np.concatenate([path.K[0].ravel(), path.Q[0].ravel()])
        assert _np_objective(theta, lam, 2, 1) < _np_objective(np.zeros(4), lam, 2, 1)
        assert np.abs(path.W[0]).max() > 1e-3 and path.curvature[0] > -1e-6


def test_the_lanczos_curvature_agrees_with_the_closed_form(monkeypatch):
    """Beyond DENSE_HESSIAN parameters the lowest eigenvalue comes from eigsh on Hessian-vector
    products: forced here on the small instance, the curvature at W = 0 is again
    1 - sigma / (2 lam) and the saddle at 1e-2 is left for the minimizer."""
    from maxmargin import keyquery

    monkeypatch.setattr(keyquery, "DENSE_HESSIAN", 0)
    sigma = _sigma_at_zero()
    path = mm.penalty_path(PX, PY, PV, np.zeros((2, 2)), np.zeros((2, 2)), PZ[0], [1e-1, 1e-2])
    np.testing.assert_allclose(path.curvature[0], 1 - sigma / (2 * 1e-1), rtol=1e-6)
    F_best, W_best = _best_minimum(1e-2, 2, 2)
    np.testing.assert_allclose(path.W[1], W_best, atol=1e-4)
