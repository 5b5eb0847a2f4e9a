"""Every chapter's live explorer builds its widgets and redraws when a control moves.

The chapters do not execute their live-explorer cells (tag ``skip-execution``: the widget would
be frozen on the static page anyway), so this is where the live versions are exercised, outside
a kernel: each ``interactive`` is built exactly as its chapter builds it, then every control is
moved to two values and the function is called again.
"""
import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import maxmargin as mm  # noqa: E402
from maxmargin.book import ch02, ch03, ch05, ch06, ch07, explore  # noqa: E402

ipywidgets = pytest.importorskip("ipywidgets")


def chapter_02_explorer():
    return explore.live(
        ch02.fig1_local_optima, width=4.6, height=4.2,
        x3_score=ipywidgets.FloatSlider(value=0.0, min=-0.5, max=1.3, step=0.05),
        x2_x=ipywidgets.FloatSlider(value=1.0, min=-1.0, max=1.5, step=0.05),
        x2_y=ipywidgets.FloatSlider(value=0.0, min=-1.0, max=1.5, step=0.05),
    )


EXPLORERS = {
    "01 prompt plane": lambda: explore.prompt_explorer(mm.data.fig1(variant="a")),
    "02 local optima": chapter_02_explorer,
    "03 score and basin": ch03.score_explorer,
    "05 loss ring": ch05.fig4_ring_explorer,
    "06 joint training": lambda: ch06.joint_explorer(steps=40),
    "07 factor width": lambda: ch07.width_explorer(steps=40),
}


def new_values(control) -> list:
    """Two other settings of a control: a slider's ends, a dropdown's last option, a flipped box."""
    if getattr(control, "options", None):
        last = list(control.options)[-1]
        return [last[1] if isinstance(last, tuple) else last]
    if hasattr(control, "max"):
        return [control.max, control.min]
    return [not control.value]


@pytest.mark.parametrize("name", sorted(EXPLORERS))
def test_live_explorer_redraws_for_every_control(name):
    widget = EXPLORERS[name]()
    assert isinstance(widget, ipywidgets.interactive)
    controls = [c for c in widget.kwargs_widgets if hasattr(c, "value")]
    assert controls, f"{name}: no controls"
    for control in controls:
        for value in new_values(control):
            control.value = value
            # interactive.update() would swallow an exception; call the function itself.
            widget.f(**{c._kwarg: c.get_interact_value() for c in widget.kwargs_widgets})
            plt.close("all")


# ----------------------------------------------------------------------------------------------
# The interactive twin (explore.interactive): frames over the product of the control values
# ----------------------------------------------------------------------------------------------

def _two_point_line(ax, *, a, b, scale=1.0):
    """A frame whose data and return value are known in closed form: the line (0, a)-(1, b)."""
    ax.plot([0.0, 1.0], [scale * a, scale * b])
    ax.set_title(f"a={a}, b={b}")
    return [10 * a + b, scale]


def _twin_spec(html):
    import json
    import re

    found = re.search(r'<script type="application/json" class="mm-data">(.*?)</script>', html,
                      re.S)
    return json.loads(found.group(1))


