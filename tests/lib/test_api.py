"""The library's one argument convention (CONTRIBUTING.md, "One API convention"), checked over
every public function of the core and of ``maxmargin.book``, and the loud failures that replace
old calls whose meaning the convention changed."""
from __future__ import annotations

import dataclasses
import importlib
import inspect

import numpy as np
import pytest

import maxmargin as mm

# (problem.py is the validated problem, internal: its functions take W positionally, as the kernels)
CORE = ["model", "losses", "svm", "optimality", "train", "keyquery", "paths", "heads", "traps", "data", "nn",
        "optimizers", "reference"]
BOOK = ["book.plots", "book.explore", "book.landscape", "book.ch02", "book.ch03", "book.ch04",
        "book.ch05", "book.ch06", "book.ch07", "book.ch08", "book.source"]
# the data, in their one order; X and R (the features of v_svm) share a rank, as do v, v0, head,
# and W, W0 and the factors K0, Q0 of W = K Q^T (gd_KQ; K, Q in mm.reference's one step)
DATA_RANK = {"X": 0, "R": 0, "Y": 1, "v": 2, "v0": 2, "head": 2, "W": 3, "W0": 3, "K0": 3, "Q0": 3,
             "K": 3, "Q": 3, "queries": 4}
TARGETS = {"ax", "axes", "model", "draw"}  # what a function draws into or wraps comes first
# Adam's eps is PyTorch's offset of sqrt(v) (default 1e-8; None in descend: for "adam" only),
# another concept than the normalization offset eps of the GD engines
ADAM_EPS = {"optimizers.descend", "reference.adam_step"}
FIXED_DEFAULTS = {"W": None, "loss": "logistic", "normalized": False, "eps": 1e-12, "tol": 1e-8,
                  "solver": "fast", "record_every": 1, "track": None, "seed": 0, "sets": None}


def public_functions():
    for name in CORE + BOOK:
        module = importlib.import_module(f"maxmargin.{name}")
        for attr, obj in vars(module).items():
            if inspect.isfunction(obj) and not attr.startswith("_") and obj.__module__ == module.__name__:
                yield f"{name}.{attr}", obj


FUNCTIONS = dict(public_functions())
FUNCTIONS |= {f"mm.{name}": getattr(mm, name) for name in mm.__all__  # e.g. least_distance
              if inspect.isfunction(getattr(mm, name)) and getattr(mm, name) not in FUNCTIONS.values()}


