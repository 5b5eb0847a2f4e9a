"""Explorers: live ipywidgets versions for Jupyter/Binder and their static twins for the site.

Each explorer is one drawing function ``draw(ax, **params)`` used twice: by :func:`live`, which wires
it to sliders in a running kernel, and by :func:`small_multiples` or :func:`animation`, which
precompute a sweep so the static site says the same thing with no kernel and no JavaScript CDN.
Chapter-specific drawing functions live below, one section per chapter.
"""
from __future__ import annotations

from typing import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np

from . import plots


def live(draw: Callable, width: float = 5.0, height: float = 4.0, **controls):
    """An ``ipywidgets.interactive`` that redraws ``draw(ax, **params)`` as the controls move.

    ``controls`` are ipywidgets (or anything ``interactive`` accepts) keyed by parameter name.
    """
    import ipywidgets

    def redraw(**params):
        fig, (ax,) = plots.panels(width=width, height=height)
        draw(ax, **params)
        plt.show()

    return ipywidgets.interactive(redraw, **controls)


def small_multiples(draw: Callable, settings: Sequence[dict], ncols: int = 3, width: float = 3.4,
                    height: float = 3.0, titles: Sequence[str] | None = None):
    """The static twin: one panel per parameter setting, ``draw(ax, **setting)`` in each."""
    nrows = int(np.ceil(len(settings) / ncols))
    fig, axes = plots.panels(ncols, nrows, width=width, height=height)
    for k, ax in enumerate(axes):
        if k >= len(settings):
            ax.set_visible(False)
            continue
        draw(ax, **settings[k])
        if titles is not None:
            ax.set_title(titles[k])
    return fig


def animation(draw: Callable, settings: Sequence[dict], width: float = 5.0, height: float = 4.0,
              interval: int = 200):
    """The static twin as a self-contained JavaScript animation (``to_jshtml``), one frame a setting."""
    from matplotlib.animation import FuncAnimation
    from IPython.display import HTML

    fig, (ax,) = plots.panels(width=width, height=height)

    def frame(k):
        ax.clear()
        draw(ax, **settings[k])
        return ()

    anim = FuncAnimation(fig, frame, frames=len(settings), interval=interval, blit=False)
    html = HTML(anim.to_jshtml(default_mode="once"))
    plt.close(fig)
    return html


# --- chapter 01: the attention model -----------------------------------------------------------

# --- chapter 02: locally-optimal tokens --------------------------------------------------------

# --- chapter 03: gradient descent to the SVM ---------------------------------------------------

# --- chapter 04: regularization paths ----------------------------------------------------------

# --- chapter 05: joint training ----------------------------------------------------------------
