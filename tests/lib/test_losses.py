"""Every loss in the library's registry ``mm.LOSSES``, tested automatically (issue 11, item 6).

The tests iterate over the registry itself, so a new loss is covered as soon as it is
registered. The reference for each loss is the formula string its entry declares
(``Loss.formula``, e.g. "log(1 + exp(-x))"), evaluated in arbitrary precision with mpmath (value
and derivative) and in torch (autograd of the model); a new loss must therefore write its formula
with ``log``, ``exp``, ``x`` and arithmetic only.
"""
from __future__ import annotations

import dataclasses

import mpmath
import numpy as np
import pytest
import torch

import maxmargin as mm
from maxmargin import _blocks, _compiled, train
from roundoff import assert_every_step_matches, prompt_model

NAMES = sorted(mm.LOSSES)
# margins from the moderate range to far beyond exp's overflow threshold (709.78)
POINTS = np.r_[-1e6, -1e4, -1e3, -750.0, -700.0, -100.0, np.linspace(-30, 30, 61), -1e-9, 1e-9,
               100.0, 700.0, 750.0, 1e3, 1e4, 1e6]
TOO_BIG = 1e300  # exact values beyond this are not expected to be representable


def mp_loss(name: str):
    formula = mm.LOSSES[name].formula
    return lambda x: eval(formula, {"__builtins__": {}}, {"log": mpmath.log, "exp": mpmath.exp, "x": x})


def torch_loss(name: str):
    formula = mm.LOSSES[name].formula
    return lambda x: eval(formula, {"__builtins__": {}}, {"log": torch.log, "exp": torch.exp, "x": x})


def exact(name: str, derivative: bool = False) -> np.ndarray:
    """The loss (or its derivative) at POINTS in 60 digits, rounded to float64 (inf if huge)."""
    f = mp_loss(name)
    with mpmath.workdps(60):
        values = [mpmath.diff(f, mpmath.mpf(x)) if derivative else f(mpmath.mpf(x)) for x in POINTS]
        return np.array([float(v) if abs(v) < TOO_BIG else np.copysign(np.inf, float(v)) for v in values])


def test_the_registry_is_consistent():
    """Bug caught: a loss registered under the wrong name, or get_loss returning another entry."""
    assert set(NAMES) >= {"logistic", "exponential", "correlation"}
    for name, loss in mm.LOSSES.items():
        assert loss.name == name
        assert mm.get_loss(name) is loss and mm.get_loss(loss) is loss


@pytest.mark.parametrize("name", NAMES)
def test_value_matches_the_formula_in_arbitrary_precision(name):
    """Bugs caught: a wrong value, and overflow (inf/NaN) where the true value is representable
    (large margins of either sign), in the numpy and the torch formulas alike."""
    loss, reference = mm.LOSSES[name], exact(name)
    ok = np.isfinite(reference)
    assert ok.sum() >= len(POINTS) - 8
    with np.errstate(over="ignore"):
        values = loss.value(POINTS)
        torch_values = loss.torch_value(torch.tensor(POINTS)).numpy()
    for got in (values, torch_values):
        np.testing.assert_allclose(got[ok], reference[ok], rtol=1e-13, atol=1e-300)
        assert not np.any(np.isnan(got))


@pytest.mark.parametrize("name", NAMES)
def test_derivative_matches_the_formula_in_arbitrary_precision(name):
    """Bugs caught: a wrong sign or factor in l'(x), and overflow of l' at large margins."""
    loss, reference = mm.LOSSES[name], exact(name, derivative=True)
    ok = np.isfinite(reference)
    with np.errstate(over="ignore"):
        derivatives = loss.derivative(POINTS)
        torch_derivatives = loss.torch_derivative(torch.tensor(POINTS)).numpy()
    for got in (derivatives, torch_derivatives):
        np.testing.assert_allclose(got[ok], reference[ok], rtol=1e-12, atol=1e-300)
        assert not np.any(np.isnan(got))


