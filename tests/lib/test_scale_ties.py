"""Property tests (hypothesis): tie and zero tests are relative to the data's scale (issue cause 3).

Every computation below is scale-covariant: X -> c X (or v -> c v, or X -> c X with v -> v / c,
which leaves the scores unchanged) changes no verdict (optimal tokens, ties, selections, trap
sets), and solutions scale like 1 / c. Each test compares the scaled call with an independent
computation on the unscaled data (plain loops, or the library at unit scale), for c from 1e-300
to 1e300, and names the bug it catches: an absolute tolerance (1e-12 on scores or norms), a
squared norm that under- or overflows, or an intermediate (the SVM's multipliers, 1 / c^2) that
leaves float64 although the answer does not.

Examples are few and derandomized (reproducible CI runs); ``@example`` pins the scales at which
the old code failed.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import maxmargin as mm

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True)
SCALES = st.integers(-300, 300).map(lambda k: 10.0 ** k)
MODES = st.sampled_from(["X", "v", "X/v"])  # scale X by c, v by c, or X by c and v by 1 / c


def scaled(X, v, c, mode):
    """(X, v) with the scale c applied as ``mode`` says."""
    if mode == "X":
        return X * c, v
    if mode == "v":
        return X, v * c
    return X * c, v / c


def argmax_by_loops(X, Y, v):
    """opt_i = argmax_t Y_i sum_j v_j x_itj, in plain Python, with the gap to the runner-up."""
    opt, gaps = [], []
    for i in range(X.shape[0]):
        scores = [float(Y[i]) * sum(float(a) * float(b) for a, b in zip(v, x)) for x in X[i]]
        order = sorted(range(len(scores)), key=scores.__getitem__)
        opt.append(order[-1])
        gaps.append(scores[order[-1]] - scores[order[-2]])
    return opt, gaps


INSTANCES = {
    "trap": mm.data.trap_counterexample(),
    "fig2": mm.data.fig2(),
    "gaussian": mm.data.gaussian_instance(3, 4, 3, seed=2),
}


@given(name=st.sampled_from(sorted(INSTANCES)), c=SCALES, mode=MODES)
@example(name="trap", c=1e-14, mode="v")  # the reviewer's case
@example(name="fig2", c=1e-300, mode="X")  # the reviewer's case
@SETTINGS
def test_optimal_indices_do_not_depend_on_the_scale(name, c, mode):
    """Bug caught: ``optimal_indices(X, Y, v * 1e-14)`` (or X * 1e-300) refused with "two tokens
    tied": np.isclose(..., atol=1e-12), an absolute tolerance on the scores."""
    inst = INSTANCES[name]
    opt, gaps = argmax_by_loops(inst.X, inst.Y, inst.v)
    assert min(gaps) > 1e-6  # a clear winner in every sequence of the unscaled data
    X, v = scaled(inst.X, inst.v, c, mode)
    assert mm.optimal_indices(X, inst.Y, v).tolist() == opt