def test_interactive_twin_frame_k_is_the_setting_k_of_the_product_order():
    import base64
    import io
    import itertools

    from PIL import Image

    controls = {"a": [1, 2, 3], "b": [0.5, 4.0]}
    html = explore.interactive(_two_point_line, controls, fixed={"scale": 2.0}, width=2.0,
                               height=1.5, dpi=40).data
    spec = _twin_spec(html)
    assert 'class="mm-explorer"' in html and " hidden " in html   # shown only by explorer.js
    assert [c["name"] for c in spec["controls"]] == ["a", "b"]
    assert [c["values"] for c in spec["controls"]] == [[1, 2, 3], [0.5, 4.0]]
    # a range input per control, positions 0 .. len - 1, and an output with the first value
    assert html.count('type="range"') == 2
    assert 'max="2"' in html and 'max="1"' in html and "<output" in html
    expected = list(itertools.product([1, 2, 3], [0.5, 4.0]))     # the last control fastest
    assert len(spec["frames"]) == len(expected)
    for frame, (a, b) in zip(spec["frames"], expected):
        assert frame["params"] == {"a": a, "b": b}
        assert frame["result"] == [10 * a + b, 2.0]                # the fixed argument reached draw
        png = Image.open(io.BytesIO(base64.b64decode(frame["src"].split(",", 1)[1])))
        assert png.size == (80, 60)                                # 2 x 1.5 inches at 40 dpi
    # frames drawn into one reused figure: each shows its own setting only (axes cleared)
    assert not plt.get_fignums()      # its figure closed (the inline backend would show it)
    hashes = [f["hash"] for f in spec["frames"]]
    assert len(set(hashes)) == len(hashes)
    fig, ax = plt.subplots(figsize=(6, 5))        # another size: the hash ignores the layout
    _two_point_line(ax, a=2, b=4.0, scale=2.0)
    assert explore.frame_fingerprint(fig) == spec["frames"][3]["hash"]
    plt.close("all")


def test_frame_fingerprint_changes_with_the_data_not_with_ulps():
    fig, ax = plt.subplots()
    ax.plot([0.0, 1.0], [0.3, 0.7])
    base = explore.frame_fingerprint(fig)
    ax.lines[0].set_ydata([0.3, 0.7 * (1 + 1e-15)])
    assert explore.frame_fingerprint(fig) == base
    ax.lines[0].set_ydata([0.3, 0.7001])
    assert explore.frame_fingerprint(fig) != base
    ax.lines[0].set_ydata([0.3, 0.7])
    bar = ax.bar([0], [0.5])[0]
    with_bar = explore.frame_fingerprint(fig)
    assert with_bar != base
    bar.set_height(0.6)                          # attention bars: their heights are the data
    assert explore.frame_fingerprint(fig) != with_bar
    plt.close("all")


def test_interactive_twin_refuses_what_it_cannot_replay():
    with pytest.raises(ValueError, match="^draw:"):
        explore.interactive(lambda ax, a: None, {"a": [1, 2]})
    with pytest.raises(ValueError, match="^controls:"):
        explore.interactive(_two_point_line, {})
    with pytest.raises(ValueError, match="^controls:"):
        explore.interactive(_two_point_line, {"a": [1, 1], "b": [0]})
    with pytest.raises(ValueError, match="^fixed:"):
        explore.interactive(_two_point_line, {"a": [1], "b": [0]}, fixed={"a": 2})


def test_prompt_frame_draws_the_prompt_and_its_excess_risk():
    """Chapter 1's frame: the excess risk at p = norm (cos, sin)(angle), against an own
    computation (logistic loss, one sequence, softmax written out)."""
    import numpy as np

    inst = mm.data.fig1(variant="a")
    fig, axes = explore.prompt_frame_figure()
    gap = explore.prompt_frame(axes, angle=60.0, norm=3.0)
    p = np.zeros(inst.X.shape[-1])
    p[:2] = 3.0 * np.cos(np.pi / 3), 3.0 * np.sin(np.pi / 3)
    X, y = inst.X[0], inst.Y[0]
    logits = X @ inst.W @ p
    s = np.exp(logits - logits.max())
    s /= s.sum()
    f = (X @ inst.v) @ s
    best = max(y * (X @ inst.v))
    expected = np.log1p(np.exp(-y * f)) - np.log1p(np.exp(-best))
    np.testing.assert_allclose(gap, [expected], rtol=1e-10)
    plane = axes[0]
    marked = [c.get_offsets()[0] for c in plane.collections if len(c.get_offsets()) == 1]
    assert any(np.allclose(m, p[:2]) for m in marked)
    plt.close("all")


