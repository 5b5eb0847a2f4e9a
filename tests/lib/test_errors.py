"""Bad input gets a clear error that names the argument and the problem; nothing becomes NaN."""
import numpy as np
import pytest

import maxmargin as mm

inst = mm.data.fig2()
X, Y, v, W = inst.X, inst.Y, inst.v, inst.W
p = np.zeros(3)
nan_X = X.copy()
nan_X[1, 2, 0] = np.nan

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
]


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
