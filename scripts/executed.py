"""The executed chapters of this checkout: each notebook page executed once, reused downstream.

`make test` executes every notebook page once (tests/chapters, the way a reader runs it: the
exported notebook, outside the repository). That run is saved here, under
``_build/executed/<docname>.ipynb``: the page as :func:`bookutils.read_notebook` reads it, with
the outputs of that run, and a fingerprint of what produced them. Downstream steps take the
outputs from here instead of executing the page again:

* the ``-W`` book build of tests/site (:func:`jupyter_cache`: myst-nb's ``cache`` mode finds
  every page in a cache written from these notebooks, so the build executes nothing);
* the glued numbers of the exported notebooks, Binder's notebooks and the course packs
  (:func:`export.glue_values`).

A saved run is used only while its fingerprint matches: the SHA-256 of the page's source, of
every file of ``lib/``, ``pyproject.toml`` and ``constraints.txt`` (the pins). Edit the chapter
or the library, and :func:`load` returns None, so the caller executes the page afresh: a stale number is never
reused. ``make book`` does not read this store: it always executes every page.
"""
from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

import nbformat

from bookutils import ROOT, source_path

# Where runs are saved, relative to the checkout; tests/portability.py points it elsewhere so
# that runs under other arithmetic settings never reach the book build.
STORE = os.environ.get("BOOK_EXECUTED_STORE", "_build/executed")
KEY = "executed"          # the notebook metadata key of a saved run


def fingerprint(docname: str, root: Path = ROOT) -> str:
    """SHA-256 of the page's source, the library's files and the pins (hex string)."""
    digest = hashlib.sha256()
    inputs = [source_path(docname, root), root / "pyproject.toml", root / "constraints.txt",
              *sorted(p for p in (root / "lib").rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts
                      and ".egg-info" not in str(p))]
    for path in inputs:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _path(docname: str, root: Path) -> Path:
    return root / STORE / f"{docname}.ipynb"


def save(docname: str, executed: nbformat.NotebookNode, seconds: float, *, how: str,
         root: Path = ROOT) -> Path:
    """Save one successful execution of ``docname``: its notebook with outputs (cells as
    :func:`bookutils.read_notebook` gives them), the wall ``seconds`` and ``how`` it ran."""
    nb = nbformat.from_dict(executed)
    nb.metadata[KEY] = {"fingerprint": fingerprint(docname, root), "seconds": round(seconds, 2),
                        "how": how, "recorded": time.strftime("%Y-%m-%dT%H:%M:%S")}
    path = _path(docname, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    nbformat.write(nb, partial)
    partial.replace(path)      # readers never see half a file
    return path


def load(docname: str, root: Path = ROOT) -> nbformat.NotebookNode | None:
    """The saved execution of ``docname``, or None when there is none or its page, library or
    pins changed since (the fingerprint differs)."""
    path = _path(docname, root)
    if not path.is_file():
        return None
    nb = nbformat.read(path, as_version=4)
    if nb.metadata.get(KEY, {}).get("fingerprint") != fingerprint(docname, root):
        return None
    return nb


def with_outputs(source: nbformat.NotebookNode, ran: nbformat.NotebookNode,
                 skip: int = 0) -> nbformat.NotebookNode:
    """``source`` with the outputs of ``ran``, a notebook whose code cells are those of
    ``source`` after ``skip`` extra leading code cells (the export's install cell).

    Raises ValueError when the code of the two differs: outputs are never pinned to other code.
    """
    nb = nbformat.from_dict(source)
    mine = [c for c in nb.cells if c.cell_type == "code"]
    theirs = [c for c in ran.cells if c.cell_type == "code"][skip:]
    if [c.source for c in mine] != [c.source for c in theirs]:
        raise ValueError("the executed notebook's code cells differ from the page's")
    for cell, done in zip(mine, theirs):
        cell.outputs = done.get("outputs", [])
        cell.execution_count = done.get("execution_count")
    return nb


def jupyter_cache(docnames: list[str], cache: Path, root: Path = ROOT) -> list[str]:
    """Write a fresh jupyter-cache at ``cache`` holding the saved runs of ``docnames``, for
    myst-nb's ``cache`` execution mode; returns the docnames that have no current saved run
    (the build executes those itself)."""
    import shutil

    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    store = get_cache(str(cache))
    missing = []
    for docname in docnames:
        nb = load(docname, root)
        if nb is None:
            missing.append(docname)
            continue
        seconds = nb.metadata[KEY]["seconds"]
        store.cache_notebook_bundle(
            CacheBundleIn(nb, str(source_path(docname, root)),
                          data={"execution_seconds": seconds}),
            check_validity=False, overwrite=True)
    return missing


def reusing_config(root: Path, cache: Path) -> Path:
    """The book's _config.yml with one change, for a build that executes nothing: myst-nb's
    ``cache`` mode reading the jupyter-cache at ``cache`` (scripts/executed.py writes it from
    the chapter stage's runs); and the local extension's folder made absolute. Written next to
    the cache; returns its path."""
    config = (root / "_config.yml").read_text()
    config, count = re.subn(r"^(  execute_notebooks:) force$",
                            rf"\1 cache\n  cache: {cache}", config, flags=re.M)
    assert count == 1, "_config.yml has no `execute: execute_notebooks: force` line"
    # Jupyter Book resolves local extensions against the config file's folder.
    config, count = re.subn(r"^(    booksite:) _ext\b", rf"\1 {root / '_ext'}", config, flags=re.M)
    assert count == 1, "_config.yml has no `local_extensions: booksite: _ext` line"
    path = cache.parent / "_config.yml"
    path.write_text(config)
    return path
