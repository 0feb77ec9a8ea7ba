"""matplotlib's backend in a run: `plt.show()` saves every open figure as a PNG.

Code written for notebooks shows its plots with `plt.show()`; a run has no display, and
with the plain Agg canvas `show()` does nothing but warn. Jupyter-based executors turn
the shown figure into a PNG output; this backend does the same: each open figure is saved
in the run's working directory as `figure-1.png`, `figure-2.png`, ... (the next free
number) and closed, so it comes back with the run's files. Everything else is Agg's.

Selected by the workers that preload matplotlib (`matplotlib.use(BACKEND)`) and, for a
run that imports matplotlib itself, by MPLBACKEND. Imported only where matplotlib is.
"""

from __future__ import annotations

import os
from typing import Any

from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

FigureCanvas = FigureCanvasAgg


class FigureManager(FigureManagerBase):
    @classmethod
    def pyplot_show(cls, *, block: bool | None = None) -> None:
        save_open_figures()


def show(*args: Any, **kwargs: Any) -> None:
    save_open_figures()


def save_open_figures() -> list[str]:
    """Save every open figure as the next free figure-N.png, close it; the names."""
    import matplotlib.pyplot as plt

    saved = []
    number = 1
    for figure_number in plt.get_fignums():
        while os.path.lexists(f"figure-{number}.png"):
            number += 1
        name = f"figure-{number}.png"
        plt.figure(figure_number).savefig(name, format="png")
        plt.close(figure_number)
        saved.append(name)
    return saved
