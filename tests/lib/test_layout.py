"""The library's layout: a lazy top level, a core that never draws, and no book names in the core.

The core modules compute; ``maxmargin.book`` draws. These tests read the source (ast) and run a
fresh interpreter, so they share no code with the library.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import maxmargin

PACKAGE = Path(maxmargin.__file__).parent
CORE = sorted(p for p in PACKAGE.glob("*.py"))
DRAWING = ("matplotlib", "ipywidgets", "IPython")
FIGURE_OR_CHAPTER = re.compile(r"(^|_)(fig|ch|chapter)_?\d", re.IGNORECASE)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a core module, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.append((node.lineno, node.module or ""))
            else:  # relative to maxmargin (core modules sit directly in the package)
                base = "maxmargin" + ("." + node.module if node.module else "")
                found.append((node.lineno, base))
                if not node.module:
                    found += [(node.lineno, f"maxmargin.{a.name}") for a in node.names]
    return found


def test_core_modules_are_found():
    names = {p.stem for p in CORE}
    assert {"model", "losses", "svm", "optimality", "train", "paths", "heads", "data", "nn",
            "traps", "__init__"} <= names


def test_core_never_imports_the_book_or_drawing_libraries():
    bad = []
    for path in CORE:
        for line, module in imported_modules(path):
            if module == "maxmargin.book" or module.startswith("maxmargin.book.") \
                    or module.split(".")[0] in DRAWING:
                bad.append(f"{path.name}:{line} imports {module}")
    assert not bad, "core modules must not draw:\n" + "\n".join(bad)


def test_core_names_do_not_name_a_figure_or_chapter():
    """The paper's instances in ``data`` (fig1, fig3_moved, ...) are the documented exception."""
    bad = []
    for path in CORE:
        if path.stem == "data":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            bad += [f"{path.name}:{node.lineno} {name}" for name in names
                    if FIGURE_OR_CHAPTER.search(name)]
    assert not bad, "core names that refer to a figure or chapter:\n" + "\n".join(bad)


def test_import_maxmargin_loads_no_drawing_library_and_no_cvxpy():
    """Nor numba: it is imported (and the kernel compiled or loaded) only when a large GD run
    first needs it, which a small run does not."""
    code = ("import maxmargin, sys; import numpy as np; "
            "maxmargin.gd(np.eye(2)[None], [1.0], [1.0, 0.0], [0.0, 0.0], 3, 0.1); "
            "print(sorted(m for m in ('matplotlib', 'ipywidgets', 'cvxpy', 'numba') "
            "if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(PACKAGE.parent)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("MAXMARGIN_ENGINE", None)  # the default engine choice ("auto"), whatever the caller set
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, timeout=1200)  # a hang guard only
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_public_api_is_declared_and_complete():
    assert len(set(maxmargin.__all__)) == len(maxmargin.__all__)
    missing = [name for name in maxmargin.__all__ if not hasattr(maxmargin, name)]
    assert not missing, f"__all__ names that maxmargin does not define: {missing}"
    assert "book" not in maxmargin.__all__
    # the book loads on first access, as the module maxmargin.book with its figures
    assert maxmargin.book.__name__ == "maxmargin.book" and callable(maxmargin.book.plots.panels)


def test_dir_shows_the_api_and_the_submodules_only():
    """No helper import (importlib, the __future__ feature `annotations`) leaks into dir(mm)."""
    import types

    extra = [name for name in dir(maxmargin) if not name.startswith("_")
             and name not in maxmargin.__all__
             and not isinstance(getattr(maxmargin, name), types.ModuleType)]
    assert not extra, f"public names outside __all__ that are not submodules: {extra}"
