"""What a worker imports once, before it forks any child, and how it warms it up.

Both tiers that run real Python (the jail tier on the host, the Docker tier in its image)
import the usual libraries in the worker, so every forked child finds them warm, and then
do once what their first use would otherwise cost every run: sympy's caches, and
matplotlib's pyplot, Agg canvas and fonts, with the backend that saves `plt.show()`'s
figures (figures.py). Only trusted, preinstalled libraries are imported here: a package a
run asked for imports in that run. Stdlib only, apart from what it imports.

`load` does both with matplotlib's configuration and cache directories in a private
temporary directory, removed once its fonts are in memory: left where matplotlib puts them
by default (the worker's $HOME, /tmp in the container), they made every run look as if it
had left files behind, so the Docker tier cleaned up after each run and waited its full
5 s for processes that are not the run's.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator

# matplotlib's name for figures.py: the worker package's own (runner.worker on the host,
# worker in the sandbox image).
FIGURES_BACKEND = f"module://{__package__}.figures"


def load(names: Iterable[str]) -> list[str]:
    """Import each module that is there and warm up what was imported; the ones that
    imported (see the module docstring for matplotlib's directories)."""
    with _private_matplotlib_dirs():
        loaded = import_all(names)
        warm_up(loaded)
    return loaded


@contextlib.contextmanager
def _private_matplotlib_dirs() -> Iterator[None]:
    try:
        private = tempfile.mkdtemp(prefix="runner-preload-")
    except OSError:  # nowhere to write (a sealed view): matplotlib finds its own way
        yield
        return
    before = os.environ.get("MPLCONFIGDIR")
    os.environ["MPLCONFIGDIR"] = private
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MPLCONFIGDIR", None)
        else:
            os.environ["MPLCONFIGDIR"] = before
        shutil.rmtree(private, ignore_errors=True)


def import_all(names: Iterable[str]) -> list[str]:
    """Import each module that is there; the ones that imported."""
    loaded = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            continue
        loaded.append(name)
    return loaded


def warm_up(loaded: Iterable[str]) -> None:
    loaded = set(loaded)
    if "sympy" in loaded:
        import sympy

        x = sympy.Symbol("x")
        sympy.solve(x**2 - 4, x)
        sympy.simplify(sympy.sympify("(x**2 - 1)/(x - 1)"))
        sympy.factorint(2**32 + 1)
    if "matplotlib" in loaded:
        with contextlib.suppress(Exception):
            import matplotlib

            # A run that imports matplotlib afresh (not preloaded) finds it through this.
            os.environ["MPLBACKEND"] = FIGURES_BACKEND
            matplotlib.use(FIGURES_BACKEND)
            from matplotlib.backends import backend_agg

            # A run that picks Agg itself (`matplotlib.use("Agg")`, as scripts written for
            # servers do) still gets its shown figures: Agg's canvas makes this manager.
            figures = importlib.import_module(FIGURES_BACKEND.removeprefix("module://"))
            backend_agg.FigureCanvasAgg.manager_class = figures.FigureManager  # type: ignore[method-assign]
            import matplotlib.pyplot as plt

            figure, axes = plt.subplots()
            axes.plot([0, 1], [1, 0])
            axes.set_title("warm-up")
            figure.savefig(io.BytesIO(), format="png")
            plt.close(figure)
