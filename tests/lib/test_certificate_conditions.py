"""Each condition of each certificate the library computes, failed alone (issue 38).

The certificates (condition: measure, tolerance):

* least distance, ``_least_distance.certificate`` (CERTIFICATE_TOL = 1e-9, judged in ``solve``):
  primal feasibility -min_j (g_j q - h_j) / (|g_j| |q| + |h_j|); dual feasibility
  -min mu / max |mu|; complementary slackness max |slack_j| over mu_j > 0; stationarity
  ||q - G^T mu|| / (||q|| + || |G|^T |mu| ||). Returns the largest (it names none).
* other norms, ``normsvm.kkt`` / ``normsvm.certify`` (NORM_TOL = 1e-6, ``_kkt_verdict``):
  primal feasibility, dual feasibility, complementary slackness (sum mu |slack| / sum mu),
  dual norm N*(Lambda) - 1, alignment |N(x) - <Lambda, x>| / N(x), duality gap
  |N(x) - sum mu b| / N(x).
* nuclear norm, ``_nuclear._nuclear_kkt`` / ``_nuclear_certify`` (NUCLEAR_TOL = 1e-6): the same
  six with the spectral norm as the dual norm and every right side 1.
* the verdict ``_svmsolve._kkt_verdict``: fails when any violation exceeds tol (NaN fails),
  naming the worst.
* the forward check ``_forward._check_values`` (FORWARD_TOL = 1e-6): value - (terms + 2) eps
  scale >= target - FORWARD_TOL, else the value in exact rational arithmetic must reach
  target - FORWARD_TOL; ``_check_equalities``: |D p| <= FORWARD_TOL + 2 (d + 2) eps |D| |p|.
* the guards of the Clarabel solves: ``normsvm.solve`` without multipliers, and ``_clarabel``
  (solver="cvxpy") with a status other than optimal.

Every input here is an exact optimum written by hand (a program of one or two variables whose
solution and multipliers are read off), then one condition is perturbed while every other
stays within its tolerance (at most 0.9 of it): the verdict must fail and name that condition,
and the unperturbed input (the optimum's multipliers, with the same rows: a row may be short by
0.9 of the tolerance) must pass. The certificates are private helpers, called directly:
no public call reaches a single condition alone (the solvers return only certified points).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import maxmargin as mm
from maxmargin import _least_distance as _ldp
from maxmargin import _nuclear, _svmsolve, normsvm
from maxmargin._forward import (FORWARD_TOL, _check_equalities, _check_values, _differences,
                                _exact_dot, _others, _values)

T6 = 1e-6  # NORM_TOL and NUCLEAR_TOL, restated (not read: the tests below pin them by behaviour)


# ----------------------------------------------------------------------------------------------
# least distance: min ||q|| s.t. G q >= h; with the row (1, 0) >= 1 alone q = (1, 0) = G^T mu,
# mu = 1 (the nearest point of the half-plane q_1 >= 1)
# ----------------------------------------------------------------------------------------------

Q = np.array([1.0, 0.0])


def ldp_cases():
    """name -> (G, h, mu unperturbed, mu or h perturbed, expected violation)."""
    G1, h1 = np.array([[1.0, 0.0]]), np.array([1.0])
    cases = {}
    # primal: a second row q_1 >= 1 + 2e-8, without multiplier: slack -2e-8 / (2 + 2e-8)
    G = np.vstack([G1, [1.0, 0.0]])
    cases["primal feasibility"] = (G, np.array([1.0, 1.0]), np.array([1.0, 0.0]),
                                   dict(h=np.array([1.0, 1.0 + 2e-8])), 2e-8 / (2 + 2e-8))
    # dual: two copies of the tight row q_2 >= 0 with multipliers -1/2 and +1/2 (G^T mu unchanged)
    G = np.vstack([G1, [0.0, 1.0], [0.0, 1.0]])
    cases["dual feasibility"] = (G, np.array([1.0, 0.0, 0.0]), np.array([1.0, 0.0, 0.0]),
                                 dict(mu=np.array([1.0, -0.5, 0.5])), 0.5)
    # complementary slackness: the inactive row q_1 >= 1/2 (slack 1/3) gets mu = 1/4, the tight
    # one 3/4: G^T mu is still q
    G = np.vstack([G1, [1.0, 0.0]])
    cases["complementary slackness"] = (G, np.array([1.0, 0.5]), np.array([1.0, 0.0]),
                                        dict(mu=np.array([0.75, 0.25])), 1 / 3)
    # stationarity: mu = 1 + 1e-8, so q - G^T mu = (-1e-8, 0), relative to ||q|| + |G|^T mu
    cases["stationarity"] = (G1, h1, np.array([1.0]), dict(mu=np.array([1.0 + 1e-8])),
                             1e-8 / (2 + 1e-8))
    return cases


@pytest.mark.parametrize("condition", list(ldp_cases()))
def test_least_distance_certificate_fails_one_condition_alone(condition):
    """``_least_distance.certificate`` returns only the largest violation, so the condition is
    identified by its value, computed here by hand (it is above CERTIFICATE_TOL = 1e-9 and every
    other condition is exactly 0). Bugs caught: a condition not checked (the value would be 0),
    its inequality flipped, its scale changed (absolute, or another norm)."""
    G, h, mu, perturbed, expected = ldp_cases()[condition]
    assert _ldp.certificate(G, h, Q, mu) == 0.0  # the exact optimum passes
    got = _ldp.certificate(G, perturbed.get("h", h), Q, perturbed.get("mu", mu))
    assert got > 1e-9  # CERTIFICATE_TOL: a failed certificate
    assert got == pytest.approx(expected, rel=1e-6)


def test_least_distance_certificate_refuses_non_finite_points():
    """Bug caught: a NaN multiplier (every comparison False) read as no violation."""
    G, h = np.array([[1.0, 0.0]]), np.array([1.0])
    assert _ldp.certificate(G, h, Q, np.array([np.nan])) == np.inf
    assert _ldp.certificate(G, h, np.array([1.0, np.nan]), np.array([1.0])) == np.inf


def test_least_distance_certificate_refuses_multipliers_whose_sum_overflows():
    """mu = (1e308, 1e308) on two copies of the tight row: G^T mu = (inf, 0), far from q.
    Bug caught (found here, fixed): the stationarity ratio was inf / inf = NaN, which ``max``
    skipped, so the certificate returned 0 (a pass) for these multipliers."""
    G, h = np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([1.0, 1.0])
    assert _ldp.certificate(G, h, Q, np.array([0.5, 0.5])) == 0.0
    assert _ldp.certificate(G, h, Q, np.array([1e308, 1e308])) == np.inf


@pytest.mark.parametrize("violation, passes", [(1e-8, False), (1e-10, True)])
def test_least_distance_solve_judges_the_certificate_at_1e_9(violation, passes, monkeypatch):
    """The verdict on the certificate's number, through the public ``mm.least_distance``: the
    certificate is replaced by a constant, so that only the comparison with CERTIFICATE_TOL
    decides. Bugs caught: the final check removed, its inequality flipped, the tolerance off by
    1e3 (1e-6 would accept 1e-8)."""
    monkeypatch.setattr(_ldp, "certificate", lambda *args, **kwargs: violation)
    if passes:
        np.testing.assert_allclose(mm.least_distance([[1.0, 1.0]], [2.0]), [1.0, 1.0])
    else:
        with pytest.raises(mm.IllConditionedError,
                           match=r"^G, h: the problem is ill-conditioned: no point passes the "
                                 r"KKT certificate to relative tolerance 1e-09 \(best violation "
                                 r"1\.0e-08\)"):
            mm.least_distance([[1.0, 1.0]], [2.0])


# ----------------------------------------------------------------------------------------------
# other norms: min ||x||_1 s.t. x_1 >= 1 in R^2 has the optimum x = (1, 0), mu = 1,
# Lambda = (1, 0) (||Lambda||_inf = 1, <Lambda, x> = 1 = sum mu b)
# ----------------------------------------------------------------------------------------------

X1 = np.array([1.0, 0.0])
L1 = normsvm.parse("l1", "att")
A_BIG = 1e3  # a row of terms 1e3: its slack is relative to 1e3 (primal, complementary slackness)


def norm_cases():
    """condition -> (rows, b, mu unperturbed, perturbed (rows, b, mu))."""
    e1, e2 = [1.0, 0.0], [0.0, 1.0]
    cases = {}
    # primal: a row x_2 >= 1e-5 without multiplier, missed by 1e-5 (scale |a| |x| + 1 = 1)
    rows = np.array([e1, e2])
    cases["primal feasibility"] = (rows, np.array([1.0, 0.0]), np.array([1.0, 0.0]),
                                   (rows, np.array([1.0, 1e-5]), np.array([1.0, 0.0])))
    # dual feasibility: a copy of the tight row with multiplier -1/2 (mu is clipped at 0 in
    # every other condition)
    rows = np.array([e1, e1])
    cases["dual feasibility"] = (rows, np.array([1.0, 1.0]), np.array([1.0, 0.0]),
                                 (rows, np.array([1.0, 1.0]), np.array([1.0, -0.5])))
    # complementary slackness: x_1 delta >= 0 (slack delta / (1 + delta), scale 1) gets
    # mu = 1.8e-6 / delta and the tight row 1 - 0.9e-6: Lambda_1 = 1 + 0.9e-6, so the dual
    # norm, the alignment and the gap are 0.9e-6 each, and sum mu |slack| / sum mu = 1.8e-6
    delta = 1e-3
    rows = np.array([e1, [delta, 0.0]])
    cases["complementary slackness"] = (
        rows, np.array([1.0, 0.0]), np.array([1.0, 0.0]),
        (rows, np.array([1.0, 0.0]), np.array([1.0 - 0.9 * T6, 1.8 * T6 / delta])))
    # dual norm: the tight row x_2 >= 0 with multiplier 2: Lambda = (1, 2), ||Lambda||_inf = 2,
    # while <Lambda, x> = 1 and sum mu b = 1
    rows = np.array([e1, e2])
    cases["dual norm"] = (rows, np.array([1.0, 0.0]), np.array([1.0, 0.0]),
                          (rows, np.array([1.0, 0.0]), np.array([1.0, 2.0])))
    # alignment: a row 1e3 x_1 >= 1e3 + sigma missed by sigma = 0.9e-6 (1e3 + 1) (primal 0.9e-6
    # relative to its terms) with mu = 0.9e-3; the tight row's multiplier 0.1 - alpha leaves
    # Lambda_1 = 1 - alpha and sum mu b = 1 - alpha + mu sigma: with alpha = 2 mu sigma the
    # alignment is 1.62e-6 and the gap 0.81e-6
    sigma, m = 0.9 * T6 * (A_BIG + 1), 0.9 / A_BIG
    alpha = 2 * m * sigma
    rows = np.array([e1, [A_BIG, 0.0]])
    b = np.array([1.0, A_BIG + sigma])
    cases["alignment"] = (rows, b, np.array([1.0, 0.0]),
                          (rows, b, np.array([1.0 - alpha - m * A_BIG, m])))
    # duality gap: x_1 delta >= 0 with delta = 1.8e-6 and mu = 1, the tight row 1 - 1.8e-6:
    # Lambda = (1, 0) exactly aligned, but sum mu b = 1 - 1.8e-6; complementary slackness
    # 1.8e-6 / 2 (its multipliers sum to 2)
    delta = 1.8 * T6
    rows = np.array([e1, [delta, 0.0]])
    cases["duality gap"] = (rows, np.array([1.0, 0.0]), np.array([1.0, 0.0]),
                            (rows, np.array([1.0, 0.0]), np.array([1.0 - delta, 1.0])))
    # the gap the other way, sum mu b above N(x): a copy of x_1 >= 1 asking 1 + sigma (missed
    # by sigma = 1.8e-6, primal 0.9e-6 relative to its scale 2) takes mu = 0.9 from the tight
    # row: Lambda = (1, 0), but sum mu b = 1 + 0.9 sigma
    sigma = 1.8 * T6
    rows = np.array([e1, e1])
    b = np.array([1.0, 1.0 + sigma])
    cases["duality gap, sum mu b above N(x)"] = (rows, b, np.array([1.0, 0.0]),
                                                 (rows, b, np.array([0.1, 0.9])))
    return cases


@pytest.mark.parametrize("condition", list(norm_cases()))
def test_norm_certificate_fails_one_condition_alone(condition):
    """``normsvm.kkt`` / ``certify`` (the l1 ATT-SVM's certificate): the perturbed input fails
    that condition only, by 1.6 NORM_TOL or more, every other at most 0.9 NORM_TOL; the message
    names it. Bugs caught: a condition not checked, its inequality flipped or its scale
    changed, its tolerance off by 1e3, the verdict naming another condition."""
    rows, b, mu, (rows2, b2, mu2) = norm_cases()[condition]
    condition = condition.split(",")[0]
    assert max(normsvm.kkt(rows, b, X1, mu, L1).values()) <= 0.91 * T6
    normsvm.certify(rows, b, X1, mu, L1)  # the optimum (with its rows) passes
    violations = normsvm.kkt(rows2, b2, X1, mu2, L1)
    others = {k: v for k, v in violations.items() if k != condition}
    assert violations[condition] >= 1.6 * T6 and max(others.values()) <= 0.91 * T6, violations
    with pytest.raises(mm.IllConditionedError,
                       match=rf"^X: the l1 SVM fails its KKT certificate: {condition} violated "
                             rf"by .*\(relative tolerance 1e-06"):
        normsvm.certify(rows2, b2, X1, mu2, L1)


def test_norm_certificate_passes_just_below_its_tolerance():
    """Every condition at 0.9e-6 at once (the complementary slackness case of the l1 SVM scaled
    to 0.9e-6) passes: the tolerance is 1e-6, not 1e-9. Bug caught: NORM_TOL off by 1e3
    downwards (the certified answers would then be refused on ordinary data)."""
    delta = 1e-3
    rows = np.array([[1.0, 0.0], [delta, 0.0]])
    mu = np.array([1.0 - 0.45 * T6, 0.9 * T6 / delta])
    violations = normsvm.kkt(rows, np.array([1.0, 0.0]), X1, mu, L1)
    assert 0.8 * T6 < max(violations.values()) < T6
    normsvm.certify(rows, np.array([1.0, 0.0]), X1, mu, L1)


def test_norm_certificate_refuses_non_finite_points():
    """Bug caught: a NaN in x or mu read as no violation (NaN compares False)."""
    rows, b = np.array([[1.0, 0.0]]), np.array([1.0])
    for x, mu in ((np.array([np.nan, 0.0]), np.array([1.0])), (X1, np.array([np.nan]))):
        with pytest.raises(mm.IllConditionedError, match="primal feasibility violated by inf"):
            normsvm.certify(rows, b, x, mu, L1)


# ----------------------------------------------------------------------------------------------
# nuclear norm: min ||W||_* s.t. d_j^T W z_j >= 1; with the row d = z = e_1 alone (W_11 >= 1)
# W = diag(1, 0), mu = 1, Lambda = e_1 e_1^T (||Lambda||_2 = 1, <Lambda, W> = 1 = sum mu)
# ----------------------------------------------------------------------------------------------

W1 = np.diag([1.0, 0.0])


def nuclear_cases():
    """condition -> (rows_D, rows_Z, mu unperturbed, mu perturbed); row j's value is
    d_j^T W z_j = d_j1 z_j1 (only W_11 is nonzero), its scale |d_j1 z_j1| + 1."""
    def rows(*values_and_d):  # rows d = (v, 0) or the given d, z = e_1 unless given
        D = np.array([d if isinstance(d, tuple) else (d, 0.0) for d in values_and_d])
        return D
    e1 = np.array([1.0, 0.0])
    cases = {}
    # primal: a second row of value 1 - 1e-5 (slack -1e-5 / 2), without multiplier
    D = rows(1.0, 1.0 - 1e-5)
    cases["primal feasibility"] = (rows(1.0, 1.0), rows(1.0, 1.0), np.array([1.0, 0.0]),
                                   (D, rows(1.0, 1.0), np.array([1.0, 0.0])))
    # dual feasibility: a copy of the tight row with multiplier -1/2
    cases["dual feasibility"] = (rows(1.0, 1.0), rows(1.0, 1.0), np.array([1.0, 0.0]),
                                 (rows(1.0, 1.0), rows(1.0, 1.0), np.array([1.0, -0.5])))
    # complementary slackness: rows of value 1 + sigma2 (mu 0.1) and 1 - sigma3 (mu 0.9, primal
    # slack -0.9e-6) balance, mu2 sigma2 = mu3 sigma3: Lambda = e_1 e_1^T, sum mu = 1 exactly
    # aligned, and sum mu |slack| = 0.81e-6 + 0.81e-6
    s3 = 1.8 * T6
    s2 = 0.9 * s3 / 0.1
    D = rows(1.0, 1.0 + s2, 1.0 - s3)
    cases["complementary slackness"] = (D, rows(1.0, 1.0, 1.0), np.array([1.0, 0.0, 0.0]),
                                        (D, rows(1.0, 1.0, 1.0), np.array([0.0, 0.1, 0.9])))
    # spectral norm: the tight row d = z = (1, 1) (value 1) with half the weight:
    # Lambda = [[1, 1/2], [1/2, 1/2]], ||Lambda||_2 = 1.309, <Lambda, W> = 1 = sum mu
    D = np.array([e1, [1.0, 1.0]])
    cases["spectral norm"] = (D, D, np.array([1.0, 0.0]), (D, D, np.array([0.5, 0.5])))
    # alignment: a row of value 1 - sigma (primal slack -0.9e-6) with mu = 0.9 and the tight
    # row 1 - a - 0.9 (1 - sigma), a = 0.9 sigma: Lambda_11 = 1 - a (alignment 1.62e-6),
    # sum mu = 1 (no gap), sum mu |slack| = 0.81e-6
    m = 0.9
    D = rows(1.0, 1.0 - s3)
    a = m * s3
    cases["alignment"] = (D, rows(1.0, 1.0), np.array([1.0, 0.0]),
                          (D, rows(1.0, 1.0), np.array([1.0 - a - m * (1.0 - s3), m])))
    # duality gap: the same rows with Lambda_11 = 1 exactly aligned: sum mu = 1 + 0.9 sigma
    cases["duality gap"] = (D, rows(1.0, 1.0), np.array([1.0, 0.0]),
                            (D, rows(1.0, 1.0), np.array([1.0 - m * (1.0 - s3), m])))
    # the gap the other way, sum mu below ||W||_*: a row of value 1 + sigma (slack sigma / 2)
    # with mu = 0.9 and Lambda_11 = 1: sum mu = 1 - 0.9 sigma
    sigma = 2.0 * T6
    D = rows(1.0, 1.0 + sigma)
    cases["duality gap, sum mu below the norm"] = (
        D, rows(1.0, 1.0), np.array([1.0, 0.0]),
        (D, rows(1.0, 1.0), np.array([1.0 - m * (1.0 + sigma), m])))
    return cases


@pytest.mark.parametrize("condition", list(nuclear_cases()))
def test_nuclear_certificate_fails_one_condition_alone(condition):
    """``_nuclear._nuclear_kkt`` / ``_nuclear_certify``: the perturbed input fails that
    condition only, by 1.6 NUCLEAR_TOL or more, every other at most 0.9 NUCLEAR_TOL; the message
    names it. Bugs caught: a condition not checked, its inequality flipped or its scale
    changed, its tolerance off by 1e3, the verdict naming another condition."""
    D, Z, mu, (D2, Z2, mu2) = nuclear_cases()[condition]
    condition = condition.split(",")[0]
    assert max(_nuclear._nuclear_kkt(D, Z, W1, mu).values()) <= 0.91 * T6
    _nuclear._nuclear_certify(D, Z, W1, mu)  # the optimum (with its rows) passes
    violations = _nuclear._nuclear_kkt(D2, Z2, W1, mu2)
    others = {k: v for k, v in violations.items() if k != condition}
    assert violations[condition] >= 1.6 * T6 and max(others.values()) <= 0.91 * T6, violations
    with pytest.raises(mm.IllConditionedError,
                       match=rf"^X: the nuclear-norm W-SVM fails its KKT certificate: "
                             rf"{condition} violated by .*\(relative tolerance 1e-06"):
        _nuclear._nuclear_certify(D2, Z2, W1, mu2)


def test_nuclear_certificate_passes_just_below_its_tolerance():
    """The alignment case scaled to 0.5 (alignment 0.81e-6, primal 0.45e-6) passes: the
    tolerance is 1e-6. Bug caught: NUCLEAR_TOL off by 1e3 downwards."""
    s, m = 0.9 * T6, 0.9
    D, Z = np.array([[1.0, 0.0], [1.0 - s, 0.0]]), np.array([[1.0, 0.0], [1.0, 0.0]])
    mu = np.array([1.0 - m * s - m * (1.0 - s), m])
    assert 0.8 * T6 < max(_nuclear._nuclear_kkt(D, Z, W1, mu).values()) < T6
    _nuclear._nuclear_certify(D, Z, W1, mu)


# ----------------------------------------------------------------------------------------------
# the verdict
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["nan last", "nan first"])
def test_verdict_fails_a_nan_violation_wherever_it_is(order):
    """``_kkt_verdict`` promises "NaN fails". Bug caught (found here, fixed): the worst
    condition was picked by ``max``, which skips a NaN after the first key (NaN > x is False),
    so {"primal feasibility": 0, "alignment": nan} passed."""
    violations = {"primal feasibility": 0.0, "alignment": math.nan}
    if order == "nan first":
        violations = dict(reversed(list(violations.items())))
    with pytest.raises(mm.IllConditionedError, match=r"^X: the test program fails its KKT "
                                                     r"certificate: alignment violated by nan"):
        _svmsolve._kkt_verdict(violations, 1e-6, "X", "test program")


def test_verdict_names_the_worst_and_accepts_the_tolerance_itself():
    """Bugs caught: the first failing condition named instead of the worst, ``<`` for ``<=``."""
    _svmsolve._kkt_verdict({"a": 1e-6, "b": 0.0}, 1e-6, "X", "p")
    with pytest.raises(mm.IllConditionedError, match=r"^R: the p fails its KKT certificate: "
                                                     r"b violated by 3\.0e-06 \(relative "
                                                     r"tolerance 1e-06; the violations: a "
                                                     r"2\.0e-06, b 3\.0e-06\)$"):
        _svmsolve._kkt_verdict({"a": 2e-6, "b": 3e-6}, 1e-6, "R", "p")


# ----------------------------------------------------------------------------------------------
# the forward check
# ----------------------------------------------------------------------------------------------

# One sequence of two tokens, token 0 selected: the constraint (x_0 - x_1)^T p >= 1. With
# x_0 = (-A, A, 1), x_1 = 0 and p = (1, 1 + 2^-52, c), A = 3 * 2^58, the exact value is
# -A + A (1 + 2^-52) + c = 192 + c, but A (1 + 2^-52) rounds to A + 256 in float64, so the float
# value is 256 + c: the terms reach 2A = 1.7e18 and float64 knows the value only to about 2000.
A_FWD = 3.0 * 2.0**58
K_FWD = np.array([[[-A_FWD, A_FWD, 1.0], [0.0, 0.0, 0.0]]])
ALPHA = np.array([0])


def forward(c: float, refine: bool = False):
    """``_check_values`` as ATT-SVM calls it, on the instance above with p = (1, 1 + 2^-52, c)."""
    p = np.array([1.0, 1.0 + 2.0**-52, c])
    D = _differences(K_FWD, ALPHA)
    others = _others(ALPHA, 2)
    values = _values(D, p, others)
    exact = Fraction(0) + sum(Fraction(float(k)) * Fraction(float(q)) for k, q in zip(K_FWD[0, 0], p))
    assert float(values[0, 1]) == 256.0 + c and exact == 192 + Fraction(c)  # the setting holds
    return _check_values(values, 1.0, np.abs(D) @ np.abs(p), 3 + 1, others, "X",
                         lambda i, t: _exact_dot(K_FWD[i, ALPHA[i]], p) - _exact_dot(K_FWD[i, t], p),
                         refine)


def test_forward_check_refuses_a_point_that_selects_the_other_token_exactly():
    """c = -192.5: the float value is 63.5 (the constraint looks met with room to spare), the
    exact value -1/2: token 1 scores above the selected token 0. The check must refuse it,
    naming the sequence and the token; c = -191 (exact value 1, float value 65) passes, with the
    exact value returned. Bugs caught: the rounding bound dropped (the float value trusted),
    the exact violation test removed or flipped, the float value returned for an exactly
    evaluated constraint."""
    values = forward(-191.0)
    assert values[0, 1] == 1.0
    with pytest.raises(mm.IllConditionedError,
                       match=r"^X: the solution violates the constraint of sequence 0, token 1 "
                             r"by 1\.5e\+00 \(exactly; above FORWARD_TOL"):
        forward(-192.5)


def test_forward_check_tolerance_is_1e_6():
    """Exact values 1 - 2^-13 (short by 1.2e-4) fail and 1 - 2^-24 (short by 6e-8) pass, both
    undecided in float64. Bugs caught: FORWARD_TOL off by 1e3 either way, or compared in
    float64 after the exact evaluation (1 - 2^-24 is exact here)."""
    with pytest.raises(mm.IllConditionedError, match=r"by 1\.2e-04 \(exactly"):
        forward(-191.0 - 2.0**-13)
    assert forward(-191.0 - 2.0**-24)[0, 1] == 1.0 - 2.0**-24


def test_forward_check_with_refine_asks_for_the_shortfall_plus_twice_the_rounding():
    """With ``refine`` the violation becomes ``_Short`` with the raise of the right side:
    the exact shortfall 3/2 plus twice the rounding bound (3 + 1 + 2) eps 2A (the re-solve
    then clears it). Bug caught: the error raised at once (no re-solve), or the raise without
    the rounding margin."""
    from maxmargin._forward import _Short

    with pytest.raises(_Short) as caught:
        forward(-192.5, refine=True)
    bound = 6 * np.finfo(np.float64).eps * (2 * A_FWD + 1.0 + 192.5)
    assert caught.value.need[0, 1] == pytest.approx(1.5 + 2 * bound, rel=1e-12)
    assert caught.value.need[0, 0] == 0.0


@pytest.mark.parametrize("miss, passes", [(2e-6, False), (0.5e-6, True)])
def test_forward_equalities_refuse_a_miss_above_1e_6(miss, passes):
    """``_check_equalities`` (the set-SVM's equal scores): D = (1, 0), p = (miss, 0), so |D p| is
    exactly ``miss`` and the rounding bound 4 eps miss is negligible. Bugs caught: the check
    removed, the tolerance made 1e-9 or 1e-3, the inequality flipped."""
    D = np.array([[[0.0, 0.0], [1.0, 0.0]]])
    equal = np.array([[False, True]])
    p = np.array([miss, 0.0])
    if passes:
        _check_equalities(D, p, equal, "X")
    else:
        with pytest.raises(mm.IllConditionedError, match=r"^X: the solution gives token 1 of "
                                                         r"sequence 0 a score 2\.0e-06 away"):
            _check_equalities(D, p, equal, "X")


# ----------------------------------------------------------------------------------------------
# guards of the solvers (test_certified_solve.py covers _clarabel_certified)
# ----------------------------------------------------------------------------------------------

cp = pytest.importorskip("cvxpy")
REAL_SOLVE = cp.Problem.solve
X_SMALL = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])


def test_other_norms_refuse_an_optimum_without_multipliers(solves_without_multipliers):
    """``normsvm.solve``: Clarabel's optimum without dual values. Bug caught: the guard
    removed (np.asarray(None, float) is NaN: the answer would be refused as a failed KKT
    certificate, blaming the data's conditioning instead of the solver)."""
    with pytest.raises(mm.IllConditionedError,
                       match=r"^X: cvxpy/Clarabel returns no multipliers for the l1 SVM$"):
        mm.att_svm(X_SMALL, [0], norm="l1")


@pytest.mark.parametrize("call", ["att_svm", "v_svm", "w_svm"])
def test_solver_cvxpy_without_multipliers_blames_the_solver(call, monkeypatch):
    """``solver="cvxpy"`` (``_svmsolve._solve_cvxpy``): an optimum without dual values is a
    RuntimeError naming the data and saying what Clarabel failed to give. Bug caught (found
    here, fixed): the missing multipliers were reported as multipliers leaving float64 at the
    data's scale ("rescale the data"), wrong for unit-scale data; the W-SVM returned its W."""
    def without_duals(self, *args, **kwargs):
        REAL_SOLVE(self, *args, **kwargs)
        for constraint in self.constraints:
            for dual in constraint.dual_variables:
                dual.value = None

    calls = {"att_svm": (lambda: mm.att_svm(X_SMALL, [0], solver="cvxpy"), "X"),
             "v_svm": (lambda: mm.v_svm(np.array([[1.0, 1.0], [1.0, -1.0]]), [1.0, -1.0],
                                        solver="cvxpy"), "R"),
             "w_svm": (lambda: mm.w_svm(X_SMALL, [0], queries=[1.0, 0.0], solver="cvxpy"), "X")}
    function, name = calls[call]
    monkeypatch.setattr(cp.Problem, "solve", without_duals)
    with pytest.raises(RuntimeError, match=rf"^{name}: cvxpy/Clarabel returns no multipliers "
                                           r"\(status 'optimal'\)$"):
        function()


@pytest.mark.parametrize("status", ["unbounded", "solver_error", "user_limit"])
def test_solver_cvxpy_refuses_a_status_other_than_optimal(status, monkeypatch):
    """``solver="cvxpy"`` (``_svmsolve._clarabel``, not certified by KKT): a status other than
    (inaccurately) optimal or infeasible is a RuntimeError naming X and the status. Bug caught:
    the status not read, and the variable's value (stale or None) returned as the solution."""
    def ending(self, *args, **kwargs):
        REAL_SOLVE(self, *args, **kwargs)
        self._status = status

    monkeypatch.setattr(cp.Problem, "solve", ending)
    with pytest.raises(RuntimeError, match=rf"^X: cvxpy/Clarabel failed with status '{status}'$"):
        mm.att_svm(X_SMALL, [0], solver="cvxpy")


def test_solver_cvxpy_infeasible_on_a_feasible_problem_is_a_runtime_error(monkeypatch):
    """An "infeasible" status on a problem the fast solver proves feasible: RuntimeError naming
    X (the solvers disagree), not a ValueError blaming the selection. Bug caught: the status
    "infeasible" read as optimal (a stale point returned), or as a proof."""
    def ending(self, *args, **kwargs):
        REAL_SOLVE(self, *args, **kwargs)
        self._status = cp.INFEASIBLE

    monkeypatch.setattr(cp.Problem, "solve", ending)
    with pytest.raises(RuntimeError, match=r"^X: cvxpy/Clarabel reports the problem infeasible, "
                                           r"but the fast solver finds a feasible point"):
        mm.att_svm(X_SMALL, [0], solver="cvxpy")


# ----------------------------------------------------------------------------------------------
# the regularization path's KKT residual: min f(q) s.t. ||q|| <= R (and q in a cone), KKT
# -grad f = lambda q / ||q|| + nu (cos q / ||q|| - axis) with lambda, nu >= 0 on active constraints
# ----------------------------------------------------------------------------------------------


def path_kkt(q, g, R=1.0, axis=None, cos_angle=None):
    from maxmargin import paths

    return paths._kkt(np.asarray(q, float), np.asarray(g, float), R,
                      None if axis is None else np.asarray(axis, float), cos_angle)


def test_path_kkt_on_the_ball():
    """``paths._kkt`` at q = (1, 0) on the ball of radius 1: g = (-2, 0) is stationary with
    lambda = 2 (residual 0); each condition failed alone: stationarity (a tangential 0.1 left
    over), the multiplier's sign (g = (2, 0) would need lambda = -2: residual |g| = 2), the
    ball's activity (||q|| = 1 - 2e-9 is inside at tol 1e-9: residual |g|; 1 - 0.5e-9 is on
    it). Bugs caught: -g and g confused, lambda not kept >= 0, the tangential part dropped, the
    activity tolerance off by 1e3."""
    residual, rel, lam, on_ball, on_cone = path_kkt([1.0, 0.0], [-2.0, 0.0])
    assert (residual, lam, on_ball, on_cone) == (0.0, 2.0, True, False)
    residual, rel, lam, *_ = path_kkt([1.0, 0.0], [-2.0, 0.1])
    assert residual == pytest.approx(0.1, rel=1e-12) and lam == pytest.approx(2.0, rel=1e-12)
    assert rel == pytest.approx(0.1 / math.hypot(2.0, 0.1), rel=1e-12)
    residual, rel, lam, on_ball, _ = path_kkt([1.0, 0.0], [2.0, 0.0])
    assert (residual, rel, lam, on_ball) == (2.0, 1.0, 0.0, True)
    residual, _, lam, on_ball, _ = path_kkt([1.0 - 2e-9, 0.0], [-2.0, 0.0])
    assert (residual, lam, on_ball) == (2.0, 0.0, False)
    residual, _, lam, on_ball, _ = path_kkt([1.0 - 0.5e-9, 0.0], [-2.0, 0.0])
    assert on_ball and residual < 1e-15 and lam == pytest.approx(2.0)


def test_path_kkt_on_the_cone():
    """q = (1, 1) / 2 inside the ball of radius 1, on the cone of axis (1, 0) and angle 45
    degrees (q . axis = cos ||q||); its normal is cos q / ||q|| - axis = (-1/2, 1/2). g = (1, -1)
    is stationary (nu = 2); g = (-1, 1) needs nu < 0 (residual |g|); a q strictly inside the
    cone is not on it (residual |g|). Bugs caught: the cone's normal with the wrong sign, the
    cone never or always active."""
    c = 1 / math.sqrt(2.0)
    q = [0.5, 0.5]
    residual, _, lam, on_ball, on_cone = path_kkt(q, [1.0, -1.0], axis=[1.0, 0.0], cos_angle=c)
    assert on_cone and not on_ball and residual < 1e-15 and lam == 0.0
    residual, *_ , on_cone = path_kkt(q, [-1.0, 1.0], axis=[1.0, 0.0], cos_angle=c)
    assert on_cone and residual == pytest.approx(math.sqrt(2.0), rel=1e-12)
    residual, *_ , on_cone = path_kkt([0.5, 0.4], [1.0, -1.0], axis=[1.0, 0.0], cos_angle=c)
    assert not on_cone and residual == pytest.approx(math.sqrt(2.0), rel=1e-12)


def test_path_is_stationary_judges_each_point_by_its_own_rule():
    """``RegularizationPath.is_stationary``: on the ball, kkt <= max(rtol ||grad||, atol); inside,
    ||grad|| <= atol whatever the kkt field says. Bugs caught: the interior rule dropped (an
    interior point with a large gradient called stationary), rtol not relative to ||grad||."""
    from maxmargin.paths import RegularizationPath

    k = 4
    path = RegularizationPath(
        radii=np.arange(1.0, k + 1), points=np.ones((k, 2)), risk=np.zeros(k),
        grad_norms=np.array([10.0, 10.0, 1.0, 1e-13]), kkt=np.array([5e-6, 2e-5, 0.0, 0.0]),
        kkt_relative=np.zeros(k), multipliers=np.zeros(k),
        on_boundary=np.array([True, True, False, False]), on_cone=np.zeros(k, bool))
    np.testing.assert_array_equal(path.is_stationary(), [True, False, False, True])
