"""Bad and extreme inputs across the public API (issue 13, classes 3, 5 and 6).

Each case either checks the right answer against an independent computation (the model written
in 80-digit mpmath, or a closed form), or expects a ValueError / TypeError whose message starts
with the name of the offending argument. Before the fixes of issue 13 these inputs returned NaN,
inf or a plausible wrong number, or failed inside numpy/torch with a message that named no
argument (or the wrong one); the bug each group catches is named above it.
"""
from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

import maxmargin as mm
from maxmargin.book import landscape
from maxmargin.nn import PromptAttention


@pytest.fixture(autouse=True)
def _eighty_digits():
    """80 digits for this module's tests only: the global mp.dps this module set at import
    changed the results of other modules' tests run after it (test order dependence)."""
    with mpmath.workdps(80):
        yield


inst = mm.data.fig2()
X, Y, v, W = inst.X, inst.Y, inst.v, inst.W
p = np.array([0.4, -1.2, 0.3])
U = np.array([0.6, 0.8, 0.0])           # a unit direction in the attended plane


# ----------------------------------------------------------------------------------------------
# An independent model in arbitrary precision
# ----------------------------------------------------------------------------------------------

MP_LOSS = {  # (l(x), l'(x)) in mpmath
    "logistic": (lambda x: mpmath.log1p(mpmath.exp(-x)), lambda x: -1 / (1 + mpmath.exp(x))),
    "exponential": (lambda x: mpmath.exp(-x), lambda x: -mpmath.exp(-x)),
    "correlation": (lambda x: -x, lambda x: mpmath.mpf(-1)),
}


def mp_model(X, Y, v, p, W=None, loss="logistic", queries=None):
    """(attention (n, T), outputs (n,), risk, grad in p (d,)) of f(X) = <X v, softmax(X W q_i)>
    in 80-digit arithmetic, with q_i = p, or queries[i] when given (then grad is in W)."""
    n, T, d = X.shape
    M = lambda a: [[mpmath.mpf(float(x)) for x in row] for row in a]  # noqa: E731
    Wm = M(np.eye(d) if W is None else W)
    value, derivative = MP_LOSS[loss]
    att, outs, total = [], [], mpmath.mpf(0)
    grad = [[mpmath.mpf(0)] * d for _ in range(d)] if queries is not None else [mpmath.mpf(0)] * d
    for i in range(n):
        q = [mpmath.mpf(float(x)) for x in (p if queries is None else queries[i])]
        Wq = [mpmath.fsum(Wm[a][b] * q[b] for b in range(d)) for a in range(d)]
        xs = [[mpmath.mpf(float(x)) for x in X[i, t]] for t in range(T)]
        logit = [mpmath.fsum(x[a] * Wq[a] for a in range(d)) for x in xs]
        top = max(logit)
        e = [mpmath.exp(l - top) for l in logit]
        s = [x / mpmath.fsum(e) for x in e]
        gamma = [mpmath.mpf(float(Y[i])) * mpmath.fsum(x[a] * mpmath.mpf(float(v[a])) for a in range(d))
                 for x in xs]
        z = mpmath.fsum(st * g for st, g in zip(s, gamma))
        att.append(s)
        outs.append(z * mpmath.mpf(float(Y[i])))
        total += value(z)
        c = [derivative(z) * st * (g - z) / n for st, g in zip(s, gamma)]  # dL / dlogit_it
        if queries is None:
            keys = [[mpmath.fsum(Wm[b][a] * x[b] for b in range(d)) for a in range(d)] for x in xs]
            grad = [grad[a] + mpmath.fsum(c[t] * keys[t][a] for t in range(T)) for a in range(d)]
        else:
            grad = [[grad[a][b] + mpmath.fsum(c[t] * xs[t][a] for t in range(T)) * q[b]
                     for b in range(d)] for a in range(d)]
    return att, outs, total / n, grad


def to_float(x):
    """mpmath numbers (nested lists) as a float64 array; beyond float64 they become +-inf."""
    if isinstance(x, list):
        return np.array([to_float(y) for y in x])
    return float(x)