@pytest.mark.parametrize("name", [name for name in NAMES if mm.LOSSES[name].log_value is not None])
def test_log_forms_match_the_formula_in_arbitrary_precision(name):
    """The log-domain forms (log l, log -l') that the risk and its gradient fall back to beyond
    float64 are the same loss. Bugs caught: a sign or a dropped term in a log form, which only
    shows at margins below -709.8, where the plain forms overflow."""
    loss, f = mm.LOSSES[name], mp_loss(name)
    with mpmath.workdps(60):  # (mpmath's numerical derivative fails near 1e300: POINTS stop at 1e6)
        log_values = [float(mpmath.log(f(mpmath.mpf(x)))) for x in POINTS]
        log_slopes = [float(mpmath.log(-mpmath.diff(f, mpmath.mpf(x)))) for x in POINTS]
    np.testing.assert_allclose(loss.log_value(POINTS), log_values, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(loss.log_slope(POINTS), log_slopes, rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("name", [loss.name for loss in _blocks._COMPILED_LOSSES])
def test_compiled_derivative_matches_the_formula_in_arbitrary_precision(name):
    """The compiled engine's own l'(z) (``_compiled._slopes``, with its vectorised exp) is the
    loss's derivative, over exp's whole range and beyond. Bugs caught: the compiled code of one
    loss computing another loss's derivative (the codes are integers), a sign flip or a wrong
    argument of its exp, NaN instead of 0 or -inf past the overflow threshold."""
    loss = mm.LOSSES[name]
    code = _blocks._loss_code(loss)
    lanes = _compiled.LANES
    points = np.r_[POINTS, np.zeros(-len(POINTS) % lanes)]
    got = np.empty_like(points)
    for start in range(0, len(points), lanes):
        w = np.empty(lanes)
        _compiled._slopes(code, points[start:start + lanes].copy(), w, 1, lanes)
        got[start:start + lanes] = w
    f = mp_loss(name)
    with mpmath.workdps(60):  # rounded to float64: -inf where l' is beyond it
        reference = np.array([float(mpmath.diff(f, mpmath.mpf(x))) for x in POINTS])
    np.testing.assert_allclose(got[:len(POINTS)], reference, rtol=1e-14, atol=1e-300)


# the compiled restatement's grid: both signs of exp's range and beyond, the smallest margins
# (subnormal or not), 0, the infinities and NaN, and margins drawn over exp's range
EDGES = np.r_[-np.inf, -1e6, -800.0, -709.0, -30.0, -1.0, -1e-300, -5e-324, 0.0, 5e-324,
              1e-300, 1.0, 30.0, 709.0, 740.0, 800.0, 1e6, np.inf, np.nan,
              np.random.default_rng(38).uniform(-40.0, 40.0, 64),
              np.random.default_rng(39).uniform(-745.0, 745.0, 64)]
# The two exps differ by 2.1 ulp at most (_exp_lanes within 1.1, libm's within 1), then
# 1 / (1 + e^z) rounds twice on each side: 4.1 ulp of the intermediates, a relative 4.1 eps,
# at most 8 ulp of the result (an ulp is eps/2 to eps relative); measured: 4 (logistic slope
# near z = 36.8, of 8000 margins), 1 (exponential), 0 (values, correlation).
ULPS = 8


def ulp_distance(got, want):
    """|got - want| in units of want's last place (0 where both are the same inf or NaN)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        return np.where(same, 0.0, np.abs(got - want) / np.spacing(np.abs(want)))


@pytest.mark.parametrize("loss", _blocks._COMPILED_LOSSES, ids=lambda loss: loss.name)
def test_the_compiled_formulas_are_the_numpy_ones_at_every_margin(loss):
    """The compiled kernels restate each built-in loss in numba (``_compiled._loss_value`` for the
    recorded risk, ``_compiled._slopes`` with its vector exp for the step), reached through the code
    that ``_blocks._loss_code`` gives the loss: they agree with ``loss.value`` and
    ``loss.derivative`` to ULPS units in the last place on EDGES, infinities and NaN alike. Bugs
    caught: the kernels' codes out of step with the table (one loss's code running another's
    formulas), a sign or argument of exp changed in one restatement, NaN or a finite value where
    numpy gives +-inf or 0 (past exp's range, at +-inf)."""
    code = _blocks._loss_code(loss)
    with np.errstate(over="ignore", invalid="ignore"):
        values, slopes = loss.value(EDGES), loss.derivative(EDGES)
    got_values = np.array([_compiled._loss_value(code, float(z)) for z in EDGES])
    lanes = _compiled.LANES
    points = np.r_[EDGES, np.zeros(-len(EDGES) % lanes)]
    got_slopes = np.empty_like(points)
    for start in range(0, len(points), lanes):
        _compiled._slopes(code, points[start:start + lanes].copy(), got_slopes[start:start + lanes],
                          1, lanes)
    got_slopes = got_slopes[:len(EDGES)]
    assert np.all(ulp_distance(got_values, values) <= ULPS), (EDGES, got_values, values)
    assert np.all(ulp_distance(got_slopes, slopes) <= ULPS), (EDGES, got_slopes, slopes)


@pytest.mark.parametrize("loss", _blocks._COMPILED_LOSSES, ids=lambda loss: loss.name)
@pytest.mark.parametrize("z", [-3.0, 0.25, 2.0])
def test_the_compiled_scalar_slope_is_the_derivative(loss, z):
    """``_compiled._refined_direction`` (the normalized step of tiny gradients) restates l' once
    more, in scalar code: on one sequence of two tokens with one feature (attention (a, 1 - a),
    margin z = a gamma_0 + (1 - a) gamma_1) its result g / (|g| + eps), eps = |g|, is sign(g) / 2
    with |g| proportional to |l'(z)|, so eps is set from numpy's l'(z): a result of +-1/2 to
    1e-14 means the same slope. Bug caught: the scalar branch of one loss computing another
    loss's slope (or the codes of the table out of step with the kernels)."""
    K = np.array([[[1.0], [-0.5]]])             # logits p k_t at p = 1: 1, -0.5
    a = 1.0 / (1.0 + np.exp(-1.5))              # softmax weight of token 0
    gamma = np.array([[z - 1.0, 0.0]])
    gamma[0, 1] = (z - a * gamma[0, 0]) / (1.0 - a)   # margin z
    margin = a * gamma[0, 0] + (1 - a) * gamma[0, 1]
    weights = np.array([a, 1 - a])
    g = np.sum(K[0, :, 0] * weights * (gamma[0] - margin)) * float(loss.derivative(margin))
    got = _compiled._refined_direction(K, gamma, np.array([1.0]), _blocks._loss_code(loss),
                                       abs(g), 1, 2, 1)
    assert got[0] == pytest.approx(np.sign(g) * 0.5, rel=1e-13)


@pytest.mark.parametrize("name", NAMES)
def test_the_excess_form_matches_the_difference_in_arbitrary_precision(name):
    """``loss.excess(delta, top)`` is l(top - delta) - l(top), the difference taken in 50 digits
    of the loss's own formula, to a few eps relative, where float64's difference cancels
    (delta 1e-12 at top 40: l(40) = 4e-18 for the logistic loss, the excess 4e-30) and up to
    delta = 1. Bugs caught: a sign flip of delta or top in one excess form, expm1(delta) for
    e^-delta - 1, the logistic's sigmoid(-top) taken as sigmoid(top)."""
    loss, f = mm.LOSSES[name], mp_loss(name)
    delta = np.array([1e-12, 1e-6, 0.25, 1.0])[:, None]
    top = np.array([-30.0, -1.0, 0.0, 2.5, 40.0])[None, :]
    got = loss.excess(delta, top)
    assert got.shape == (4, 5)
    with mpmath.workdps(50):
        want = np.array([[float(f(mpmath.mpf(t) - mpmath.mpf(d)) - f(mpmath.mpf(t)))
                          for t in top[0]] for d in delta[:, 0]])
    np.testing.assert_allclose(got, want, rtol=4e-15, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_the_engines_recognise_a_loss_by_its_definition(name):
    """Bug caught: dispatch by object identity, under which a copied or renamed built-in loss
    silently runs on the slower torch loop (or a new loss is handed an integer code it is not)."""
    loss = mm.LOSSES[name]
    code = _blocks._loss_code(loss)
    assert _blocks._loss_code(dataclasses.replace(loss, name="renamed")) == code
    other = dataclasses.replace(loss, derivative=lambda x: loss.derivative(x))
    assert _blocks._loss_code(other) is None


@pytest.mark.parametrize("name", NAMES)
def test_derivative_is_the_autograd_derivative_of_the_value(name):
    """The paper's loss assumption: differentiable and strictly decreasing, l' < 0; and the two
    backends agree (the training loops use torch, the public functions numpy)."""
    loss = mm.LOSSES[name]
    x = torch.linspace(-30, 30, 601, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(loss.torch_value(x).sum(), x)
    xs = x.detach()
    np.testing.assert_allclose(loss.torch_derivative(xs).numpy(), grad.numpy(), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(loss.derivative(xs.numpy()), grad.numpy(), rtol=1e-12, atol=1e-300)
    assert np.all(loss.derivative(xs.numpy()) < 0)
    values = loss.value(xs.numpy())
    assert np.all(np.diff(values) < 0)


@pytest.mark.parametrize("name", NAMES)
def test_derivative_accepts_arrays_and_keeps_their_shape(name):
    """Bug caught: a loss whose derivative ignores the shape of a (n, B) margin array."""
    loss = mm.LOSSES[name]
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    assert loss.value(x).shape == loss.derivative(x).shape == (3, 4)
    t = torch.tensor(x)
    assert loss.torch_value(t).shape == loss.torch_derivative(t).shape == (3, 4)


# ----------------------------------------------------------------------------------------------
# every registered loss through the model and a training loop
# ----------------------------------------------------------------------------------------------


def instance(seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((5, 4, 3))
    Y = rng.choice([-1.0, 1.0], size=5)
    return X, Y, rng.standard_normal(3), rng.standard_normal((3, 3)), rng.standard_normal(3)


@pytest.mark.parametrize("name", NAMES)
def test_risk_and_gradients_match_autograd_for_every_loss(name):
    """Bugs caught: the risk or a gradient (in p, v or W) using the wrong loss derivative."""
    X, Y, v, W, p = instance(3)
    pt, vt, Wt = (torch.tensor(a, requires_grad=True) for a in (p, v, W))
    X_, Y_ = torch.tensor(X), torch.tensor(Y)
    s = torch.softmax(X_ @ (Wt @ pt), dim=-1)
    value = torch_loss(name)(Y_ * (s * (X_ @ vt)).sum(-1)).mean()
    value.backward()
    assert mm.risk(X, Y, v, p, W=W, loss=name) == pytest.approx(value.item(), rel=1e-12)
    np.testing.assert_allclose(mm.risk_grad(X, Y, v, p, W=W, loss=name), pt.grad.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(mm.risk_grad_v(X, Y, v, p, W=W, loss=name), vt.grad.numpy(), rtol=1e-10, atol=1e-14)
    # the W-gradient with the shared query p: d/dW of the same risk
    np.testing.assert_allclose(mm.risk_grad_W(X, Y, v, W, p, loss=name), Wt.grad.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_gd_matches_an_autograd_loop_for_every_loss(name, normalized):
    """Bugs caught: the training engine's torch loss (or its derivative) disagreeing with the
    loss, a wrong risk record, a wrong step."""
    X, Y, v, W, _ = instance(4)
    P0 = np.random.default_rng(5).standard_normal((2, 3))
    traj = mm.gd(X, Y, v, P0, 15, 0.3, W=W, loss=name, normalized=normalized)
    model = prompt_model(X, Y, v, W, torch_loss(name))
    for b in range(2):  # step by step, at one step's rounding bound (roundoff.py)
        assert_every_step_matches(traj.p[:, b], traj.risk[:, b], model, 0.3, normalized, 1e-12,
                                  P0[b], risk_rtol=1e-11)
