"""Sphinx extension of this book (loaded through `sphinx: local_extensions` in _config.yml).

What it does, and why:

* **A failing chapter is reported at the end of the build.** _config.yml lets myst-nb carry on
  after a failing cell (`raise_on_error: false`), so every chapter is tried. At the end, for each
  chapter whose execution failed, this extension writes `_build/html/reports/<chapter>.err.log`
  (the chapter, the failing cell's source and its Python traceback, without terminal colours),
  prints the same summary as the last lines of the build log, and makes the build exit non-zero,
  with or without -W. Every failing chapter of the run is reported, each once. A cell over the
  time limit reads "timed out after N s in cell k of chapter X". Reports of chapters that now
  succeed are deleted.
* **A timeout reads as a timeout.** When a cell times out while it still prints, nbclient closes
  the kernel's channels under its own output poller, which then died with a ZMQError (or an
  AssertionError on IPC sockets) printed as "Task exception was never retrieved" before the
  build's summary: a second, misleading traceback. The poller now ends quietly when its channel
  was closed under it (the timeout itself is reported in the summary).
* **Chapter kernels log nothing that looks like an error.** ipykernel warns "Kernel is running
  over TCP without encryption" for every kernel nbclient starts, and jupyter_client interrupts
  (SIGINT) each kernel before shutting it down, which now and then lands while the kernel still
  handles its last message and logs "ERROR | KeyboardInterrupt caught in kernel". A reader of
  the build log takes both for failures. The build's kernels use local sockets (IPC), which the
  network cannot reach and which do not warn, and are shut down without the interrupt (the
  shutdown request, then SIGTERM and SIGKILL if needed, still stop a kernel that hangs).
* **Each inline script once.** With Sphinx 7.4, inline scripts that extensions add after the
  builder starts are registered twice (once with filename None, once with ''), so every page
  declared sphinx-thebe's `const THEBE_JS_URL` twice, a console error. Duplicates are dropped.
* **Measured chapter times.** The `{chapter-times}` directive (used in the running appendix)
  becomes a table of each executed page's wall time, as myst-nb measured it in this build (or in
  the build that last executed the page), so the book states measured times, not guesses.
* **Lighter pages.** pydata-sphinx-theme loads `fontawesome.js` (1.5 MB) on every page only so
  that sites can add custom icons; the book adds none and the theme's icons come from its
  stylesheet's webfonts, so `templates/layout.html` drops that script. The figures' PNGs are
  stored as 256-colour palettes (matplotlib's line plots use a few thousand anti-aliasing
  shades; the palette version looks the same and is about a third of the size). Together they
  keep every chapter page, with everything it loads, under 3 MB (tests/site/test_browser.py).
* **Binder opens a plain notebook.** The launch button of sphinx-book-theme opens the page's
  source, a MyST Markdown file that JupyterLab shows as raw MyST (or, with jupytext, as a
  notebook whose prose is full of `{glue:text}` placeholders). On Binder, `postBuild` exports
  every notebook page to `notebooks/<name>.ipynb` (scripts/make_notebooks.py: plain Markdown,
  numbers filled in), and the Binder and JupyterHub launch URLs are pointed at that file.
* **Phone-width layout and search snippets.** `booksite.css` (all pages) lets wide figures keep
  a legible height at phone width and scroll sideways in their own box; `search-snippets.js`
  (search page) shows math in search results as text instead of raw TeX delimiters.
"""
from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
TEMPLATES = Path(__file__).parent / "templates"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
WIDE_ASPECT = 1.9          # width / height from which a figure is treated as multi-panel
SOURCE_LINES = 12          # lines of the failing cell shown in the summary
TRACEBACK_LINES = 40       # last lines of the kernel traceback shown in the summary


# ----------------------------------------------------------------------------- failing chapters

def _failures(app: Sphinx) -> list[tuple[str, dict]]:
    from myst_nb.sphinx_ import NbMetadataCollector

    data = NbMetadataCollector.get_doc_data(app.env)
    return [(docname, meta["exec_data"]) for docname, meta in sorted(data.items())
            if docname in app.env.all_docs and meta.get("exec_data")
            and not meta["exec_data"].get("succeeded", True)]


def _source_file(app: Sphinx, docname: str) -> Path:
    return Path(app.env.doc2path(docname))