def test_the_scan_sees_the_whole_api():
    """Bug caught: a scan that silently covers nothing (a module renamed, a filter too strict)."""
    assert len(FUNCTIONS) > 100
    for name in mm.__all__:
        obj = getattr(mm, name)
        if inspect.isfunction(obj):
            assert obj in FUNCTIONS.values(), name


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_options_are_keyword_only(name):
    """Bug caught: a parameter with a default that can be passed by position, so that an old
    call ``risk(X, Y, v, p, W)`` binds W to whatever now stands fifth."""
    for p in inspect.signature(FUNCTIONS[name]).parameters.values():
        if p.default is not inspect.Parameter.empty:
            assert p.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}: {p.name} has a default"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_data_come_first_in_one_order(name):
    """Bug caught: W before the point (``risk_grad_W(X, Y, v, p, W)`` against ``risk(X, Y, v, p,
    W)``), or Y after v: a reader's positional call meaning different things in two functions."""
    positional = [p.name for p in inspect.signature(FUNCTIONS[name]).parameters.values()
                  if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    while positional and positional[0] in TARGETS:
        positional.pop(0)
    ranks = [DATA_RANK[p] for p in positional if p in DATA_RANK]
    assert ranks == sorted(ranks), f"{name}: data out of order in {positional}"
    data = [p in DATA_RANK for p in positional]
    assert data == sorted(data, reverse=True), f"{name}: an input before the data in {positional}"
    if "R" in positional:
        assert positional[0] == "R", f"{name}: R names the features of v_svm; a radius is 'radius'"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_one_name_per_concept(name):
    """Bugs caught: ``Z`` where everything else says ``queries``; a core option with another
    default here than elsewhere (the book's chapter helpers keep their chapter's settings)."""
    core = name.split(".")[0] != "book"
    for p in inspect.signature(FUNCTIONS[name]).parameters.values():
        assert p.name != "Z", f"{name}: say queries"
        if name in ADAM_EPS and p.name == "eps":
            continue
        if core and p.name in FIXED_DEFAULTS and p.default is not inspect.Parameter.empty:
            assert p.default == FIXED_DEFAULTS[p.name], f"{name}: {p.name}={p.default!r}"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_no_bare_tuples(name):
    """Bug caught: a public function declared to return a bare tuple (results are dataclasses
    or named tuples, whose fields say what each part is)."""
    annotation = str(inspect.signature(FUNCTIONS[name]).return_annotation)
    assert not annotation.startswith(("tuple", "Tuple")), f"{name} -> {annotation}"


RESULTS = [cls for cls in vars(mm).values() if isinstance(cls, type) and dataclasses.is_dataclass(cls)]


@pytest.mark.parametrize("cls", RESULTS, ids=lambda c: c.__name__)
def test_result_fields_use_the_shared_names(cls):
    """Bug caught: a result calling the risk ``loss`` (the loss function's name) again."""
    fields = {f.name for f in dataclasses.fields(cls)}
    assert "loss" not in fields, cls.__name__


def svm_results():
    X = np.array([[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [1.0, 1.0]]])
    return {"att_svm": mm.att_svm(X, [0, 0]), "set_svm": mm.set_svm(X, [[True, False], [True, False]]),
            "v_svm": mm.v_svm(np.array([[1.0, 2.0], [-3.0, 1.0]]), np.array([1.0, -1.0])),
            "w_svm": mm.w_svm(X, [0, 0], queries=np.array([1.0, 2.0]))}


@pytest.mark.parametrize("kind", ["att_svm", "set_svm", "v_svm", "w_svm"])
def test_every_svm_result_has_margin_norm_and_direction(kind):
    """Bug caught: one result storing the norm and another the margin, with one of the two
    missing or inconsistent (margin 1/||solution|| with the norm computed from the solution)."""
    result = svm_results()[kind]
    solution = {"att_svm": "p", "set_svm": "p", "v_svm": "v", "w_svm": "W"}[kind]
    value = getattr(result, solution)
    assert result.norm == pytest.approx(np.sqrt(np.sum(value ** 2)), rel=1e-14)
    assert result.margin == pytest.approx(1.0 / result.norm, rel=1e-12)
    np.testing.assert_allclose(result.direction, value / np.sqrt(np.sum(value ** 2)), rtol=1e-14)


# ----------------------------------------------------------------------------------------------
# old calls fail loudly
# ----------------------------------------------------------------------------------------------

INST = mm.data.fig1(variant="a")
X, Y, v, W = INST.X, INST.Y, INST.v, INST.W
P = np.array([1.0, 0.5, 0.0])


def test_an_old_positional_w_raises():
    """Bug caught: W (or the loss) passed by position binding silently to another parameter."""
    with pytest.raises(TypeError, match="positional"):
        mm.risk(X, Y, v, P, W)
    with pytest.raises(TypeError, match="positional"):
        mm.att_svm(X, [0, 0, 0], W)
    with pytest.raises(TypeError, match="positional"):
        mm.w_svm(X, [0, 0, 0], P)  # queries is keyword-only: alpha and queries are both vectors
    assert mm.risk(X, Y, v, P, W=2 * W) != mm.risk(X, Y, v, P, W=W)  # W matters: the test is real


def test_gd_joint_requires_normalized():
    """Bug caught: gd_joint's default flipped to gd's, silently turning old normalized runs
    into plain GD."""
    with pytest.raises(TypeError, match="normalized"):
        mm.gd_joint(X, Y, v, P, 2, 0.1, W=W)


def test_renamed_fields_name_their_new_name():
    run = mm.gd(X, Y, v, P, 2, 0.1, W=W)
    with pytest.raises(AttributeError, match=r"Trajectory\.loss was renamed Trajectory\.risk"):
        run.loss
    np.testing.assert_allclose(run.risk[0], mm.risk(X, Y, v, P, W=W), rtol=1e-12)
    path = mm.regularization_path(X, Y, v, [1.0], W=W, starts=1, steps=20)
    with pytest.raises(AttributeError, match=r"RegularizationPath\.losses was renamed .*\.risk"):
        path.losses


def test_moved_functions_say_where_they_went():
    with pytest.raises(AttributeError, match=r"maxmargin\.book\.landscape"):
        mm.excess_risk_on_plane
    with pytest.raises(AttributeError, match=r"maxmargin\.book\.landscape"):
        mm.selection_basin
    with pytest.raises(AttributeError, match="no attribute 'not_a_function'"):
        mm.not_a_function


def test_every_cosine_follows_one_rule():
    """Bugs caught: a cosine method returning NaN (RegularizationPath divided by ||u|| unchecked)
    or 0 for a zero direction, or NaN at a zero iterate; one method accepting what another
    refuses."""
    u = np.array([1.0, 0.0, 0.0])
    run = mm.gd(X, Y, v, np.zeros(3), 1, 0.1, W=W)
    assert run.cosine(u)[0, 0] == 0.0  # the start p = 0: cosine 0, as mm.cosine
    assert mm.cosine(np.zeros(3), u) == 0.0
    stack = mm.gd_stack(X[None], Y[None], v, P, 1, 0.1, W=W)
    run_W = mm.gd_W(X, Y, v, np.eye(3), P, 1, 0.1)
    path = mm.regularization_path(X, Y, v, [1.0, 2.0], W=W, starts=1, steps=20)
    zero_point = dataclasses.replace(path, points=np.zeros_like(path.points))
    assert np.all(zero_point.cosine(u) == 0.0)
    for method, zero in [(run.cosine, np.zeros(3)), (stack.cosine, np.zeros(3)),
                         (run_W.cosine, np.zeros((3, 3))), (path.cosine, np.zeros(3))]:
        with pytest.raises(ValueError, match="^direction: a zero vector has no direction"):
            method(zero)
        with pytest.raises(ValueError, match="^direction: non-finite"):
            method(np.full_like(zero, np.nan))
    np.testing.assert_allclose(path.cosine(5 * u), path.directions[:, 0], rtol=1e-14)
