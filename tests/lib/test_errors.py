"""Bad input gets a clear error that names the argument and the problem; nothing becomes NaN."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import maxmargin as mm

inst = mm.data.fig2()
X, Y, v, W = inst.X, inst.Y, inst.v, inst.W
p = np.zeros(3)
nan_X = X.copy()
nan_X[1, 2, 0] = np.nan
Q = np.array([[1.0, 0.5, 0.2], [0.3, 1.0, 0.0], [0.0, 0.2, 1.0]])  # one query per sequence (W-SVM)

_fig1b = mm.data.fig1(variant="b")
FIG1B, FIG1B_W = (_fig1b.X, _fig1b.Y, _fig1b.v), _fig1b.W

CASES = [
    ("X 2-D", lambda: mm.attention(X[0], p), ValueError, r"X: expected shape \(n, T, d\)"),
    ("X with NaN", lambda: mm.risk(nan_X, Y, v, p, W=W), ValueError, r"X: non-finite value at index \(1, 2, 0\)"),
    ("X one token", lambda: mm.attention(X[:, :1], p), ValueError, r"X: each sequence needs at least 2 tokens"),
    ("X strings", lambda: mm.attention([["a"]], p), TypeError, r"X: expected an array of real numbers"),
    ("X None", lambda: mm.scores(None, Y, v), TypeError, r"X: expected an array of numbers, got None"),
    ("Y wrong length", lambda: mm.risk(X, Y[:2], v, p, W=W), ValueError, r"Y: expected shape \(3,\)"),
    ("Y not +-1", lambda: mm.risk(X, np.array([1, 0, 1]), v, p, W=W), ValueError, r"Y: labels must be -1 or \+1"),
    ("v wrong shape", lambda: mm.risk(X, Y, np.ones(2), p, W=W), ValueError, r"v: expected shape \(3,\)"),
    ("v inf", lambda: mm.risk_grad(X, Y, np.array([0, np.inf, 1.0]), p, W=W), ValueError, r"v: non-finite"),
    ("p wrong last axis", lambda: mm.risk(X, Y, v, np.zeros(4), W=W), ValueError, r"p: expected shape \(\.\.\., 3\)"),
    ("p NaN", lambda: mm.risk_grad(X, Y, v, np.array([np.nan, 0, 0]), W=W), ValueError, r"p: non-finite"),
    ("W wrong shape", lambda: mm.attention(X, p, W=np.eye(2)), ValueError, r"W: expected shape \(3, 3\)"),
    ("W NaN", lambda: mm.predict(X, v, p, W=np.full((3, 3), np.nan)), ValueError, r"W: non-finite"),
    ("unknown loss", lambda: mm.risk(X, Y, v, p, W=W, loss="hinge"), ValueError, r"loss: unknown loss 'hinge'"),
    ("loss not a name", lambda: mm.risk(X, Y, v, p, W=W, loss=3), TypeError, r"loss: expected one of"),
    ("steps zero", lambda: mm.gd(X, Y, v, p, 0, 0.1, W=W), ValueError, r"steps: must be >= 1"),
    ("steps float", lambda: mm.gd(X, Y, v, p, 10.5, 0.1, W=W), TypeError, r"steps: expected an integer"),
    ("lr negative", lambda: mm.gd(X, Y, v, p, 10, -0.1, W=W), ValueError, r"lr: must be a finite positive number"),
    ("lr NaN", lambda: mm.gd(X, Y, v, p, 10, np.nan, W=W), ValueError, r"lr: must be a finite positive"),
    ("p0 3-D", lambda: mm.gd(X, Y, v, np.zeros((2, 2, 3)), 10, 0.1, W=W), ValueError, r"p0: expected shape \(3,\) or \(B, 3\)"),
    ("track out of range", lambda: mm.gd(X, Y, v, p, 5, 0.1, W=W, track=[0, 7, 0]), ValueError, r"track: index 7 for sequence 1 is out of range"),
    ("eps zero", lambda: mm.gd(X, Y, v, p, 5, 0.1, W=W, normalized=True, eps=0.0), ValueError, r"eps: must be a finite positive"),
    ("W0 wrong shape", lambda: mm.gd_W(X, Y, v, np.eye(2), p, 5, 0.1), ValueError, r"W0: expected shape \(3, 3\)"),
    ("queries wrong shape", lambda: mm.gd_W(X, Y, v, np.eye(3), np.ones((2, 3)), 5, 0.1), ValueError, r"queries: expected shape \(3, 3\) or \(3,\)"),
    ("v0 wrong shape", lambda: mm.gd_joint(X, Y, np.ones(2), p, 5, 0.1, normalized=True), ValueError, r"v0: expected shape"),
    ("alpha out of range", lambda: mm.att_svm(X, [0, 9, 0], W=W), ValueError, r"alpha: .*out of range"),
    ("alpha wrong length", lambda: mm.att_svm(X, [0, 0], W=W), ValueError, r"alpha: .*\(3,\)"),
    ("alpha floats", lambda: mm.att_svm(X, [0.5, 0, 0], W=W), TypeError, r"alpha: "),
    ("tied optimum", lambda: mm.optimal_indices(mm.data.fig3(variant="tight").X[:, ::-1] * 0 + 1, np.ones(3), np.ones(2)),
     ValueError, r"sequence 0 has two tokens tied"),
    ("fig1 variant", lambda: mm.data.fig1(variant="c"), ValueError, r"variant: expected 'a'"),
    ("fig4 C", lambda: mm.data.fig4(-1), ValueError, r"C: must be a finite positive"),
    ("random T", lambda: mm.data.random_instance(3, 1, 4, seed=0), ValueError, r"T: must be >= 2"),
    ("infeasible selection", lambda: mm.att_svm([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]], [1]), ValueError,
     r"alpha: .*infeasible.*sequence 0"),
    # issue 22, cause 7: numpy drops a mask on conversion, so the masked values were used
    ("X masked", lambda: mm.optimal_indices(masked(X, (0, 1, 2)), Y, v), ValueError,
     r"^X: masked arrays .* index \(0, 1, 2\)"),
    ("p0 masked", lambda: mm.gd(X, Y, v, masked(p, (1,)), 3, 0.1), ValueError, r"^p0: masked"),
    ("alpha masked", lambda: mm.att_svm(X, masked(np.zeros(3, int), (2,))), ValueError, r"^alpha: masked"),
    ("sets masked", lambda: mm.head_attention(X, p, sets=masked(np.ones((3, 7), bool), (0, 0))),
     ValueError, r"^sets: masked"),
    ("softmax masked", lambda: mm.softmax(masked(np.zeros(3), (0,))), ValueError, r"^a: masked"),
    # issue 22, cause 6: errors that blamed the wrong argument or named none
    ("least_distance tol 2", lambda: mm.least_distance(np.eye(2), [1.0, 1.0], feasibility_tol=2),
     ValueError, r"^feasibility_tol: expected a number in \(0, 1\)"),
    ("least_distance tol 1e-300", lambda: mm.least_distance([[1.0, 0.0], [-1.0, 0.0]], [1.0, 1.0],
                                                            feasibility_tol=1e-300),
     mm.IllConditionedError, r"^G, h: .*feasibility_tol = 1e-300"),
    ("nn labels", lambda: mm.nn.logistic_risk(mm.nn.PromptAttention(3), X, [1.0, 0.0, 1.0]),
     ValueError, r"^Y: labels must be -1 or \+1, found 0\.0$"),
    ("nn model", lambda: mm.nn.logistic_risk(None, X, Y), TypeError, r"^model: expected a PromptAttention"),
    # the nuclear-norm W-SVM: the Frobenius one's errors, and its own
    # (since issue 41 "spectral", "l1", "linf" and numbers q >= 1 are norms: test_svm_norms.py)
    ("w_svm norm unknown", lambda: mm.w_svm(X, [0, 0, 0], queries=Q, norm="trace"), ValueError,
     r"^norm: expected one of \('frobenius', 'nuclear', 'spectral', 'l1', 'linf'\) or a number "
     r"q >= 1 \(the l_q norm, entrywise\), got 'trace'"),
    ("w_svm norm None", lambda: mm.w_svm(X, [0, 0, 0], queries=Q, norm=None), TypeError, r"^norm: expected a name"),
    ("w_svm_problem norm", lambda: mm.svm.w_svm_problem(X, [0, 0, 0], queries=Q, norm="l2"), ValueError,
     r"^norm: expected one of"),
    ("nuclear queries wrong shape", lambda: mm.w_svm(X, [0, 0, 0], queries=np.ones((2, 3)), norm="nuclear"),
     ValueError, r"^queries: expected shape \(3,\) or \(3, 3\), got \(2, 3\)"),
    ("nuclear queries NaN", lambda: mm.w_svm(X, [0, 0, 0], queries=np.where(Q == 1.0, np.nan, Q), norm="nuclear"),
     ValueError, r"^queries: non-finite value at index \(0, 0\)"),
    ("nuclear zero query", lambda: mm.w_svm(X, [0, 0, 0], queries=np.zeros(3), norm="nuclear"), ValueError,
     r"^queries: the query vector is zero"),
    ("nuclear X NaN", lambda: mm.w_svm(nan_X, [0, 0, 0], queries=Q, norm="nuclear"), ValueError,
     r"^X: non-finite value at index \(1, 2, 0\)"),
    ("nuclear infeasible", lambda: mm.w_svm(X, [1, 1, 1], queries=Q, norm="nuclear"), ValueError,
     r"^alpha: W-SVM is infeasible: in sequence 1 token 1 .*convex hull"),
    ("nuclear solver", lambda: mm.w_svm(X, [0, 0, 0], queries=Q, norm="nuclear", solver="exact"), ValueError,
     r"^solver: expected one of"),
    # keys W^T x too large for the multipliers: named "X, W" when W sets the scale (was "X"
    # alone: issue 22 review, F10)
    ("W at 1e200", lambda: mm.check_selection(*FIG1B, [0], W=FIG1B_W * 1e200), ValueError,
     r"^X, W: the Lagrange multipliers scale like"),
    ("X at 1e200 without W", lambda: mm.att_svm(FIG1B[0] @ FIG1B_W * 1e200, [0]), ValueError,
     r"^X: the Lagrange multipliers scale like"),
    # cvxpy/Clarabel on data far from unit scale: a RuntimeError naming the data argument
    # (was cvxpy's raw SolverError, naming nothing: issue 22 review, F9)
    ("cvxpy on X at 1e100", lambda: mm.att_svm([[[1e100, 0.0], [0.0, 1e100]]], [0], solver="cvxpy"),
     RuntimeError, r"^X: cvxpy/Clarabel failed .* solver='fast'"),
    # ... and the argument that was scaled (issue 22 re-review: uniform scales were blamed by
    # the spread of the sequences' sizes, a coin toss, and a shared query never)
    ("cvxpy, w_svm, X at 1e100", lambda: mm.w_svm(np.asarray(X) * 1e100, [0, 0, 0], queries=Q,
                                                  solver="cvxpy"),
     RuntimeError, r"^X: cvxpy/Clarabel"),
    ("cvxpy, w_svm, shared query at 1e100", lambda: mm.w_svm(X, [0, 0, 0], queries=Q[0] * 1e100,
                                                            solver="cvxpy"),
     RuntimeError, r"^queries: cvxpy/Clarabel"),
    ("cvxpy on R at 1e100", lambda: mm.v_svm([[1e100, 0.0], [0.0, 1e100]], [1, -1], solver="cvxpy"),
     RuntimeError, r"^R: cvxpy/Clarabel failed"),
    ("nuclear W beyond float64", lambda: mm.w_svm(X * 1e200, [0, 0, 0], queries=Q * 1e200, norm="nuclear"),
     ValueError, r"^X: the largest entry of the constraint matrix .* overflows float64"),
    ("w_svm differences overflow", lambda: mm.w_svm([[[1e308, 0.0], [-1e308, 1.0]]], [0], queries=[1.0, 0.0]),
     ValueError, r"^X: the differences x_\{i,alpha_i\} - x_it of sequence 0 overflow float64"),
    ("nuclear differences overflow",
     lambda: mm.w_svm([[[1e308, 0.0], [-1e308, 1.0]]], [0], queries=[1.0, 0.0], norm="nuclear"),
     ValueError, r"^X: the differences x_\{i,alpha_i\} - x_it of sequence 0 overflow float64"),
]

#: Token 1 of sequence 0 lies between tokens 0 and 2 (the convex hull); scaled by 1e-13 it is
#: 1e-13 from token 0, which an absolute tolerance called a duplicate of the selected token.
COLLINEAR = np.array([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]], [[0.0, 0.0], [0.0, 1.0], [3.0, 0.0]]])


@given(k=st.integers(-300, 300))
@settings(max_examples=20, deadline=None, derandomize=True)
def test_an_infeasible_selection_is_explained_alike_at_every_scale(k):
    """Bug caught (issue 22, cause 6): at scale 1e-13 a token in the convex hull was explained as
    "a duplicate of the selected token" (an absolute 1e-12 on key differences), and near 1e200
    the squares of the differences overflowed. The explanation must not depend on the scale."""
    c = 10.0 ** k
    with pytest.raises(ValueError, match=r"^alpha: .*token 1 .*\(its key lies in the convex hull"):
        mm.att_svm(COLLINEAR * c, [1, 2])
    with pytest.raises(ValueError, match=r"^alpha: .*token 1 .*\(token 0 has the same key"):
        mm.att_svm(COLLINEAR[:, [0, 0, 2]] * c, [1, 2])


def masked(a, index):
    """``a`` as a numpy masked array with the entry at ``index`` masked."""
    hidden = np.zeros(np.shape(a), bool)
    hidden[index] = True
    return np.ma.masked_array(a, mask=hidden)


def test_a_masked_array_with_nothing_masked_is_its_data():
    """Bug caught: every masked array refused, or its data replaced by the fill value."""
    data = np.ma.masked_array(X, mask=np.zeros(X.shape, bool))
    np.testing.assert_array_equal(mm.scores(data, Y, v), mm.scores(X, Y, v))


@pytest.mark.parametrize("name,call,error,message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_a_clear_error(name, call, error, message):
    with pytest.raises(error, match=message):
        call()


TRAINERS = {  # each trainer with its hyper-parameters replaced by keyword overrides
    "gd": lambda **kw: mm.gd(X, Y, v, p, **({"steps": 3, "lr": 0.1, "W": W, "normalized": True} | kw)),
    "gd_stack": lambda **kw: mm.gd_stack(X[None], Y[None], v, p, **({"steps": 3, "lr": 0.1, "W": W,
                                                                      "normalized": True} | kw)),
    "gd_W": lambda **kw: mm.gd_W(X, Y, v, np.eye(3), p + 1.0, **({"steps": 3, "lr": 0.1, "normalized": True} | kw)),
    "gd_KQ": lambda **kw: mm.gd_KQ(X, Y, v, np.eye(3), np.eye(3), p + 1.0,
                                   **({"steps": 3, "lr": 0.1, "normalized": True} | kw)),
    "gd_joint": lambda **kw: mm.gd_joint(X, Y, v, p, **({"steps": 3, "lr": 0.1, "W": W,
                                                           "normalized": True} | kw)),
}
EPS = {"gd": ["eps"], "gd_stack": ["eps"], "gd_W": ["eps"], "gd_KQ": ["eps"], "gd_joint": ["eps_v", "eps_p"]}
BAD_HYPER = [  # (argument, value, error): each must be rejected by every trainer
    ("steps", 0, ValueError), ("steps", -2, ValueError), ("steps", 2.5, TypeError), ("steps", True, TypeError),
    ("lr", 0.0, ValueError), ("lr", -0.1, ValueError), ("lr", np.nan, ValueError), ("lr", np.inf, ValueError),
    ("lr", "0.1", TypeError), ("loss", "hinge", ValueError), ("loss", 3, TypeError),
    ("eps", 0.0, ValueError), ("eps", -1e-12, ValueError), ("eps", np.nan, ValueError), ("eps", None, TypeError),
]


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("argument, value, error", BAD_HYPER, ids=[f"{a}={b!r}" for a, b, _ in BAD_HYPER])
def test_every_trainer_rejects_each_bad_hyper_parameter(trainer, argument, value, error):
    """Replaces a meta-test that counted its own list. Bug caught: one of the training
    loops dropping a validation (e.g. a negative lr or a zero eps accepted and run)."""
    for name in EPS[trainer] if argument == "eps" else [argument]:
        with pytest.raises(error, match=rf"^{name}: "):
            TRAINERS[trainer](**{name: value})


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_every_trainer_accepts_the_defaults_it_is_checked_against(trainer):
    """The calls above are valid apart from the one bad argument (so each error is that one's)."""
    TRAINERS[trainer]()


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("name,call,cause", [
    ("gd", lambda: mm.gd(X * 1e10, Y, v, np.ones(3) * 1e300, 3, 0.1), r"the start p0"),
    ("gd_W", lambda: mm.gd_W(X * 1e10, Y, v, np.eye(3) * 1e300, np.ones(3), 3, 0.1), r"the start W0"),
    ("gd_joint", lambda: mm.gd_joint(X * 1e10, Y, v, np.ones(3) * 1e300, 3, 0.1, normalized=True),
     r"the start p0"),
    ("gd_joint", lambda: mm.gd_joint(X * 1e160, -np.ones(3), v, np.zeros(3), 3, 0.1, normalized=False),
     r"reduce the scale of X or v"),
    ("gd_KQ", lambda: mm.gd_KQ(X * 1e10, Y, v, np.eye(3) * 1e150, np.eye(3) * 1e150, np.ones(3), 3, 0.1),
     r"the start K0, Q0"),
])
def test_an_overflow_names_its_cause_not_lr(engine, name, call, cause, monkeypatch):
    """Bug caught (issue 22, cause 6): lr was blamed ("lr = 0.1 is too large") at step 0, before
    lr acts, when the start's logits left float64 (p0 or W0 near 1e300 on keys near 1e10) or when
    the gradient's entries, bounded by 2 max|gamma| max|k| = 2e320 here, cannot be represented
    whatever the iterate (X * 1e160, so that both the scores and the keys are about 1e160)."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    if engine == "compiled":
        pytest.importorskip("numba")
    with pytest.raises(ValueError, match=rf"^{name}: the gradient at step 0 .*{cause}"):
        call()


@pytest.mark.parametrize("engine", ["torch", "compiled"])
def test_normalized_gd_whose_gradient_overflows_steps_or_names_its_cause(engine, monkeypatch):
    """X * 1e160, Y = -1: scores and keys near 1e160, so the gradient's entries reach about 1e320
    (not representable) while its direction is. Both engines take each normalized step along
    that direction (checked against a reference that contracts keys and scores divided by 1e160,
    to 1e-12): the compiled kernel hands the call to the torch loop's scaled step.
    Bugs caught: the torch engine refusing a step whose direction is representable (issue 22
    review, F6, and the gap noted with cause 6); the compiled engine refusing it (at step 0,
    blaming the scale of X), so that the outcome depended on the engine (issue 38)."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    Xc, Yc, steps, lr = np.asarray(X) * 1e160, -np.ones(3), 3, 1.0
    if engine == "compiled":
        pytest.importorskip("numba")
    run = mm.gd(Xc, Yc, v, np.zeros(3), steps, lr, normalized=True)
    K = np.asarray(X)  # keys / 1e160 (W = I: gd was called without W)
    gamma = Yc[:, None] * (K @ v)  # scores / 1e160
    p = np.zeros(3)
    for _ in range(steps):
        logits = (K * 1e160) @ p
        s = np.exp(logits - logits.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        z = np.sum(s * gamma, axis=1) * 1e160
        slope = -1 / (1 + np.exp(np.minimum(z, 700)))  # logistic l'(z), of size 1 or exp(-z)
        u = np.einsum("i,it,itd->d", slope, s * (gamma - (z / 1e160)[:, None]), K)
        # one-hot attention after the first step: u = 0, and g / (||g|| + eps) is no step
        p = p - lr * u / max(np.linalg.norm(u), 1e-300)
    np.testing.assert_allclose(run.p[-1, 0], p, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(run.p[1, 0]), lr, rtol=1e-12)  # a full step


@pytest.mark.parametrize("engine", ["torch", "compiled"])
def test_normalized_joint_gd_whose_p_gradient_overflows_steps_along_its_direction(engine,
                                                                                 monkeypatch):
    """X * 1e160, Y = -1 (as above) for gd_joint: dL/dp reaches about 1e320 (not representable),
    dL/dv about 1e160, both directions are. Each normalized step is checked against a reference
    that contracts the scores and keys divided by 1e160 for p, and the tokens themselves for v.
    Bug caught: the joint loop's scaled retry took its power of two out of the loss's weights
    (about 1/n here), not out of the logit gradient, so the retry overflowed again and gd_joint
    refused the step ("reduce the scale of X or v") that gd takes (issue 38: the retry written
    once, for every parameterization)."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    if engine == "compiled":
        pytest.importorskip("numba")
    Xc, Yc, steps, lr, eps = np.asarray(X) * 1e160, -np.ones(3), 3, 1.0, 1e-12
    run = mm.gd_joint(Xc, Yc, v, np.zeros(3), steps, lr, normalized=True)
    K, n = np.asarray(X), len(Yc)  # keys / 1e160 (W = I)
    vk, pk = np.array(v, dtype=float), np.zeros(3)
    for _ in range(steps):
        gamma = Yc[:, None] * (K @ vk)  # scores / 1e160
        logits = (K * 1e160) @ pk
        s = np.exp(logits - logits.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        z = np.sum(s * gamma, axis=1) * 1e160
        with np.errstate(over="ignore"):
            slope = -1 / (1 + np.exp(z)) / n  # (1/n) l'(z), logistic
        g_v = np.einsum("i,it,itd->d", slope * Yc, s, Xc)  # about 1e160: finite
        u = np.einsum("i,it,itd->d", slope, s * (gamma - (z / 1e160)[:, None]), K)  # / 1e320
        vk = vk - lr * g_v / (np.linalg.norm(g_v / 1e160) * 1e160 + eps)  # (no squares of 1e160)
        pk = pk - lr * u / max(np.linalg.norm(u), 1e-300)
    np.testing.assert_allclose(run.v[-1, 0], vk, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(run.p[-1, 0], pk, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(run.p[1, 0]), lr, rtol=1e-12)  # a full step


def test_logistic_risk_of_the_layer_takes_arrays():
    """Bug caught (issue 22, cause 6): a numpy Y raised numpy's own TypeError (ndarray * Tensor)."""
    layer = mm.nn.PromptAttention(3, p=[0.4, -1.2, 0.3], v=v, W=W)
    import torch

    expected = mm.nn.logistic_risk(layer, torch.tensor(X), torch.tensor(Y)).item()
    assert mm.nn.logistic_risk(layer, X, Y).item() == expected
    assert expected == pytest.approx(mm.risk(X, Y, v, [0.4, -1.2, 0.3], W=W), rel=1e-14)