def _relative(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` when inside it, else absolute."""
    relative = os.path.relpath(path, base)
    return str(path) if relative.startswith("..") else relative


def _split_error(text: str) -> tuple[str, str, str]:
    """(kind, cell source, kernel traceback) from the error string that nbclient raised."""
    for name in ("CellTimeoutError", "CellExecutionError", "DeadKernelError"):
        at = text.rfind(f"{name}: ")
        if at >= 0:
            message = text[at + len(name) + 2:]
            break
    else:
        return "Error", "", "\n".join(text.strip().splitlines()[-TRACEBACK_LINES:])
    if name == "CellExecutionError":
        # "An error occurred while executing the following cell:\n---\n<source>\n---\n\n<tb>"
        parts = re.split(r"^-{10,}$", message, maxsplit=2, flags=re.M)
        if len(parts) == 3:
            return name, parts[1].strip("\n"), parts[2].strip("\n")
        return name, "", message.strip()
    if name == "CellTimeoutError":
        # "A cell timed out ... after N seconds ... preview of the cell contents:\n---\n<src>\n---"
        parts = re.split(r"^-{10,}$", message, maxsplit=2, flags=re.M)
        first = message.strip().splitlines()[0] if message.strip() else "the cell timed out"
        source = parts[1].strip("\n") if len(parts) >= 2 else ""
        return name, source, first
    return name, "", message.strip()


def _line_of(source_text: str, cell: str) -> int | None:
    """1-based line of the chapter file where the cell's code starts (None if not found)."""
    lines = [line for line in cell.splitlines() if line.strip()]
    if not lines:
        return None
    at = source_text.find("\n".join(cell.splitlines()[:3]))
    if at < 0:
        at = source_text.find(lines[0])
    return None if at < 0 else source_text.count("\n", 0, at) + 1


def _cell_number(source_text: str, line: int | None) -> int | None:
    """1-based number of the code cell whose code starts at ``line`` (None if unknown): the
    number of code-cell directives above that line, as Jupyter numbers cells (`Cell In[k]`)."""
    if line is None:
        return None
    above = source_text.splitlines()[:line - 1]
    count = sum(1 for text in above if re.match(r"^\s*(`{3,}|:{3,})\{code-cell\}", text))
    return count or None


def _last_error_line(traceback: str) -> str:
    for line in reversed(traceback.splitlines()):
        if re.match(r"^\w[\w.]*(Error|Exception|Exit|Interrupt|Warning)\b", line.strip()):
            return line.strip()
    lines = [line for line in traceback.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def describe_failure(app: Sphinx, docname: str, exec_data: dict) -> tuple[str, str, str]:
    """(summary for the log, full report, one closing line) for a chapter that failed."""
    path = _source_file(app, docname)
    chapter = _relative(path, Path(app.srcdir))
    raw = ANSI.sub("", exec_data.get("traceback") or exec_data.get("error") or "")
    kind, source, traceback = _split_error(raw)
    text = path.read_text(encoding="utf8") if path.exists() else ""
    line = _line_of(text, source) if source and text else None
    cell = _cell_number(text, line)
    where = chapter + (f", line {line}" if line else "")
    if kind == "CellTimeoutError":
        limit = _timeout_seconds(traceback) or app.config.nb_execution_timeout
        reason = (f"timed out after {limit} s in {f'cell {cell}' if cell else 'a cell'} of "
                  f"chapter {chapter} (the per-cell limit, `execute: timeout` in _config.yml)")
    else:
        reason = _last_error_line(traceback) or exec_data.get("error") or kind
    shown = source.splitlines()
    cut = len(shown) - SOURCE_LINES
    source_block = "\n".join("    " + s for s in shown[:SOURCE_LINES]) + (
        f"\n    ... ({cut} more lines)" if cut > 0 else "")
    tb_lines = traceback.splitlines()
    tb_block = "\n".join("    " + s for s in tb_lines[-TRACEBACK_LINES:])
    if len(tb_lines) > TRACEBACK_LINES:
        tb_block = f"    ... ({len(tb_lines) - TRACEBACK_LINES} lines above)\n" + tb_block
    report_path = _relative(_report_path(app, docname), Path.cwd())
    body = (f"Chapter {chapter} failed to execute: {reason}\n"
            f"The failing cell (at {where}):\n{source_block or '    (source not found)'}\n"
            + ("What nbclient said:" if kind == "CellTimeoutError" else "Python traceback:")
            + f"\n{tb_block}")
    summary = f"{body}\nFull report: {report_path}"
    report = (f"{body}\n\nThe full cell:\n{source}\n"
              f"\nThe error as nbclient raised it in the build:\n{raw.strip()}\n")
    closing = f"FAILED {where}: {reason}"
    return summary, report, closing


def _timeout_seconds(message: str) -> int | None:
    """The limit nbclient states ("... timed out ..., after N seconds"), if it states one."""
    found = re.search(r"after (\d+) seconds", message)
    return int(found.group(1)) if found else None


def _report_path(app: Sphinx, docname: str) -> Path:
    return Path(app.outdir, "reports", *f"{docname}.err.log".split("/"))


def report_failures(app: Sphinx, exception: Exception | None) -> None:
    """At the end of the build: write a report per failing chapter, print them, fail the build."""
    if exception is not None or app.builder.format != "html":
        return
    failures = _failures(app)
    keep = {_report_path(app, docname) for docname, _ in failures}
    reports = Path(app.outdir, "reports")
    if reports.is_dir():
        for old in reports.rglob("*.err.log"):
            if old not in keep:
                old.unlink()
    if not failures:
        return
    closings = []
    rule = "=" * 79
    for docname, exec_data in failures:
        summary, report, closing = describe_failure(app, docname, exec_data)
        path = _report_path(app, docname)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report, encoding="utf8")
        logger.error(f"a chapter failed to execute\n{rule}\n{summary}\n{rule}",
                     type="booksite", subtype="failed-chapter")
        closings.append(closing)
    noun = "chapter" if len(closings) == 1 else "chapters"
    logger.error(f"{len(closings)} {noun} failed to execute:\n" + "\n".join(closings),
                 type="booksite", subtype="failed-chapter")
    app.statuscode = 1


