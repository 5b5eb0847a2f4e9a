"""Sphinx extension of this book (loaded through `sphinx: local_extensions` in _config.yml).

One module per concern; each module's docstring says what it does and why:

* :mod:`booksite.failures` -- a failing chapter is reported at the end of the build (the
  chapter, the failing cell, its traceback, `_build/html/reports/<chapter>.err.log`), and the
  build exits non-zero; a cell over the time limit reads "timed out after N s in cell k".
* :mod:`booksite.kernels` -- chapter kernels on local sockets, shut down without a SIGINT, and an
  output poller that ends quietly when a timeout closed its channel (no misleading tracebacks
  in the log); the private members of nbclient and jupyter_client it patches, and why.
* :mod:`booksite.times` -- the `{chapter-times}` directive: measured execution times.
* :mod:`booksite.pages` -- each inline script once, no `fontawesome.js`, 256-colour PNGs,
  figures whose smallest text stays at least 9 CSS px (scrolling sideways on a phone when
  needed) and open full size on a click, math in search snippets.
* :mod:`booksite.search` -- search results ranked by section: a page's or section's title, a
  definition or a defined term that matches comes first, linked to its anchor, with a snippet
  from that section (``_static/book-search-index.js``, ``book-search.js``).
* :mod:`booksite.apidoc` -- the library reference: docstrings in the book's convention
  (``name : shapes and meaning``) as RST definition lists.
* :mod:`booksite.pdf` -- the single-page build that `make pdf` prints.
* :mod:`booksite.launch` -- the exported plain notebooks published with the site
  (``notebooks/``); the .ipynb download, Binder, JupyterHub and Colab buttons hand them out.
* :mod:`booksite.release` -- the book's version (pyproject.toml's) on every page.
* :mod:`booksite.corrections` -- the record of every printed number and verdict
  (``_build/html/_static/numbers.json``) and the "Updates and corrections" page against the previous release.
"""
from __future__ import annotations

from sphinx.application import Sphinx

from .apidoc import docstring_sections
from .corrections import setup_corrections
from .failures import report_failures
from .kernels import quiet_kernels
from .launch import launch_exported_notebooks, publish_notebooks
from .pdf import html_writers_for_singlehtml
from .release import set_version
from .search import setup_search
from .pages import (add_static, add_templates, box_figures, dedupe_scripts, legible_figures,
                    palette_images, redirect_page, search_page_assets, explorer_assets,
                    explorer_frames)
from .times import ChapterTimes, ChapterTimesTransform, chapter_times_node, pages_with_times


def setup(app: Sphinx) -> dict:
    quiet_kernels()
    app.setup_extension("sphinx.ext.autodoc")
    app.connect("autodoc-process-docstring", docstring_sections)
    app.add_node(chapter_times_node)
    app.add_directive("chapter-times", ChapterTimes)
    app.add_post_transform(ChapterTimesTransform)
    app.connect("env-updated", pages_with_times)
    app.connect("config-inited", add_templates)
    app.connect("config-inited", set_version)
    setup_corrections(app)
    setup_search(app)
    app.connect("builder-inited", add_static)
    app.connect("builder-inited", html_writers_for_singlehtml)
    app.add_css_file("booksite.css")
    app.add_js_file("scroll-hints.js", defer="defer")
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("html-page-context", search_page_assets)
    app.connect("html-page-context", explorer_frames, priority=400)  # before explorer_assets
    app.connect("html-page-context", explorer_assets)
    app.connect("html-page-context", legible_figures)
    app.connect("html-page-context", launch_exported_notebooks, priority=600)  # after the theme
    app.connect("doctree-resolved", box_figures)
    app.connect("build-finished", palette_images)
    app.connect("build-finished", redirect_page, priority=400)  # before sphinx-external-toc's
    app.connect("build-finished", publish_notebooks)
    app.connect("build-finished", report_failures)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