def rounding_tie():
    """Sequence 0: tokens (0.1, 0.2) and (0.3, 0) score 0.1 + 0.2 and 0.3 under v = (1, 1),
    equal in exact arithmetic, one ulp apart in float64; token 2 scores 0. Sequence 1: an exact
    tie of two equal tokens."""
    X = np.array([[[0.1, 0.2], [0.3, 0.0], [0.0, 0.0]],
                  [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    return X, np.ones(2), np.ones(2)


@given(c=SCALES, mode=MODES)
@example(c=1e300, mode="X")  # a rounding tie at a large scale
@SETTINGS
def test_a_true_tie_is_a_tie_at_every_scale(c, mode):
    """Bug caught: a relative tolerance so tight (or so scaled) that a tie is missed at some
    scale, e.g. the absolute 1e-12, which misses the one-ulp tie 0.1 + 0.2 vs 0.3 once the
    scores exceed about 1e4; the error is the one of an exact tie ("tied")."""
    X0, Y, v0 = rounding_tie()
    X, v = scaled(X0, v0, c, mode)
    with pytest.raises(ValueError, match="sequence 0 has two tokens tied"):
        mm.optimal_indices(X, Y, v)
    with pytest.raises(ValueError, match="sequence 0 has two tokens tied"):
        mm.optimal_indices(X[1:], Y[1:], v)  # the exact tie alone
    trap = mm.data.trap_counterexample()
    tied = trap.X.copy()
    tied[1, 1, 2] = 1.0  # sequence 1: both tokens score 1
    Xt, vt = scaled(tied, trap.v, c, mode)
    with pytest.raises(ValueError, match="sequence 1 has two tokens tied"):
        mm.trap_sets(Xt, trap.Y, vt, W=trap.W)
    with pytest.raises(ValueError, match="tied"):
        mm.selection_census(Xt, trap.Y, vt, W=trap.W)


FIG1B = mm.data.fig1(variant="b")
CENSUS = mm.selection_census(FIG1B.X, FIG1B.Y, FIG1B.v, W=FIG1B.W)


@given(c=SCALES)
@example(c=1e-160)  # the reviewer's case: multipliers near 1e320
@SETTINGS
def test_census_does_not_depend_on_the_scale(c):
    """Bug caught: ``selection_census(X * 1e-160, Y, v * 1e160)`` refused with "the Lagrange
    multipliers scale like 1 / scale^2 and leave the range of float64", although the census
    reads only feasibility and support tokens (scale-free); so did locally_optimal_indices and
    is_locally_optimal. The reference is the census of the unscaled data (Fig. 1b: tokens 0 and
    1 locally optimal)."""
    assert CENSUS.locally_optimal == ((0,), (1,)) and CENSUS.feasible == 3
    X, v = FIG1B.X * c, FIG1B.v / c
    assert mm.selection_census(X, FIG1B.Y, v, W=FIG1B.W) == CENSUS
    assert mm.locally_optimal_indices(X, FIG1B.Y, v, W=FIG1B.W) == list(CENSUS.locally_optimal)
    assert mm.is_locally_optimal(X, FIG1B.Y, v, [1], W=FIG1B.W)


TRAP = mm.data.trap_counterexample()
[TRAP_SET] = mm.trap_sets(TRAP.X, TRAP.Y, TRAP.v, W=TRAP.W)


@given(c=SCALES)
@example(c=1e-160)  # the reviewer's case
@SETTINGS
def test_trap_sets_do_not_depend_on_the_scale(c):
    """Bug caught: ``trap_sets(X * 1e-160, Y, v * 1e160)`` returned no trap set where the
    unscaled data has one: the ATT-SVM's multipliers (1 / c^2) left float64, and that
    ValueError was read as "the complement cannot be separated". Also np.linalg.norm on the
    keys and on q (squares under- or overflow). The reference is the trap set of the unscaled
    counterexample, q = (1, 0, 0) with escape gap 2 (by hand, in test_traps.py)."""
    assert TRAP_SET.sequences == (0,) and np.allclose(TRAP_SET.q, [1.0, 0.0, 0.0])
    found = mm.trap_sets(TRAP.X * c, TRAP.Y, TRAP.v / c, W=TRAP.W)
    assert [(t.sequences, t.selection, t.minimal) for t in found] == [((0,), (1, 0), True)]
    np.testing.assert_allclose(found[0].q * c, TRAP_SET.q, rtol=1e-9, atol=1e-12)
    assert found[0].escape_gap == pytest.approx(TRAP_SET.escape_gap, rel=1e-9)


PATH_ARGS = dict(W=FIG1B.W, starts=2, steps=50)
RADII = np.array([1.0, 10.0])
AXIS = np.array([1.0, 0.3, 0.0])
GLOBAL = mm.regularization_path(FIG1B.X, FIG1B.Y, FIG1B.v, RADII, **PATH_ARGS)
LOCAL = mm.local_regularization_path(FIG1B.X, FIG1B.Y, FIG1B.v, RADII, AXIS / np.linalg.norm(AXIS),
                                     20.0, **PATH_ARGS)


def same_path(path, reference, c):
    """path (of X * c, v / c, radii / c) is reference with points and gradients rescaled."""
    np.testing.assert_allclose(path.points * c, reference.points, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(path.risk, reference.risk, rtol=1e-9)
    np.testing.assert_allclose(path.grad_norms / c, reference.grad_norms, rtol=1e-6)
    assert path.on_boundary.tolist() == reference.on_boundary.tolist()
    assert path.on_cone.tolist() == reference.on_cone.tolist()


@given(c=SCALES)
@example(c=1e-200)  # the cone axis and gradients near 1e-200
@example(c=1e100)  # SLSQP on x = q with R = 1e-100
@settings(max_examples=6, deadline=None, derandomize=True)
def test_regularization_paths_do_not_depend_on_the_scale(c):
    """Bug caught: in the path solver, np.linalg.norm of gradients (which scale like the keys)
    under- or overflowing (grad_norms 0 below keys of 1e-160, inf above 1e154, a normalized
    step g / max(||g||, 1e-300) of size 1e100), and SLSQP run on x = q for radii in [1e-100,
    1e100] (absolute tolerances of SLSQP on x: at R = 1e-100 it stopped far from the KKT
    point). X -> c X, v -> v / c, R -> R / c must give p_bar -> p_bar / c."""
    X, v = FIG1B.X * c, FIG1B.v / c
    same_path(mm.regularization_path(X, FIG1B.Y, v, RADII / c, **PATH_ARGS), GLOBAL, c)
    same_path(mm.local_regularization_path(X, FIG1B.Y, v, RADII / c, AXIS, 20.0, **PATH_ARGS),
              LOCAL, c)


@given(c=SCALES)
@example(c=1e-200)  # the reviewer's case
@SETTINGS
def test_cone_axis_does_not_depend_on_its_norm(c):
    """Bug caught: a cone axis of norm 1e-200 treated as zero, or its norm under- or
    overflowing (np.linalg.norm squares it). The reference is the path with a unit axis.
    (The current code scales the axis by its largest entry before any norm: this already
    passed before the fix of cause 3, and guards it.)"""
    path = mm.local_regularization_path(FIG1B.X, FIG1B.Y, FIG1B.v, RADII, AXIS * c, 20.0,
                                        **PATH_ARGS)
    np.testing.assert_allclose(path.points, LOCAL.points, rtol=1e-9, atol=1e-12)


MIXING = mm.data.mixing_example(beta=2.0)
IN_SETS = np.array([[True, True, False, False]] * 2)
P_FIN = mm.set_offset(MIXING.X, MIXING.Y, MIXING.head, IN_SETS, W=MIXING.W)


@given(c=SCALES)
@example(c=1e-14)  # gradients below BFGS's gtol
@SETTINGS
def test_set_offset_does_not_depend_on_the_scale_of_the_keys(c):
    """Bug caught: set_offset with W * c returned p_fin = 0 (keys below 1e-13: the gradient is
    below BFGS's absolute gtol 1e-13 at the start) or refused (keys near 1e100: the absolute
    check ||grad|| > 1e-8). The keys scale like c, so p_fin must scale like 1 / c; the reference
    is the unscaled p_fin = (0, log(0.5842 / 0.4158), 0, 0) (its docstring)."""
    assert P_FIN[1] == pytest.approx(0.3399, abs=1e-4)
    p = mm.set_offset(MIXING.X, MIXING.Y, MIXING.head, IN_SETS, W=MIXING.W * c)
    np.testing.assert_allclose(p * c, P_FIN, rtol=1e-6, atol=1e-9)