# ----------------------------------------------------------------------------- chapter times

TIMES_FLAG = "booksite_chapter_times"


class chapter_times_node(nodes.General, nodes.Element):
    """Placeholder for the table of execution times, filled in after all pages are read."""


class ChapterTimes(SphinxDirective):
    """`{chapter-times}`: a table of the execution time of every page with code."""

    def run(self) -> list[nodes.Node]:
        from myst_nb.sphinx_ import NbMetadataCollector

        NbMetadataCollector.set_doc_data(self.env, self.env.docname, TIMES_FLAG, True)
        return [chapter_times_node()]


def _times_table(app: Sphinx, docname: str) -> nodes.Node:
    from myst_nb.sphinx_ import NbMetadataCollector

    data = NbMetadataCollector.get_doc_data(app.env)
    order = {name: i for i, name in enumerate(_toc_order(app))}
    rows = sorted(((name, meta["exec_data"]) for name, meta in data.items()
                   if meta.get("exec_data") and name in app.env.all_docs),
                  key=lambda row: (order.get(row[0], len(order)), row[0]))
    table = nodes.table(classes=["chapter-times", "colwidths-auto"])
    group = nodes.tgroup(cols=3)
    table += group
    group += [nodes.colspec(colwidth=w) for w in (60, 20, 20)]
    head = nodes.thead()
    group += head
    head += nodes.row("", *[nodes.entry("", nodes.paragraph(text=t))
                            for t in ("Page", "Seconds", "Result")])
    body = nodes.tbody()
    group += body
    for name, exec_data in rows:
        link = addnodes.pending_xref("", nodes.inline(text=name), refdoc=docname,
                                     reftarget="/" + name, reftype="doc", refdomain="std",
                                     refexplicit=False, refwarn=True)
        seconds = exec_data.get("runtime")
        result = "ran" if exec_data.get("succeeded") else f"failed ({exec_data.get('error')})"
        body += nodes.row("", nodes.entry("", nodes.paragraph("", "", link)),
                          nodes.entry("", nodes.paragraph(
                              text="-" if seconds is None else f"{seconds:.1f}")),
                          nodes.entry("", nodes.paragraph(text=result)))
    return table


