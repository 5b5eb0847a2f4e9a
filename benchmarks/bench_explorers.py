"""Interactive latency: the time of one slider move of every live explorer, computed and drawn.

Each explorer is built exactly as its chapter builds it (the list of tests/lib/test_explorers.py),
on one thread (Binder gives a reader about one core: torch.set_num_threads(1), which the compiled
GD engine follows too) with matplotlib's Agg backend. One update is: set a control to a new value,
let the widget call the explorer's function (it computes and draws a new figure), render the
figure's canvas. For each explorer and control the median over the control's values is reported; the bar
is 150 ms for every update's median. Exits 1 if an explorer is slower.
"""
import contextlib
import io
import statistics
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import maxmargin as mm  # noqa: E402
from maxmargin.book import ch02, ch03, ch05, ch06, explore  # noqa: E402

BAR_MS = 150.0
MOVES = 5  # values per control, spread over its range
WARM_UP_S = 5.0  # seconds between showing an explorer and the first slider move


def chapter_02_explorer():
    import ipywidgets

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
    "06 joint training": ch06.joint_explorer,
}


def values(control) -> list:
    """MOVES settings across a control's range (a slider's, or a dropdown's options)."""
    if getattr(control, "options", None):
        return [o[1] if isinstance(o, tuple) else o for o in control.options][:MOVES]
    if hasattr(control, "max"):  # on the slider's own grid of steps, as a reader moves it
        grid = np.linspace(control.min, control.max, MOVES + 2)[1:-1]
        grid = control.min + np.round((grid - control.min) / control.step) * control.step
        if type(control).__name__ == "FloatLogSlider":
            grid = control.base ** grid
        return [float(np.round(x, 10)) for x in grid]
    return [not control.value, control.value]


def update_ms(widget, control, value) -> tuple[float, float]:
    """(wall, CPU) milliseconds of one update: moving ``control`` to ``value`` (the widget then
    calls the explorer's function, which computes and draws) and rendering the figure."""
    plt.close("all")
    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):  # display() outside a notebook prints
        control.value = value
    figures = [plt.figure(number) for number in plt.get_fignums()]
    for fig in figures + [getattr(widget, "figure", None)] * hasattr(widget, "figure"):
        fig.canvas.draw()
    return 1000 * (time.perf_counter() - start), 1000 * (time.process_time() - cpu)


def main() -> int:
    torch.set_num_threads(1)
    print("bench_explorers: one update = move a control, compute, draw, render (Agg, 1 thread); "
          f"median over {MOVES} values per control; bar {BAR_MS:.0f} ms", flush=True)
    slow = []
    for name, build in EXPLORERS.items():
        widget = build()
        time.sleep(WARM_UP_S)  # what a reader takes to reach the slider: background caches fill
        controls = [c for c in widget.kwargs_widgets if hasattr(c, "value")
                    and type(c).__name__ != "fixed"]
        update_ms(widget, controls[0], values(controls[0])[-1])  # first move: layout, caches
        for control in controls:
            wall, cpu = zip(*[update_ms(widget, control, value) for value in values(control)])
            median = statistics.median(cpu)
            print(f"   {name:20s} {control._kwarg:10s} median {median:5.0f} ms CPU "
                  f"(max {max(cpu):4.0f}), {statistics.median(wall):5.0f} ms wall", flush=True)
            if median > BAR_MS:
                slow.append(f"{name} ({control._kwarg}): {median:.0f} ms")
    if slow:
        print("FAIL: updates slower than the bar: " + "; ".join(slow) + ".")
        return 1
    print(f"PASS: every explorer's median update is at most {BAR_MS:.0f} ms on one thread.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
