"""Every chapter's live explorer builds its widgets and redraws when a control moves.

The chapters do not execute their live-explorer cells (tag ``skip-execution``: the widget would
be frozen on the static page anyway), so this is where the live versions are exercised, outside
a kernel: each ``interactive`` is built exactly as its chapter builds it, then every control is
moved to two values and the function is called again.
"""
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