def _toc_order(app: Sphinx) -> list[str]:
    """Docnames in reading order (the root, then its toctree, depth first)."""
    order, seen = [], set()

    def walk(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        order.append(name)
        for child in app.env.toctree_includes.get(name, []):
            walk(child)

    walk(app.config.root_doc)
    return order


class ChapterTimesTransform(SphinxPostTransform):
    default_priority = 8  # before the references are resolved (10)

    def run(self, **kwargs) -> None:
        for node in list(self.document.findall(chapter_times_node)):
            node.replace_self(_times_table(self.app, self.env.docname))


def _pages_with_times(app: Sphinx, env) -> list[str]:
    """After a page was executed, the pages showing the table are written again."""
    from myst_nb.sphinx_ import NbMetadataCollector

    if not NbMetadataCollector.new_exec_data(env):
        return []
    return [name for name, meta in NbMetadataCollector.get_doc_data(env).items()
            if meta.get(TIMES_FLAG)]


# ----------------------------------------------------------------------------- kernels over IPC

def _quiet_kernels() -> None:
    """Make nbclient start kernels on IPC sockets (in the Jupyter runtime folder) and shut them
    down without a SIGINT first."""
    from jupyter_client import AsyncKernelManager
    from jupyter_core.paths import jupyter_runtime_dir
    from nbclient import NotebookClient
    from traitlets import CaselessStrEnum, default

    class BookKernelManager(AsyncKernelManager):
        transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

        @default("ip")
        def _ip_default(self) -> str:
            # An absolute path: the kernel runs in the chapter's folder, the build elsewhere.
            runtime = Path(jupyter_runtime_dir())
            runtime.mkdir(parents=True, exist_ok=True)
            return str(runtime / f"book-kernel-{uuid.uuid4().hex[:12]}")

        async def _async_interrupt_kernel(self) -> None:
            if not self.shutting_down:
                await super()._async_interrupt_kernel()

    NotebookClient._kernel_manager_class_default = lambda self: BookKernelManager
    _quiet_output_poller(NotebookClient)


def _quiet_output_poller(client_class) -> None:
    """Let nbclient's IOPub poller end quietly when its channel was closed under it.

    After a cell times out (or the kernel dies), nbclient cancels the poller and closes the
    kernel's channels; a poller that had just been woken by output then reads from a closed
    socket and fails (ZMQError, or AssertionError on IPC), and asyncio prints that failure as
    "Task exception was never retrieved" with a traceback unrelated to the chapter. Failures of
    a poller whose channel is still open are raised as before.
    """
    original = client_class._async_poll_output_msg
    if getattr(original, "_booksite_quiet", False):
        return

    async def poll_output(self, parent_msg_id, cell, cell_index):
        try:
            return await original(self, parent_msg_id, cell, cell_index)
        except Exception:
            channel = getattr(self.kc, "_iopub_channel", None) if self.kc is not None else None
            if channel is None or getattr(channel, "socket", None) is None:
                return None  # closed under the poller: the timeout is reported by the summary
            raise

    poll_output._booksite_quiet = True
    client_class._async_poll_output_msg = poll_output


# ----------------------------------------------------------------------------- page assets

def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        key = (getattr(script, "filename", script) or "", getattr(script, "priority", 0),
               tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def _search_page_assets(app, pagename, templatename, context, doctree) -> None:
    if pagename == "search":
        app.add_js_file("search-snippets.js", defer="defer")


def _mark_wide_figures(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Give multi-panel figures the class `wide-figure` and a box that scrolls sideways."""
    from PIL import Image

    for image in list(doctree.findall(nodes.image)):
        uri = image.get("uri", "")
        if not uri.endswith(".png") or "://" in uri:
            continue
        path = Path(app.srcdir, uri)
        if not path.exists():
            continue
        with Image.open(path) as png:
            width, height = png.size
        if width / height < WIDE_ASPECT:
            continue
        box = nodes.container(classes=["figure-scroll"])
        image.parent.replace(image, box)  # not replace_self: it would copy the image's classes
        box += image
        image["classes"].append("wide-figure")


def _add_static(app: Sphinx) -> None:
    app.config.html_static_path.append(str(STATIC))


def _add_templates(app: Sphinx, config) -> None:
    config.templates_path.insert(0, str(TEMPLATES))


def _palette_images(app: Sphinx, exception: Exception | None) -> None:
    """Store the site's PNG figures as 256-colour palettes when that makes them smaller."""
    if exception is not None or app.builder.format != "html":
        return
    import io

    from PIL import Image

    for path in Path(app.outdir, "_images").glob("*.png"):
        with Image.open(path) as png:
            if png.mode == "P":
                continue
            rgb = png.convert("RGB")
        palette = rgb.quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                               dither=Image.Dither.NONE)
        buffer = io.BytesIO()
        palette.save(buffer, "PNG", optimize=True)
        if buffer.tell() < path.stat().st_size:
            path.write_bytes(buffer.getvalue())


# ----------------------------------------------------------------------------- launch buttons

NOTEBOOK_DIR = "notebooks"   # where postBuild writes the exported notebooks, from the repo root


def exported_notebook(pagename: str) -> str:
    """The exported notebook of a page, relative to the repository root (see postBuild)."""
    return f"{NOTEBOOK_DIR}/{pagename.rsplit('/', 1)[-1]}.ipynb"


def _launch_exported_notebooks(app, pagename, templatename, context, doctree) -> None:
    """Point the Binder and JupyterHub launch URLs of a page at its exported notebook."""
    source = Path(app.env.doc2path(pagename)).relative_to(app.srcdir).as_posix()
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            url = button.get("url", "")
            if button.get("text") in ("Binder", "JupyterHub") and source in url:
                button["url"] = url.replace(source, exported_notebook(pagename))


def setup(app: Sphinx) -> dict:
    _quiet_kernels()
    app.add_node(chapter_times_node)
    app.add_directive("chapter-times", ChapterTimes)
    app.add_post_transform(ChapterTimesTransform)
    app.connect("env-updated", _pages_with_times)
    app.connect("config-inited", _add_templates)
    app.connect("builder-inited", _add_static)
    app.add_css_file("booksite.css")
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("html-page-context", _search_page_assets)
    app.connect("html-page-context", _launch_exported_notebooks, priority=600)  # after the theme
    app.connect("doctree-resolved", _mark_wide_figures)
    app.connect("build-finished", _palette_images)
    app.connect("build-finished", report_failures)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
