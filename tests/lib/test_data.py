"""The paper's instances match the recipes in the paper notes; random generators keep their promises."""
import numpy as np
import pytest

import maxmargin as mm

# Fig. 2 first two coordinates, rounded to 4 digits, as listed in the paper notes (optimal token first).
FIG2_ROUNDED = np.array([
    [(0.7748, -0.2305), (-1.0868, 1.1697), (-1.0632, 0.5770), (-1.2527, 1.0700), (-0.4760, -0.2525), (-0.5495, -0.7705), (-0.3867, -0.3413)],
    [(0.6890, -0.0683), (-0.8500, 0.8829), (-0.9633, 1.2779), (-0.8107, 0.8313), (-0.4937, -0.5985), (-0.4121, -0.4775), (-0.4118, -0.5205)],
    [(0.9421, 0.0105), (-0.5396, 0.7062), (-1.1138, 1.1840), (-0.7420, 0.7044), (-0.5946, -0.2349), (-0.6099, -0.5960), (-0.7134, -0.2770)],
])


def test_fig2_reproduces_the_seeded_draw():
    inst = mm.data.fig2()
    np.testing.assert_allclose(inst.X[..., :2], FIG2_ROUNDED, atol=6e-5)
    gamma = inst.scores
    np.testing.assert_array_equal(gamma[:, 0], 1.0)
    np.testing.assert_array_equal(gamma[:, 1:], 0.5)  # equal non-optimal scores


@pytest.mark.parametrize("variant,scores", [("a", [1.0, 0.9, 0.9]), ("b", [1.0, 0.9, 0.0])])
def test_fig1_scores_and_starts(variant, scores):
    inst = mm.data.fig1(variant=variant)
    np.testing.assert_allclose(inst.scores[0], scores)
    assert inst.p0.shape == (6, 3) and np.all(inst.p0[:, [0, 2]] == 0)


def test_fig3_and_fig4_shapes_and_scores():
    for variant in ("tight", "relaxed"):
        inst = mm.data.fig3(variant=variant)
        assert inst.X.shape == (3, 2, 2) and inst.W is None
        np.testing.assert_array_equal(inst.X[:, 0], 0.0)
    inst = mm.data.fig4(10)
    np.testing.assert_allclose(inst.scores, [[0, 10], [0, 1]])


@pytest.mark.parametrize("seed", range(6))
def test_random_instance_is_feasible_and_has_token_zero_optimal(seed):
    inst = mm.data.random_instance(5, 4, 6, seed)
    assert np.all(inst.optimal == 0)
    assert mm.is_feasible(inst.X, inst.optimal, W=inst.W)
    result = mm.att_svm(inst.X, inst.optimal, W=inst.W)
    assert result.margin >= 0.5 - 1e-9  # the planted margin is a lower bound on the SVM margin


def test_equal_score_instances_satisfy_the_global_condition():
    inst = mm.data.random_instance(4, 5, 6, seed=1, equal_scores=True)
    gamma = inst.scores
    assert np.all(gamma[:, 1:] == gamma[:, 1:2]) and np.all(gamma[:, 0] > gamma[:, 1])


def test_generators_are_seeded():
    a, b = mm.data.gaussian_instance(3, 4, 2, seed=5), mm.data.gaussian_instance(3, 4, 2, seed=5)
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, mm.data.gaussian_instance(3, 4, 2, seed=6).X)


def test_query_instance_draws_the_follow_ups_law():
    """Unit-norm tokens, queries and head, labels in {-1, +1}, seeded. Bugs caught: tokens or
    queries not normalized (their scale would change every SVM and run of chapter 7), queries
    shared across sequences, or a draw that ignores the seed."""
    a = mm.data.query_instance(4, 3, 5, seed=7)
    Z = a.extra["queries"]
    assert a.X.shape == (4, 3, 5) and Z.shape == (4, 5)
    np.testing.assert_allclose(np.linalg.norm(a.X, axis=-1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=-1), 1.0, rtol=1e-14)
    assert abs(np.linalg.norm(a.v) - 1.0) < 1e-14 and set(a.Y) <= {-1.0, 1.0}
    assert np.linalg.matrix_rank(Z) == 4                      # one query per sequence
    b = mm.data.query_instance(4, 3, 5, seed=7)
    assert np.array_equal(a.X, b.X) and np.array_equal(Z, b.extra["queries"])
    assert not np.array_equal(a.X, mm.data.query_instance(4, 3, 5, seed=8).X)
