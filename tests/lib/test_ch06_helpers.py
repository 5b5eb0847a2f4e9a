"""Chapter 06 helpers: the moved Fig. 3 instance, the joint SVMs, the joint-path panel.

References are independent of the code under test: closed forms worked out by hand for the
Fig. 3 family r_3 = (0.5, c), the cvxpy/Clarabel formulation, and a torch autograd loop of joint
normalized GD written in this file.
"""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import maxmargin as mm  # noqa: E402
from maxmargin.book import ch06, plots  # noqa: E402
from roundoff import attention_terms, logit_size, one_thread, step_atol  # noqa: E402

ALPHA = [1, 1, 1]


def full_svm_closed_form(c):
    """ATT-SVM of the family for c in [0.6, 2]: tight rows p1 - p2 = 1 and 0.5 p1 + c p2 = 1."""
    p2 = 0.5 / (c + 0.5)
    return np.array([1.0 + p2, p2])


def test_fig3_moved_reproduces_both_paper_panels():
    np.testing.assert_array_equal(mm.data.fig3_moved(1.0).X, mm.data.fig3(variant="tight").X)
    np.testing.assert_array_equal(mm.data.fig3_moved(1.5).X, mm.data.fig3(variant="relaxed").X)
    inst = mm.data.fig3_moved(1.3)
    assert inst.X.shape == (3, 2, 2) and inst.X[2, 1].tolist() == [0.5, 1.3]
    np.testing.assert_array_equal(inst.v0, [-1.0, 0.0])
    np.testing.assert_array_equal(inst.p0, [[0.0, -1.0]])


@pytest.mark.parametrize("bad, error", [(0.0, ValueError), (-1.0, ValueError),
                                        (np.nan, ValueError), ("1", TypeError)])
def test_fig3_moved_rejects_bad_c(bad, error):
    with pytest.raises(error, match="c"):
        mm.data.fig3_moved(bad)


@pytest.mark.parametrize("c", np.linspace(0.6, 2.0, 8))
def test_joint_svms_match_closed_forms(c):
    inst = mm.data.fig3_moved(c)
    svms = mm.joint_svms(inst.X, inst.Y, ALPHA)
    np.testing.assert_allclose(svms.full.p, full_svm_closed_form(c), atol=1e-9)
    if c > 1:   # v_mm = (0, 1); sequence 3 has v-margin c > 1 and is relaxed
        np.testing.assert_allclose(svms.v.v, [0.0, 1.0], atol=1e-9)
        assert svms.v.support.tolist() == [True, True, False]
        np.testing.assert_allclose(svms.relaxed.p, [1.0, 0.0], atol=1e-9)
    else:       # sequence 3 is a support vector: relaxed = full
        assert svms.v.support[2]
        np.testing.assert_allclose(svms.relaxed.p, svms.full.p, atol=1e-9)
    if c < 1:   # rows 2 and 3 tight: v_2 - v_1 = 1, 0.5 v_1 + c v_2 = 1; sequence 1 leaves S
        v1 = (1 - c) / (c + 0.5)
        np.testing.assert_allclose(svms.v.v, [v1, 1 + v1], atol=1e-9)
        assert svms.v.support.tolist() == [False, True, True]
    np.testing.assert_array_equal(svms.relaxed.relaxed, ~svms.v.support)


@pytest.mark.parametrize("c", [0.7, 1.0, 1.5])
def test_joint_svms_agree_with_cvxpy(c):
    inst = mm.data.fig3_moved(c)
    svms = mm.joint_svms(inst.X, inst.Y, ALPHA)
    v_ref = mm.v_svm(inst.X[:, 1], inst.Y, solver="cvxpy")
    p_ref = mm.att_svm(inst.X, ALPHA, relaxed=~v_ref.support, solver="cvxpy")
    np.testing.assert_allclose(svms.v.v, v_ref.v, atol=1e-6)
    np.testing.assert_allclose(svms.relaxed.p, p_ref.p, atol=1e-6)


def test_joint_svms_v_svm_reads_the_tokens_not_the_keys():
    """Bug caught: joint_svms solving the v-SVM on the keys W^T r_i instead of the selected
    tokens r_i (the head reads the values, the raw tokens; with W = I the two agree, and every
    other joint_svms test used W = I).

    By hand, Fig. 3 family with c = 1.5 and W = diag(1, 2):
    v-SVM on r = (1, 1), (1, -1), (0.5, 1.5), Y = (1, -1, 1): v = (0, 1) (rows 1 and 2 tight,
    v = (Y_1 r_1 + Y_2 r_2) / 2, multipliers 1/2, 1/2), margin of sequence 3 is 1.5: S = {0, 1}.
    (On the keys (1, 2), (1, -2), (0.5, 3) it would be v = (0, 0.5).)
    Relaxed p-SVM on the keys, sequence 3 relaxed: p1 + 2 p2 >= 1, p1 - 2 p2 >= 1,
    0.5 p1 + 3 p2 >= 0: p = (1, 0) (p = (k_1 + k_2) / 2, multipliers 1/2, 1/2 on the key rows).
    Full ATT-SVM: rows 2 and 3 tight, p1 - 2 p2 = 1, 0.5 p1 + 3 p2 = 1: p = (1.25, 0.125),
    multipliers (0.921875, 0.65625) >= 0, and row 1 gives 1.5 >= 1."""
    inst = mm.data.fig3_moved(1.5)
    svms = mm.joint_svms(inst.X, inst.Y, ALPHA, W=np.diag([1.0, 2.0]))
    np.testing.assert_allclose(svms.v.v, [0.0, 1.0], atol=1e-9)
    assert svms.v.support.tolist() == [True, True, False]
    np.testing.assert_allclose(svms.relaxed.p, [1.0, 0.0], atol=1e-9)
    assert svms.relaxed.relaxed.tolist() == [False, False, True]
    np.testing.assert_allclose(svms.full.p, [1.25, 0.125], atol=1e-9)


