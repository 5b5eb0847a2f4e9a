"""One validation per public call, no public function called inside the core, and the checks
that the validation used to skip or duplicate (issue 19: "validate once, compute once")."""
from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
from pathlib import Path

import numpy as np
import pytest

import maxmargin as mm
from maxmargin.book import landscape
from maxmargin import _blocks, _checks, _engines, train

CORE = Path(mm.__file__).parent
INST = mm.data.fig2()
HEAD = mm.data.mixing_example(beta=1.0)
ALPHA = [0, 0, 0]   # fig2's optimal selection
P_MM = mm.att_svm(INST.X, ALPHA, W=INST.W).p


def _calls(monkeypatch, f) -> int:
    """How many times f() validates a token array X (_checks.tokens)."""
    count = {"n": 0}
    original = _checks.tokens

    def counting(*args, **kwargs):
        count["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(_checks, "tokens", counting)
    f()
    monkeypatch.setattr(_checks, "tokens", original)
    return count["n"]


X, Y, v, W = INST.X, INST.Y, INST.v, INST.W
CALLS = {
    "risk": lambda: mm.risk(X, Y, v, INST.p0, W=W),
    "excess_risk_on_plane": lambda: landscape.excess_risk_on_plane(X, Y, v, W=W, resolution=5),
    "excess_risk_on_rays": lambda: landscape.excess_risk_on_rays(X, Y, v, [[1.0, 0.0, 0.0]], W=W),
    "excess_risk_on_circle": lambda: landscape.excess_risk_on_circle(X, Y, v, 2.0, W=W, num=9),
    "regularization_path": lambda: mm.regularization_path(X, Y, v, [1.0, 2.0], W=W, steps=20),
    "local_regularization_path": lambda: mm.local_regularization_path(
        X, Y, v, [1.0, 2.0], P_MM, 30.0, W=W, steps=20),
    "check_selection": lambda: mm.check_selection(X, Y, v, ALPHA, W=W),
    "is_locally_optimal": lambda: mm.is_locally_optimal(X, Y, v, ALPHA, W=W),
    "selection_census": lambda: mm.selection_census(X, Y, v, W=W),
    "locally_optimal_indices": lambda: mm.locally_optimal_indices(X, Y, v, W=W),
    "support_tokens": lambda: mm.support_tokens(X, ALPHA, W=W),
    "trap_sets": lambda: mm.trap_sets(X, Y, v, W=W),
    "joint_svms": lambda: mm.joint_svms(X, Y, ALPHA, W=W),
    "gd": lambda: mm.gd(X, Y, v, INST.p0, 5, 0.1, W=W),
    "gd_joint": lambda: mm.gd_joint(X, Y, v, INST.p0, 5, 0.1, W=W, normalized=True),
    "gd_W": lambda: mm.gd_W(X, Y, v, np.eye(3), INST.p0[0], 5, 0.1),
    "gd_KQ": lambda: mm.gd_KQ(X, Y, v, np.eye(3), np.eye(3), INST.p0[0], 5, 0.1),
    "selection_basin": lambda: landscape.selection_basin(X, Y, v, W=W, num=3, steps=5),
    "head_predict": lambda: mm.head_predict(HEAD.X, HEAD.head, np.zeros(4), W=HEAD.W),
    "set_direction": lambda: mm.set_direction(HEAD.X, HEAD.Y, HEAD.head, W=HEAD.W),
}


@pytest.mark.parametrize("name", CALLS)
def test_every_public_call_validates_X_once(name, monkeypatch):
    """Catches a public function that hands raw arrays to another public function (before this
    test: 1949 validations of X in a 3-radius path of Fig. 2, 98 in selection_census)."""
    assert _calls(monkeypatch, CALLS[name]) == 1


def test_gd_stack_validates_each_instance_once(monkeypatch):
    M = 3
    stack = [np.stack([a] * M) for a in (X, Y, v, W)]
    assert _calls(monkeypatch, lambda: mm.gd_stack(*stack[:3], INST.p0, 5, 0.1, W=stack[3])) == M


# Calls of public functions that are boundary checks themselves: get_loss validates `loss`.
BOUNDARY_CHECKS = {"get_loss"}


def test_no_public_function_is_called_inside_the_core():
    """Every call by name inside a core module (not maxmargin.book) that resolves to a public
    function of mm (other than BOUNDARY_CHECKS) is a second validation of arrays that are
    validated already: internal code calls the private kernels."""
    public = {name: getattr(mm, name) for name in mm.__all__
              if callable(getattr(mm, name)) and not isinstance(getattr(mm, name), type)}
    found = []
    for path in sorted(CORE.glob("*.py")):
        module = importlib.import_module(f"maxmargin.{path.stem}") if path.stem != "__init__" else mm
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    name = node.func.id
                    target = getattr(module, name, None)
                    if name in public and name not in BOUNDARY_CHECKS and target is public[name]:
                        found.append(f"{path.name}:{node.lineno} {function.name} calls {name}")
    assert not found, "\n".join(found)


def test_gd_names_W_when_the_keys_overflow():
    """gd used to build its keys without the overflow check of mm.keys and then blamed lr."""
    big = np.diag([1e308, 1e308, 1.0])
    X10 = 10 * X   # entries up to 10: x^T W reaches 1e309
    assert np.abs(X10[..., :2]).max() >= 2
    for call in (lambda: mm.gd(X10, Y, v, INST.p0, 2, 0.1, W=big),
                 lambda: mm.gd_stack(X10[None], Y[None], v, INST.p0, 2, 0.1, W=big),
                 lambda: mm.gd_joint(X10, Y, v, INST.p0, 2, 0.1, W=big, normalized=True),
                 lambda: mm.keys(X10, W=big)):
        with pytest.raises(ValueError, match=r"^W: the keys k_it = W\^T x_it reach about 10\^3\d\d, beyond float64"):
            call()


def test_head_logits_beyond_float64_name_p():
    """The head's softmax of logits k^T p that overflow raises naming p (no NaN risk)."""
    with pytest.raises(ValueError, match="^p: the logits"):
        mm.head_risk(HEAD.X, HEAD.Y, HEAD.head, [1.7e308, 1.7e308, 0.0, 0.0], W=HEAD.W)


@pytest.mark.parametrize("make", [copy.copy, lambda loss: dataclasses.replace(loss, name="mine")],
                         ids=["copy", "renamed"])
def test_a_copy_of_a_builtin_loss_runs_on_the_compiled_engine(make, monkeypatch):
    """Dispatch used id(loss): a copied LOGISTIC silently ran on the slower torch loop."""
    pytest.importorskip("numba")
    monkeypatch.setenv("MAXMARGIN_ENGINE", "compiled")
    used = []
    original = _engines._descend_compiled
    monkeypatch.setattr(_engines, "_descend_compiled",
                        lambda *args, **kwargs: used.append(1) or original(*args, **kwargs))
    for builtin in (mm.LOGISTIC, mm.EXPONENTIAL, mm.CORRELATION):
        mm.gd(X, Y, v, INST.p0, 3, 0.1, W=W, loss=make(builtin))
    assert len(used) == 3


def test_a_loss_with_other_formulas_is_not_taken_for_a_builtin(monkeypatch):
    """The other way: a Loss named "logistic" with another derivative must not run the compiled
    logistic kernel (it would silently compute the built-in's gradient)."""
    halved = dataclasses.replace(mm.LOGISTIC, derivative=lambda x: 0.5 * mm.LOGISTIC.derivative(x),
                                 torch_derivative=lambda x: 0.5 * mm.LOGISTIC.torch_derivative(x))
    assert _blocks._loss_code(halved) is None
    monkeypatch.setenv("MAXMARGIN_ENGINE", "compiled")
    run = mm.gd(X, Y, v, INST.p0[0], 1, 0.1, W=W, loss=halved)
    step = run.p[0, 0] - run.p[1, 0]
    full = 0.1 * mm.risk_grad(X, Y, v, INST.p0[0], W=W)
    np.testing.assert_allclose(step, 0.5 * full, rtol=1e-12)


# Found by the independent review of the validated problem (old against new library, 12,138 calls)
@pytest.mark.parametrize("call", [
    lambda: mm.risk(X, None, None, INST.p0),
    lambda: mm.optimal_risk(X, None, None),
    lambda: mm.optimal_indices(X, None, None),
    lambda: mm.gd(X, None, None, INST.p0, 3, 0.1),
    lambda: mm.trap_sets(X, None, None),
    lambda: mm.selection_census(X, None, None),
], ids=["risk", "optimal_risk", "optimal_indices", "gd", "trap_sets", "selection_census"])
def test_a_missing_head_is_named(call):
    """Y and v both None: a TypeError naming v (a Problem without scores reached the kernels)."""
    with pytest.raises(TypeError, match="^v: expected an array of numbers, got None"):
        call()


def test_head_logits_all_below_float64_name_p():
    """Every logit of a sequence -inf (k p below -1.8e308): an error naming p, not NaN weights."""
    X1 = np.array([[[1e200], [2e200]]])
    for call in (lambda: mm.head_attention(X1, [-1e200]),
                 lambda: mm.head_predict(X1, mm.mlp_head([1.0], [[1.0]]), [-1e200])):
        with pytest.raises(ValueError, match="^p: every logit"):
            call()


def test_trajectory_cosines_name_their_direction_and_keep_broadcasting():
    run_W = mm.gd_W(X, Y, v, np.eye(3), INST.p0[0], 2, 0.1)
    with pytest.raises(TypeError, match="^direction: "):
        run_W.cosine(None)
    # A flattened (d*d,) direction is refused: the size alone matched, and a (4,) vector was
    # read as a (2, 2) matrix in an order the caller did not say (issue 38).
    with pytest.raises(ValueError, match="^direction: expected a"):
        run_W.cosine(np.eye(3).reshape(-1))
    stack = mm.gd_stack(np.stack([X, X]), np.stack([Y, Y]), v, INST.p0[:3], 3, 0.5, W=W)
    u = np.array([1.0, 0.0, 0.0])
    np.testing.assert_array_equal(stack.cosine(u[None]), stack.cosine(np.stack([u, u])))
    with pytest.raises(ValueError, match="^direction: "):
        stack.cosine(np.ones((3, 1, 3)))


def test_cone_axis_of_any_size_gives_the_same_local_path():
    """A cone axis of size 1e155 (its norm overflows) is the same cone as the unit axis."""
    radii = [1.0, 3.0]
    unit = mm.local_regularization_path(X, Y, v, radii, P_MM, 30.0, W=W, starts=2, steps=20)
    huge = mm.local_regularization_path(X, Y, v, radii, P_MM * 1e155, 30.0, W=W, starts=2, steps=20)
    np.testing.assert_allclose(huge.points, unit.points, rtol=1e-12, atol=1e-14)


def test_gd_stack_blames_X_for_empty_sequences():
    with pytest.raises(ValueError, match="^X: needs at least one sequence"):
        mm.gd_stack(np.zeros((2, 0, 3, 3)), np.ones((2, 1)), np.ones(3), np.zeros((1, 3)), 3, 0.1)