def test_a_frame_whose_title_grows_is_laid_out_again():
    """The layout is solved once, at the first frame; a later frame with a taller title was
    cut at the top (chapter 2's twin lost its first title line in 3 of 27 frames). Each frame's
    titles and labels must lie inside the figure."""
    from maxmargin.book import explore

    def draw(ax, lines):
        ax.plot([0, 1], [0, 1])
        ax.set_title("\n".join(f"line {k}" for k in range(lines)))
        return lines

    cut = [result for fig, result in explore.render_frames(draw, [{"lines": 1}, {"lines": 4}],
                                                           width=3.0, height=2.5)
           if explore._titles_cut(fig)]
    assert cut == []


def test_the_prompt_twin_map_holds_every_prompt():
    """Chapter 1's twin marks prompts of norm up to 8 at every angle: each must fall on the map
    (7 of the 32 were off the live explorer's default map)."""
    from maxmargin.book import explore

    settings = [{"angle": a, "norm": 8.0} for a in range(-180, 180, 45)]
    for fig, _ in explore.render_frames(explore.prompt_frame, settings,
                                        figure=explore.prompt_frame_figure):
        plane = fig.axes[0]
        x0, x1 = sorted(plane.get_xlim())
        y0, y1 = sorted(plane.get_ylim())
        marked = [line for line in plane.get_lines() + plane.collections
                  if getattr(line, "get_offsets", None) is not None and len(line.get_offsets())]
        points = np.concatenate([np.asarray(c.get_offsets()) for c in marked]) if marked else []
        assert len(points), "no prompt is marked"
        inside = [(x0 <= x <= x1 and y0 <= y <= y1) for x, y in points]
        assert all(inside), (x0, x1, y0, y1, points)


# ----------------------------------------------------------------------------------------------
# The twin's frames on a phone: at most 4.6 in wide, text of 9 pt or more (issue 40)
# ----------------------------------------------------------------------------------------------

def _small_text_frame(ax, *, k):
    """A frame with text under 9 pt of every kind: 6-pt ticks, a 7-pt note, an 8-pt legend;
    and a 12-pt title."""
    ax.plot([0.0, 1.0], [0.0, k], label="line")
    ax.tick_params(labelsize=6)
    ax.text(0.2, 0.5, "seven", fontsize=7)
    ax.legend(fontsize=8)
    ax.set_title("twelve", fontsize=12)
    return k


def _texts(fig):
    from matplotlib.text import Text

    return {t.get_text(): t.get_fontsize() for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip()}


def test_twin_frames_fit_a_phone_column_with_legible_text():
    """A 390-px viewport gives the frame about 340 CSS px: a frame wider than 4.6 in (331 px at
    72 px per inch) was scaled down there, so its 9-pt text fell under 9 px (chapters 5 and 6:
    6-inch frames, 7 px); and text under 9 pt (chapter 7's 7-pt legend) was under 9 px anyway.
    Catches a frame not narrowed, text (ticks, legend, notes) left small, a smallest-font
    record that is not the drawn one, and the recorded size or shown width not the drawn ones."""
    import base64
    import io
    import re

    from PIL import Image

    html = explore.interactive(_small_text_frame, {"k": [1.0, 2.0]}, width=6.0, height=3.0,
                               dpi=20).data
    spec = _twin_spec(html)
    assert spec["size"] == [4.6, 3.0]                     # narrowed, the height kept
    for frame in spec["frames"]:
        assert frame["font"] == 9.0
        png = Image.open(io.BytesIO(base64.b64decode(frame["src"].split(",", 1)[1])))
        assert png.size == (92, 60)                       # 4.6 x 3 inches at 20 dpi
    # shown at 1.5 CSS px per point where the page is wide enough: 4.6 x 108, 3 x 108
    img = re.search(r'<img class="mm-frame"[^>]*>', html).group(0)
    assert 'width="497"' in img and 'height="324"' in img
    # the drawn texts: every one under 9 pt raised to 9, the larger ones kept
    for fig, _ in explore.render_frames(_small_text_frame, [{"k": 1.0}, {"k": 2.0}], width=6.0,
                                        height=3.0, max_width=4.6, min_fontsize=9):
        fig.canvas.draw()
        sizes = _texts(fig)
        assert sizes["twelve"] == 12 and sizes["seven"] == 9 and sizes["line"] == 9
        # ticks made later (the laid-out axes may hold more of them) are drawn at 9 pt too
        fig.axes[0].xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(25))
        fig.canvas.draw()
        ticks = [t for t in fig.axes[0].get_xticklabels() + fig.axes[0].get_yticklabels()
                 if t.get_text()]
        assert len(ticks) > 12 and all(t.get_fontsize() == 9 for t in ticks)
        assert fig.get_figwidth() == 4.6
    # without the limits, render_frames draws what it is given
    for fig, _ in explore.render_frames(_small_text_frame, [{"k": 1.0}], width=6.0, height=3.0):
        fig.canvas.draw()
        assert fig.get_figwidth() == 6.0 and _texts(fig)["seven"] == 7
    # a frame whose smallest text is above the floor records it (the book style's 11-pt ticks)
    spec = _twin_spec(explore.interactive(_two_point_line, {"a": [1], "b": [0.5]}, width=2.0,
                                          height=1.5, dpi=20).data)
    assert spec["size"] == [2.0, 1.5] and spec["frames"][0]["font"] == 11.0
    plt.close("all")


