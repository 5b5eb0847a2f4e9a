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

ALPHA = [1, 1, 1]


def full_svm_closed_form(c):
    """ATT-SVM of the family for c in [0.6, 2]: tight rows p1 - p2 = 1 and 0.5 p1 + c p2 = 1."""
    p2 = 0.5 / (c + 0.5)
    return np.array([1.0 + p2, p2])


def test_fig3_moved_reproduces_both_paper_panels():
    np.testing.assert_array_equal(mm.data.fig3_moved(1.0).X, mm.data.fig3("tight").X)
    np.testing.assert_array_equal(mm.data.fig3_moved(1.5).X, mm.data.fig3("relaxed").X)
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


def test_joint_svms_rejects_bad_selection():
    inst = mm.data.fig3_moved(1.5)
    with pytest.raises(ValueError, match="alpha"):
        mm.joint_svms(inst.X, inst.Y, [1, 1, 2])


def autograd_joint_ngd(X, Y, v0, p0, steps, lr, eps_v, eps_p):
    """Joint normalized GD written from scratch: torch autograd of the logistic risk, W = I.

    Returns the iterates v_0..v_steps and p_0..p_steps, each (steps + 1, d).
    """
    X = torch.tensor(X, dtype=torch.float64)
    Y = torch.tensor(Y, dtype=torch.float64)
    v = torch.tensor(v0, dtype=torch.float64)
    p = torch.tensor(p0, dtype=torch.float64)
    vs, ps = [v.clone()], [p.clone()]
    for _ in range(steps):
        v.requires_grad_(True)
        p.requires_grad_(True)
        attention = torch.softmax(X @ p, dim=1)                 # (n, T)
        f = (attention * (X @ v)).sum(dim=1)                    # (n,)
        risk = torch.nn.functional.softplus(-Y * f).mean()
        grad_v, grad_p = torch.autograd.grad(risk, (v, p))
        with torch.no_grad():
            v = v - lr * grad_v / (grad_v.norm() + eps_v)
            p = p - lr * grad_p / (grad_p.norm() + eps_p)
        vs.append(v.clone())
        ps.append(p.clone())
    return torch.stack(vs).numpy(), torch.stack(ps).numpy()


@pytest.mark.parametrize("c", [1.0, 1.5])
def test_joint_run_matches_an_autograd_loop(c):
    """The chapter's runs (joint_run with the paper's constants) against an independent loop."""
    inst, run, svms = ch06.joint_run(c, steps=120)
    assert run.p.shape == (120, 1, 2) and run.v.shape == (120, 1, 2)
    v_ref, p_ref = autograd_joint_ngd(inst.X, inst.Y, [-1.0, 0.0], [0.0, -1.0], 119, lr=0.1,
                                      eps_v=1e-9, eps_p=1e-19)
    np.testing.assert_allclose(run.v[:, 0], v_ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(run.p[:, 0], p_ref, rtol=0, atol=1e-9)
    expected = [1.0, 0.0] if c > 1 else [4 / 3, 1 / 3]      # hand-computed SVMs
    np.testing.assert_allclose(svms.relaxed.p, expected, atol=1e-9)
    with pytest.raises(ValueError, match="steps"):
        ch06.joint_run(c, steps=1)


def test_joint_panel_angles_and_drawing():
    fig, (ax,) = plots.panels()
    gd, relaxed, full = ch06.joint_panel(ax, c=2.0, steps=200, legend=True)
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