# ----------------------------------------------------------------------------------------------
# Class 3: overflow. Bug caught: NaN or inf returned where the mathematics is finite (products
# K p, scores or exp(-margin) overflowing), or an overflow that names no argument.
# ----------------------------------------------------------------------------------------------

HUGE_PROMPTS = {
    "norm 1e308 in the plane": 1e308 * U,
    "norm 1e308 off the plane": np.array([1e308, -1e308, 1e308]) / 2,
    "norm 1.5e308 per coordinate": np.array([1.5e308, 1.5e308, -1.5e308]),
    "norm 1e300": 1e300 * U,
}


@pytest.mark.parametrize("name", HUGE_PROMPTS)
def test_attention_risk_gradient_and_output_at_huge_prompts(name):
    q = HUGE_PROMPTS[name]
    att, outs, total, grad = mp_model(X, Y, v, q, W)
    np.testing.assert_allclose(mm.attention(X, q, W=W), to_float(att), rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(mm.predict(X, v, q, W=W), to_float(outs), rtol=1e-13)
    assert mm.risk(X, Y, v, q, W=W) == pytest.approx(float(total), rel=1e-13)
    np.testing.assert_allclose(mm.risk_grad(X, Y, v, q, W=W), to_float(grad), rtol=1e-12, atol=1e-300)
    gap = mm.excess_risk(X, Y, v, q, W=W)
    assert np.isfinite(gap) and gap >= 0


def test_batched_huge_and_ordinary_prompts_together():
    """A batch that mixes a huge prompt with ordinary ones: each row still matches mpmath."""
    batch = np.stack([p, 1e308 * U, -p])
    got = mm.risk_grad(X, Y, v, batch, W=W)
    for row, q in zip(got, batch):
        np.testing.assert_allclose(row, to_float(mp_model(X, Y, v, q, W)[3]), rtol=1e-12, atol=1e-300)


def test_huge_keys_with_ordinary_prompt():
    """Tokens of size 1e300 with a prompt of size 10: the logits (about 1e301) are finite."""
    Xh = X * 1e300
    q = np.array([10.0, 3.0, 0.0])
    att = mp_model(Xh, Y, np.array([0.0, 0.0, 1e-300]), q, W)[0]
    np.testing.assert_allclose(mm.attention(Xh, q, W=W), to_float(att), rtol=1e-13, atol=1e-300)


def tiny_exponential_instance():
    """Two sequences whose exponential losses are e^{~710} (beyond float64) and about 1: the
    mean, about 1e308, is representable, but exp(-margin) of sequence 0 is not."""
    X2 = np.array([[[1.0, -710.2], [0.0, -709.8]], [[1.0, 0.0], [0.0, 0.0]]])
    return X2, np.ones(2), np.array([0.0, 1.0]), np.array([0.3, 0.0])


@pytest.mark.parametrize("name", sorted(mm.LOSSES))
def test_log_value_and_log_slope_of_each_loss(name):
    """Where a loss gives log l(x) and log(-l'(x)), they match the formula in 80 digits, far
    beyond exp's overflow (bug caught: a wrong sign or a missing minus in the log forms)."""
    loss = mm.LOSSES[name]
    f = lambda x: eval(loss.formula, {"__builtins__": {}}, {"log": mpmath.log, "exp": mpmath.exp, "x": x})  # noqa: E731
    points = np.array([-1e5, -800.0, -3.0, 0.0, 2.5, 700.0])
    for fn, exact in ((loss.log_value, lambda x: mpmath.log(f(x))),
                      (loss.log_slope, lambda x: mpmath.log(-mpmath.diff(f, x)))):
        if fn is None:
            continue
        expected = np.array([float(exact(mpmath.mpf(x))) for x in points])
        np.testing.assert_allclose(fn(points), expected, rtol=1e-13)
    assert name != "exponential" or loss.log_value is not None and loss.log_slope is not None


def test_exponential_risk_is_finite_when_its_mean_is_representable():
    X2, Y2, v2, q = tiny_exponential_instance()
    _, _, total, grad = mp_model(X2, Y2, v2, q, None, "exponential")
    assert float(total) < np.finfo(float).max
    assert mm.risk(X2, Y2, v2, q, loss="exponential") == pytest.approx(float(total), rel=1e-12)
    np.testing.assert_allclose(mm.risk_grad(X2, Y2, v2, q, loss="exponential"), to_float(grad),
                               rtol=1e-10)
    Z = np.array([q, [0.5, -0.25]])  # the same risk as a function of W, one query per sequence
    _, _, total_W, grad_W = mp_model(X2, Y2, v2, None, np.eye(2), "exponential", queries=Z)
    assert mm.risk_W(X2, Y2, v2, np.eye(2), Z, loss="exponential") == pytest.approx(float(total_W), rel=1e-12)
    np.testing.assert_allclose(mm.risk_grad_W(X2, Y2, v2, np.stack([np.eye(2), np.eye(2)]), Z,
                                              loss="exponential"),
                               np.stack([to_float(grad_W)] * 2), rtol=1e-10)


@pytest.mark.parametrize("call", ["risk", "risk_grad", "risk_grad_v", "optimal_risk", "excess_risk"])
def test_exponential_risk_beyond_float64_names_v(call):
    """v = (0, 0, -1e5): the exponential risk is about e^{57000}, which no float64 holds."""
    far = np.array([0.0, 0.0, -1e5])
    args = {"risk": (X, Y, far, p), "risk_grad": (X, Y, far, p), "risk_grad_v": (X, Y, far, p),
            "optimal_risk": (X, Y, far), "excess_risk": (X, Y, far, p)}[call]
    keys = {} if call == "optimal_risk" else {"W": W}
    with pytest.raises(ValueError, match=r"^v: .*exponential.*float64"):
        getattr(mm, call)(*args, loss="exponential", **keys)


def test_exponential_risk_W_beyond_float64_names_v():
    with pytest.raises(ValueError, match=r"^v: .*exponential.*float64"):
        mm.risk_W(X, Y, np.array([0.0, 0.0, -1e5]), np.eye(3), p, loss="exponential")


@pytest.mark.parametrize("loss", ["logistic", "correlation"])
def test_large_margins_keep_the_mean_finite(loss):
    """Losses of about 1.7e308 in every sequence: the sum overflows, the mean does not."""
    X2 = np.array([[[0.0, -1.7e308], [0.0, -1.7e308]]] * 2)
    got = mm.risk(X2, np.ones(2), np.array([0.0, 1.0]), np.zeros(2), loss=loss)
    assert got == pytest.approx(1.7e308, rel=1e-14)


def test_logits_beyond_float64_name_p():
    with pytest.raises(ValueError, match=r"^p: .*logits.*float64"):
        mm.logits(X, np.array([1.5e308, 1.5e308, 0.0]), W=np.eye(3) * 1e10)


def test_keys_beyond_float64_name_W():
    with pytest.raises(ValueError, match=r"^W: .*keys.*float64"):
        mm.attention(X, p, W=np.full((3, 3), 1.7e308))


def test_scores_beyond_float64_name_v():
    with pytest.raises(ValueError, match=r"^v: .*scores.*float64"):
        mm.risk(X * 1e300, Y, np.array([1e10, 0.0, 1e10]), p, W=W)


@pytest.mark.parametrize("scale", [1e308, 1e200])
def test_risk_W_and_its_gradient_at_huge_W(scale):
    """risk_W at W = scale * I with shared and per-sequence queries, against mpmath."""
    Wh = scale * np.diag([1.0, 0.5, 0.0])
    Z = np.array([[0.6, 0.8, 0.0], [0.8, -0.6, 0.1], [0.1, 0.2, 0.3]])
    _, _, total, grad = mp_model(X, Y, v, None, Wh, queries=Z)
    assert mm.risk_W(X, Y, v, Wh, Z) == pytest.approx(float(total), rel=1e-13)
    np.testing.assert_allclose(mm.risk_grad_W(X, Y, v, Wh, Z), to_float(grad), rtol=1e-11, atol=1e-300)


def test_softmax_of_extreme_finite_logits():
    """softmax(1.7e308, -1.7e308) = (1, 0) exactly (the difference overflows, the answer does not)."""
    np.testing.assert_array_equal(mm.softmax(np.array([1.7e308, -1.7e308])), [1.0, 0.0])


def test_excess_risk_on_rays_at_huge_radii():
    radii, gaps = landscape.excess_risk_on_rays(X, Y, v, U[None], W=W, radii=[1.0, 1e308])
    assert np.all(np.isfinite(gaps)) and gaps[0, 1] <= gaps[0, 0]


# ----------------------------------------------------------------------------------------------
# Class 5: bad values. Bug caught: a NaN, a truthy string, an empty array or a wrong shape
# accepted and turned into a plausible answer, or refused with numpy/torch's message.
# ----------------------------------------------------------------------------------------------

nan3 = np.array([np.nan, 0.0, 1.0])
CASES = [  # (id, call, error, message that must match at the start)
    ("cosine NaN in a", lambda: mm.cosine(nan3, U), ValueError, r"^a: non-finite"),
    ("cosine inf in b", lambda: mm.cosine(U, np.array([np.inf, 0, 0])), ValueError, r"^b: non-finite"),
    ("cosine shapes", lambda: mm.cosine(np.ones(3), np.ones(2)), ValueError, r"^b: .*shape"),
    ("Trajectory.cosine NaN", lambda: mm.gd(X, Y, v, p, 2, 0.1, W=W).cosine(nan3), ValueError,
     r"^direction: non-finite"),
    ("softmax NaN", lambda: mm.softmax(nan3), ValueError, r"^a: non-finite"),
    ("softmax axis", lambda: mm.softmax(np.ones(3), axis=2), ValueError, r"^axis: "),
    ("random spread NaN", lambda: mm.data.random_instance(3, 4, 3, 0, spread=np.nan), ValueError, r"^spread: "),
    ("random spread 0", lambda: mm.data.random_instance(3, 4, 3, 0, spread=0.0), ValueError, r"^spread: "),
    ("random margin -1", lambda: mm.data.random_instance(3, 4, 3, 0, margin=-1), ValueError, r"^margin: "),
    ("random margin NaN", lambda: mm.data.random_instance(3, 4, 3, 0, margin=np.nan), ValueError, r"^margin: "),
    ("random margin str", lambda: mm.data.random_instance(3, 4, 3, 0, margin="1"), TypeError, r"^margin: "),
    ("random equal_scores str", lambda: mm.data.random_instance(3, 4, 3, 0, equal_scores="no"), TypeError,
     r"^equal_scores: "),
    ("random seed negative", lambda: mm.data.random_instance(3, 4, 3, -1), ValueError, r"^seed: "),
    ("random seed float", lambda: mm.data.random_instance(3, 4, 3, 1.5), TypeError, r"^seed: "),
    ("random seed str", lambda: mm.data.random_instance(3, 4, 3, "0"), TypeError, r"^seed: "),
    ("gaussian seed None", lambda: mm.data.gaussian_instance(3, 4, 3, None), TypeError, r"^seed: "),
    ("gaussian n bool", lambda: mm.data.gaussian_instance(True, 4, 3, 0), TypeError, r"^n: "),
    ("query seed None", lambda: mm.data.query_instance(3, 4, 3, None), TypeError, r"^seed: "),
    ("query T one", lambda: mm.data.query_instance(3, 1, 3, 0), ValueError, r"^T: "),
    ("fig1_moved x3 NaN", lambda: mm.data.fig1_moved(x3_score=np.nan), ValueError, r"^x3_score: "),
    ("gd normalized 'no'", lambda: mm.gd(X, Y, v, p, 2, 0.1, W=W, normalized="no"), TypeError, r"^normalized: "),
    ("gd normalized None", lambda: mm.gd(X, Y, v, p, 2, 0.1, W=W, normalized=None), TypeError, r"^normalized: "),
    ("gd_stack normalized 1", lambda: mm.gd_stack(X[None], Y[None], v, p, 2, 0.1, normalized=1), TypeError,
     r"^normalized: "),
    ("gd_W normalized 'yes'", lambda: mm.gd_W(X, Y, v, np.eye(3), U, 2, 0.1, normalized="yes"), TypeError,
     r"^normalized: "),
    ("gd_joint normalized str", lambda: mm.gd_joint(X, Y, v, p, 2, 0.1, normalized="False"), TypeError,
     r"^normalized: "),
    ("gd_joint v0 p0 do not broadcast", lambda: mm.gd_joint(X, Y, np.ones((2, 3)), np.ones((3, 3)), 2, 0.1, normalized=True),
     ValueError, r"^v0: .*p0"),
    ("gd_joint v0 NaN", lambda: mm.gd_joint(X, Y, nan3, p, 2, 0.1, normalized=True), ValueError, r"^v0: non-finite"),
    ("gd_joint track wrong length", lambda: mm.gd_joint(X, Y, v, p, 2, 0.1, track=[0, 1], normalized=True), ValueError,
     r"^track: "),
    ("gd_stack M = 0", lambda: mm.gd_stack(X[:0][None][:0], np.ones((0, 3)), v, p, 2, 0.1), ValueError,
     r"^X: .*M"),
    ("gd_stack track shape", lambda: mm.gd_stack(X[None], Y[None], v, p, 2, 0.1, track=[0, 0]), ValueError,
     r"^track: "),
    ("gd_stack track floats", lambda: mm.gd_stack(X[None], Y[None], v, p, 2, 0.1, track=[[0.5, 0, 0]]),
     TypeError, r"^track: "),
    ("gd_stack Y not +-1", lambda: mm.gd_stack(X[None], np.zeros((1, 3)), v, p, 2, 0.1), ValueError,
     r"^Y: labels"),
    ("gd_stack p0 for 2 instances", lambda: mm.gd_stack(X[None], Y[None], v, np.zeros((2, 1, 3)), 2, 0.1),
     ValueError, r"^p0: "),
    ("gd_W B = 0", lambda: mm.gd_W(X, Y, v, np.zeros((0, 3, 3)), U, 2, 0.1), ValueError, r"^W0: "),
    ("gd_W W0 NaN", lambda: mm.gd_W(X, Y, v, np.full((3, 3), np.nan), U, 2, 0.1), ValueError,
     r"^W0: non-finite"),
    ("gd_W queries NaN", lambda: mm.gd_W(X, Y, v, np.eye(3), nan3, 2, 0.1), ValueError, r"^queries: non-finite"),
    ("gd p0 B = 0", lambda: mm.gd(X, Y, v, np.zeros((0, 3)), 2, 0.1), ValueError, r"^p0: "),
    ("gd v batched", lambda: mm.gd(X, Y, np.ones((2, 3)), p, 2, 0.1), ValueError, r"^v: expected shape \(3,\)"),
    ("gd Y bool", lambda: mm.gd(X, np.array([True, False, True]), v, p, 2, 0.1), ValueError, r"^Y: labels"),
    ("selection_basin steps bool", lambda: landscape.selection_basin(X, Y, v, W=W, num=3, steps=True), TypeError,
     r"^steps: "),
    ("risk_W queries NaN", lambda: mm.risk_W(X, Y, v, np.eye(3), nan3), ValueError, r"^queries: non-finite"),
    ("risk_W queries strings", lambda: mm.risk_W(X, Y, v, np.eye(3), ["a", "b", "c"]), TypeError, r"^queries: "),
    ("risk_W W None", lambda: mm.risk_W(X, Y, v, None, p), TypeError, r"^W: "),
    ("risk_grad_W v wrong", lambda: mm.risk_grad_W(X, Y, np.ones(4), np.eye(3), p), ValueError, r"^v: "),
    # found by the docstring review: a batch of heads passed validation, then crashed in torch
    # found by a review: numpy's own "zero-size array" error, not naming a
    ("softmax no logit", lambda: mm.softmax(np.zeros((2, 0))), ValueError, r"^a: no logit"),
    ("risk_grad_W v batched", lambda: mm.risk_grad_W(X, Y, np.ones((2, 3)), np.eye(3), p), ValueError,
     r"^v: expected shape \(3,\)"),
    ("optimal_risk batched v", lambda: mm.optimal_risk(X, Y, np.ones((2, 3))), ValueError,
     r"^v: expected shape \(3,\)"),
    ("X empty n = 0", lambda: mm.risk(X[:0], Y[:0], v, p), ValueError, r"^X: .*at least one sequence"),
    ("X d = 0", lambda: mm.attention(np.zeros((2, 3, 0)), np.zeros(0)), ValueError, r"^X: "),
    ("X T = 1", lambda: mm.risk(X[:, :1], Y, v, p, W=W), ValueError, r"^X: .*at least 2 tokens"),
    ("Y length mismatch", lambda: mm.risk_grad(X, Y[:2], v, p, W=W), ValueError, r"^Y: expected shape \(3,\)"),
    ("p 0-d", lambda: mm.risk(X, Y, v, 1.0, W=W), ValueError, r"^p: expected shape"),
    ("excess rays directions d", lambda: landscape.excess_risk_on_rays(X, Y, v, np.ones((2, 4))), ValueError,
     r"^directions: "),
    ("excess rays directions NaN", lambda: landscape.excess_risk_on_rays(X, Y, v, nan3[None]), ValueError,
     r"^directions: "),
    ("excess rays radii NaN", lambda: landscape.excess_risk_on_rays(X, Y, v, U[None], radii=[1.0, np.nan]),
     ValueError, r"^radii: "),
    ("excess rays radii 2-D", lambda: landscape.excess_risk_on_rays(X, Y, v, U[None], radii=np.ones((2, 2))),
     ValueError, r"^radii: "),
    ("excess plane resolution bool", lambda: landscape.excess_risk_on_plane(X, Y, v, resolution=True), TypeError,
     r"^resolution: "),
    ("excess circle R NaN", lambda: landscape.excess_risk_on_circle(X, Y, v, np.nan), ValueError, r"^radius: "),
    ("nn d zero", lambda: PromptAttention(0), ValueError, r"^d: "),
    ("nn d float", lambda: PromptAttention(3.0), TypeError, r"^d: "),
    ("nn p wrong length", lambda: PromptAttention(3, p=np.ones(2)), ValueError, r"^p: expected shape \(3,\)"),
    ("nn v NaN", lambda: PromptAttention(3, v=nan3), ValueError, r"^v: non-finite"),
    ("nn W wrong shape", lambda: PromptAttention(3, W=np.eye(2)), ValueError, r"^W: expected shape \(3, 3\)"),
    ("nn forward X wrong d", lambda: PromptAttention(3)(torch.zeros(2, 4, 2, dtype=torch.float64)), ValueError,
     r"^X: "),
    ("nn forward X 2-D", lambda: PromptAttention(3)(torch.zeros(4, 3, dtype=torch.float64)), ValueError, r"^X: "),
    ("prompt_plane points NaN", lambda: _book().explore.prompt_plane(inst, [[np.nan, 1.0]]), ValueError,
     r"^points: "),
    ("prompt_plane sequence float", lambda: _book().explore.prompt_plane(inst, [[1.0, 1.0]], sequence=0.5),
     TypeError, r"^sequence: "),
]


def _book():
    import matplotlib

    matplotlib.use("Agg")
    from maxmargin import book

    return book


@pytest.mark.parametrize("name,call,error,message", CASES, ids=[c[0] for c in CASES])
def test_bad_value_gets_a_clear_error(name, call, error, message):
    with pytest.raises(error, match=message):
        call()


# Inputs that are unusual but valid: accepted, with the right answer.

def test_tensors_that_require_grad_are_accepted():
    """A reader's torch parameters are detached, not refused with torch's "Can't call numpy()"."""
    Xt = torch.tensor(X, requires_grad=True)
    pt = torch.tensor(p, requires_grad=True)
    vt = torch.tensor(v, requires_grad=True)
    expected = mp_model(X, Y, v, p, W)[2]
    assert mm.risk(Xt, torch.tensor(Y), vt, pt, W=W) == pytest.approx(float(expected), rel=1e-13)
    run = mm.gd(X, Y, vt, pt, 2, 0.1, W=W)
    assert run.p.shape == (3, 1, 3)


def test_integer_arrays_and_lists_are_accepted():
    """Integer tokens and labels as lists give the same risk as their float64 values in mpmath."""
    Xi = np.array([[[1, 0], [0, 2]], [[2, 1], [0, 0]]])
    Yi = [1, -1]
    expected = mp_model(Xi.astype(float), np.array(Yi, float), np.array([1.0, -1.0]), np.array([0.5, 0.25]))[2]
    assert mm.risk(Xi.tolist(), Yi, [1, -1], [0.5, 0.25]) == pytest.approx(float(expected), rel=1e-14)


def test_numpy_bool_and_integer_settings_are_accepted():
    run = mm.gd(X, Y, v, p, np.int64(2), 0.1, W=W, normalized=np.bool_(True))
    assert run.normalized is True and run.p.shape == (3, 1, 3)


def test_random_instance_margin_zero_and_none_are_valid():
    """margin=0 (ties allowed) and margin=None (no planted margin) are both meaningful."""
    for margin in (0.0, None):
        got = mm.data.random_instance(3, 4, 3, 0, margin=margin)
        assert got.X.shape == (3, 4, 3) and np.all(np.isfinite(got.X))


def test_cosine_of_zero_vector_is_zero_and_of_parallel_vectors_is_one():
    assert mm.cosine(np.zeros(3), U) == 0.0
    assert mm.cosine(3 * U, U) == pytest.approx(1.0, abs=1e-15)


# ----------------------------------------------------------------------------------------------
# Class 6: unbounded work. Bug caught: a numpy MemoryError (or an hour-long run) instead of a
# refusal that names the argument and the estimate.
# ----------------------------------------------------------------------------------------------

WORK = [
    ("gd steps 1e10", lambda: mm.gd(X, Y, v, p, 10**10, 0.1, W=W), r"^steps: .*(GB|operations)"),
    ("gd_stack steps 1e10", lambda: mm.gd_stack(X[None], Y[None], v, p, 10**10, 0.1), r"^steps: .*(GB|operations)"),
    ("gd_W steps 1e10", lambda: mm.gd_W(X, Y, v, np.eye(3), U, 10**10, 0.1), r"^steps: .*(GB|operations)"),
    ("gd_joint steps 1e10", lambda: mm.gd_joint(X, Y, v, p, 10**10, 0.1, normalized=True), r"^steps: .*(GB|operations)"),
    ("selection_basin steps 1e9", lambda: landscape.selection_basin(X, Y, v, W=W, num=61, steps=10**9),
     r"^steps: .*(GB|operations)"),
    ("gd big batch", lambda: mm.gd(X, Y, v, np.zeros((10**5, 3)), 10**5, 0.1, W=W), r"^steps: .*GB"),
    ("plane resolution 1e6", lambda: landscape.excess_risk_on_plane(X, Y, v, resolution=10**6), r"^resolution: .*GB"),
    ("circle num 1e10", lambda: landscape.excess_risk_on_circle(X, Y, v, 1.0, num=10**10), r"^num: .*GB"),
]


@pytest.mark.parametrize("name,call,message", WORK, ids=[c[0] for c in WORK])
def test_unbounded_work_is_refused_with_its_estimate(name, call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_refusal_states_the_memory_the_run_would_record():
    """The estimate in the message is the size of what gd records: per run and step the iterate
    (d), the attention on and off the tracked tokens (2 n) and the risk (1), for steps + 1
    recorded steps, plus the final attention (n T per run) (no margins are kept: each record's
    risk is computed at its step; test_memory.py checks this estimate against the measured
    peak). Bug caught: an estimate that leaves out the batch (or a dimension), which would let
    a run exhaust the memory."""
    import re

    n, T, d = X.shape
    for B, steps in ((2, 10**10), (50, 10**9)):
        with pytest.raises(ValueError) as error:
            mm.gd(X, Y, v, np.zeros((B, d)), steps, 0.1, W=W)
        stated = float(re.search(r"and ([0-9.e+]+) GB of memory", str(error.value)).group(1))
        expected = 8.0 * ((steps + 1) * B * (d + 2 * n + 1) + B * n * T) / 1e9
        assert stated == pytest.approx(expected, rel=1e-2), str(error.value)


def test_work_just_inside_the_limit_runs():
    """A long but affordable run is not refused (the limit is on the estimate, not the count)."""
    run = mm.gd(X[:1], Y[:1], v, p, 20000, 0.01, W=W)
    assert run.p.shape == (20001, 1, 3)
