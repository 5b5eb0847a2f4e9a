"""Chapter 01 helpers in maxmargin.model and maxmargin.book, against independent references."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import maxmargin as mm  # noqa: E402
from maxmargin.book import explore, landscape, plots  # noqa: E402


def reference_risk(X, Y, v, W, p):
    """Logistic risk written out directly (no library code): softmax, margin, log1p."""
    logits = X @ (W @ p)
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    margin = Y * np.sum(s * (X @ v), axis=1)
    return float(np.mean(np.log1p(np.exp(-margin))))


def reference_optimal_risk(X, Y, v):
    return float(np.mean(np.log1p(np.exp(-np.max(Y[:, None] * (X @ v), axis=1)))))


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_risk_gap_grid_matches_direct_evaluation():
    inst = mm.data.fig2()
    p1, p2, gap = landscape.excess_risk_on_plane(inst.X, inst.Y, inst.v, W=inst.W, extent=(-2, 3, -1, 4),
                                      resolution=7)
    assert p1.shape == p2.shape == (7,) and gap.shape == (7, 7)
    lstar = reference_optimal_risk(inst.X, inst.Y, inst.v)
    for j in (0, 3, 6):
        for k in (1, 4, 6):
            p = np.array([p1[k], p2[j], 0.0])
            expected = reference_risk(inst.X, inst.Y, inst.v, inst.W, p) - lstar
            assert abs(gap[j, k] - expected) < 1e-13
    assert np.all(gap > 0)


@pytest.mark.parametrize("extent", [(1, 0, 0, 1), (0, 1, 0), (0, 1, 0, np.inf)])
def test_risk_gap_grid_rejects_bad_extent(extent):
    inst = mm.data.fig1(variant="a")
    with pytest.raises(ValueError, match="extent"):
        landscape.excess_risk_on_plane(inst.X, inst.Y, inst.v, W=inst.W, extent=extent)


def test_risk_gap_grid_rejects_bad_resolution():
    inst = mm.data.fig1(variant="a")
    with pytest.raises(ValueError, match="resolution"):
        landscape.excess_risk_on_plane(inst.X, inst.Y, inst.v, W=inst.W, resolution=1)


def test_excess_risk_along_rays_matches_direct_evaluation():
    inst = mm.data.fig2()
    fig, (ax,) = plots.panels()
    U = np.array([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    radii = np.array([0.0, 1.5, 4.0])
    _, gaps = plots.excess_risk_along_rays(ax, inst.X, inst.Y, inst.v, U, W=inst.W, radii=radii)
    lstar = reference_optimal_risk(inst.X, inst.Y, inst.v)
    for k, u in enumerate(U / np.linalg.norm(U, axis=1, keepdims=True)):
        for m, R in enumerate(radii):
            assert abs(gaps[k, m] - (reference_risk(inst.X, inst.Y, inst.v, inst.W, R * u) - lstar)) < 1e-13
    assert len(ax.lines) == 2


def test_excess_risk_along_rays_rejects_zero_direction():
    inst = mm.data.fig2()
    fig, (ax,) = plots.panels()
    with pytest.raises(ValueError, match="directions"):
        plots.excess_risk_along_rays(ax, inst.X, inst.Y, inst.v, np.zeros((1, 3)), W=inst.W)


def test_attention_bars_heights_and_errors():
    fig, (ax,) = plots.panels()
    s = np.array([0.5, 0.3, 0.2])
    plots.attention_bars(ax, s, optimal=0)
    heights = [patch.get_height() for patch in ax.patches]
    assert np.allclose(heights, s)
    with pytest.raises(ValueError, match="s:"):
        plots.attention_bars(ax, np.ones((2, 2)))
    with pytest.raises(ValueError, match="labels"):
        plots.attention_bars(ax, s, labels=["a"])


def test_loss_curves_draw_values_and_derivatives():
    fig, axes = plots.panels(ncols=2)
    x = np.linspace(-2, 2, 9)
    plots.loss_curves(axes, x=x)
    assert np.allclose(axes[0].lines[0].get_ydata(), np.log1p(np.exp(-x)))
    assert np.allclose(axes[1].lines[0].get_ydata(), -1 / (1 + np.exp(x)))
    assert np.allclose(axes[0].lines[2].get_ydata(), -x)
    with pytest.raises(ValueError, match="axes"):
        plots.loss_curves(axes[:1])


def test_prompt_plane_gaps_and_attention():
    inst = mm.data.fig1(variant="a")
    points = np.array([[0.0, 2.0], [3.0, -1.0]])
    fig, plane, bars = explore._prompt_plane_layout(2)
    grid = landscape.excess_risk_on_plane(inst.X, inst.Y, inst.v, W=inst.W, resolution=11)
    gaps = explore.draw_prompt_plane(plane, bars, inst, points, grid=grid)
    lstar = reference_optimal_risk(inst.X, inst.Y, inst.v)
    for point, gap, ax in zip(points, gaps, bars):
        p = np.r_[point, 0.0]
        assert abs(gap - (reference_risk(inst.X, inst.Y, inst.v, inst.W, p) - lstar)) < 1e-13
        logits = inst.X[0] @ (inst.W @ p)
        s = np.exp(logits - logits.max())
        assert np.allclose([b.get_height() for b in ax.patches], s / s.sum())


def test_prompt_plane_rejects_bad_points_and_sequence():
    inst = mm.data.fig1(variant="a")
    grid = landscape.excess_risk_on_plane(inst.X, inst.Y, inst.v, W=inst.W, resolution=5)
    with pytest.raises(ValueError, match="points"):
        explore.prompt_plane(inst, np.zeros((2, 3)), grid=grid)
    with pytest.raises(ValueError, match="sequence"):
        explore.prompt_plane(inst, np.zeros((1, 2)), grid=grid, sequence=3)


def test_prompt_explorer_is_interactive():
    ipywidgets = pytest.importorskip("ipywidgets")
    widget = explore.prompt_explorer(mm.data.fig1(variant="a"))
    assert isinstance(widget, ipywidgets.interactive)
    assert {c.description for c in widget.children[:2]} == {"angle (deg)", "norm"}