def _script_label_frame(ax, k):
    ax.plot([0, k], [0, 1], label="$p^{mm}$")
    ax.legend(fontsize=7)
    ax.text(0, 0, "plain", fontsize=7)


def test_twin_frames_raise_a_label_until_its_scripts_are_legible():
    """The twins' floor counts a label's superscript at the size matplotlib draws it (0.7 of the
    font, book.legibility): the legend's $p^{mm}$ is raised to 9 / 0.7 pt so that "mm" is 9 pt,
    the plain text to 9 pt. (The explorers had their own copy of the rule, which raised the
    label to 9 pt: its "mm" was drawn at 6.3 pt.) The recorded smallest text is the glyphs'."""
    for fig, _ in explore.render_frames(_script_label_frame, [{"k": 1.0}], width=3.0,
                                        height=2.0, min_fontsize=9):
        fig.canvas.draw()
        sizes = {t.get_text(): t.get_fontsize() for t in fig.findobj(matplotlib.text.Text)
                 if t.get_text().strip()}
        assert sizes["plain"] == 9
        assert abs(sizes["$p^{mm}$"] - 9 / 0.7) < 1e-9
    spec = _twin_spec(explore.interactive(_script_label_frame, {"k": [1.0]}, width=3.0,
                                          height=2.0, dpi=20).data)
    assert abs(spec["frames"][0]["font"] - explore.TWIN_MIN_FONT) < 1e-9
    plt.close("all")


def _log_axis_frame(ax, k):
    ax.semilogy([0, 1], [0.01, k])
    ax.tick_params(labelsize=7)


def test_twin_frames_raise_log_tick_labels_by_their_superscripts():
    """A log axis's tick labels ($10^{-1}$) get their text only when the figure is drawn: a rule
    applied before any draw sees empty labels, raises them to 9 pt, and their exponents are then
    drawn at 6.3 pt (chapters 5 and 7's twins recorded 7.7 pt). Bug caught: the floor applied
    before the frame is drawn once."""
    spec = _twin_spec(explore.interactive(_log_axis_frame, {"k": [10.0, 1000.0]}, width=3.0,
                                          height=2.0, dpi=20).data)
    for frame in spec["frames"]:
        assert abs(frame["font"] - explore.TWIN_MIN_FONT) < 1e-9, frame["font"]
    plt.close("all")


def test_the_prompt_twin_frame_is_a_phone_column_wide_with_the_bars_below_the_map():
    """Chapter 1's frame was 8.4 in wide (map and bars side by side): on a phone its 8-pt bar
    labels were 4.5 CSS px. Narrowed as it was, the map would be squeezed beside the bars."""
    fig, (plane, bars) = explore.prompt_frame_figure()
    assert fig.get_figwidth() <= 4.6
    fig.canvas.draw()
    assert bars[0].get_position().y1 < plane.get_position().y0
    plt.close("all")