def test_joint_svms_rejects_bad_selection():
    inst = mm.data.fig3_moved(1.5)
    with pytest.raises(ValueError, match="alpha"):
        mm.joint_svms(inst.X, inst.Y, [1, 1, 2])


def autograd_joint_step(X, Y, v, p, lr, eps_v, eps_p):
    """One step of joint normalized GD written from scratch: torch autograd of the logistic
    risk, W = I, from (v, p). Returns the next v and p and the rounding bound of each update
    (roundoff.step_atol, from the terms of the two gradients at (v, p))."""
    X = torch.tensor(X, dtype=torch.float64)
    Y = torch.tensor(Y, dtype=torch.float64)
    v = torch.tensor(v, dtype=torch.float64, requires_grad=True)
    p = torch.tensor(p, dtype=torch.float64, requires_grad=True)
    attention = torch.softmax(X @ p, dim=1)                 # (n, T)
    gamma = Y[:, None] * (X @ v)                            # (n, T)
    margin = (attention * gamma).sum(dim=1)                 # Y_i f(X_i), (n,)
    risk = torch.nn.functional.softplus(-margin).mean()
    grad_v, grad_p, weight = torch.autograd.grad(risk, (v, p, margin))
    with torch.no_grad():
        v_next = v - lr * grad_v / (grad_v.norm() + eps_v)
        p_next = p - lr * grad_p / (grad_p.norm() + eps_p)
    L = logit_size(X, p)
    terms_v = attention_terms(weight, attention, 0 * gamma, 1 + 0 * margin, Y[:, None, None] * X)
    atol_v = step_atol(v, lr, terms_v, L, grad_v.norm().item(), eps_v)
    atol_p = step_atol(p, lr, attention_terms(weight, attention, gamma, margin, X), L,
                       grad_p.norm().item(), eps_p)
    return v_next.detach().numpy(), p_next.detach().numpy(), atol_v, atol_p


@pytest.mark.parametrize("c", [1.0, 1.5])
def test_joint_run_matches_an_autograd_loop(c):
    """The chapter's runs (joint_run with the paper's constants) against an independent loop,
    step by step: from each of the run's iterates the loop's step gives the next to within the
    step's rounding bound (roundoff.py). With eps_p = 1e-19 the p-step is g / ||g|| for a
    gradient that shrinks along the run, so whole 119-step trajectories would compare rounding
    amplified by how ill-determined the late directions are."""
    inst, run, svms = ch06.joint_run(c, steps=119)
    assert run.p.shape == (120, 1, 2) and run.v.shape == (120, 1, 2)
    np.testing.assert_array_equal(run.v[0, 0], [-1.0, 0.0])
    np.testing.assert_array_equal(run.p[0, 0], [0.0, -1.0])
    with one_thread():
        for k in range(119):
            v, p, atol_v, atol_p = autograd_joint_step(inst.X, inst.Y, run.v[k, 0], run.p[k, 0],
                                                       lr=0.1, eps_v=1e-9, eps_p=1e-19)
            np.testing.assert_allclose(run.v[k + 1, 0], v, rtol=0, atol=atol_v, err_msg=f"v {k}")
            np.testing.assert_allclose(run.p[k + 1, 0], p, rtol=0, atol=atol_p, err_msg=f"p {k}")
    expected = [1.0, 0.0] if c > 1 else [4 / 3, 1 / 3]      # hand-computed SVMs
    np.testing.assert_allclose(svms.relaxed.p, expected, atol=1e-9)
    with pytest.raises(ValueError, match="steps"):
        ch06.joint_run(c, steps=0)


def test_joint_panel_angles_and_drawing():
    fig, (ax,) = plots.panels()
    gd, relaxed, full = ch06.joint_panel(ax, c=2.0, steps=199, legend=True)
    assert abs(gd) < 0.5 and relaxed == pytest.approx(0.0, abs=1e-9)
    p = full_svm_closed_form(2.0)
    assert full == pytest.approx(np.degrees(np.arctan2(p[1], p[0])), abs=1e-7)
    assert "c = 2" in ax.get_title()
    assert len(ax.get_legend().get_texts()) == 5
    plt.close(fig)


def test_joint_paths_draws_window_and_rejects_bad_input():
    fig, (ax,) = plots.panels()
    path = np.cumsum(np.full((20, 2), 0.3), axis=0)
    out = ch06.joint_paths(ax, path, path[:, ::-1], [1, 0], [0, 1], X=np.zeros((3, 2, 2)),
                            full_dir=[1.25, 0.25])
    assert out is ax
    assert ax.get_xlim() == (-2.0, 15.0) and ax.get_ylim() == (-3.0, 12.0)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "full ATT-SVM" in labels and len(labels) == 5
    with pytest.raises(ValueError, match="p_path"):
        ch06.joint_paths(ax, path, path[:, :1], [1, 0], [0, 1])
    with pytest.raises(ValueError, match="v_dir"):
        ch06.joint_paths(ax, path, path, [1, 0], [0, 0])
    with pytest.raises(ValueError, match="X"):
        ch06.joint_paths(ax, path, path, [1, 0], [0, 1], X=np.zeros((3, 2)))
    plt.close(fig)
