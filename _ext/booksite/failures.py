"""Reports of the chapters that failed to execute, at the end of the build.

**A failing chapter is reported at the end of the build.** _config.yml lets myst-nb carry on
after a failing cell (`raise_on_error: false`), so every chapter is tried. At the end, for each
chapter whose execution failed, this extension writes `_build/html/reports/<chapter>.err.log`
(the chapter, the failing cell's source and its Python traceback, without terminal colours),
prints the same summary as the last lines of the build log, and makes the build exit non-zero,
with or without -W. Every failing chapter of the run is reported, each once. A cell over the
time limit reads "timed out after N s in cell k of chapter X". Reports of chapters that now
succeed are deleted.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SOURCE_LINES = 12          # lines of the failing cell shown in the summary
TRACEBACK_LINES = 40       # last lines of the kernel traceback shown in the summary


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


def _locate(path: Path, source: str) -> tuple[int | None, int | None]:
    """(1-based line of the chapter file where the failing cell's code starts, 1-based number
    of that code cell as Jupyter numbers cells, `Cell In[k]`), or None for what is not found.

    The chapter is read by myst-nb's own reader (the one the build executed), so a
    `{code-cell}` shown inside a code block or a comment is not counted. ``source`` is the cell
    as nbclient quoted it (a timeout quotes only its first lines)."""
    if not source.strip() or not path.exists():
        return None, None
    text = path.read_text(encoding="utf8")
    if path.suffix == ".md":
        from myst_nb.core.read import read_myst_markdown_notebook

        nb = read_myst_markdown_notebook(text, add_source_map=True)
        starts = nb.metadata["source_map"]
    else:
        import nbformat

        nb, starts = nbformat.reads(text, as_version=4), None
    quoted = source.strip("\n")
    first = quoted.split("\n", 1)[0]
    if first.startswith("[") and first.endswith("]"):   # nbclient's preview of a long cell:
        try:                                           # a list of its first five lines, ...
            quoted = "\n".join(ast.literal_eval(first))
        except (ValueError, SyntaxError, TypeError):
            pass
    code = [(index, number) for number, index in
            enumerate((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), start=1)]
    for matches in (str.__eq__, str.startswith):    # the whole cell first, then a preview
        for index, number in code:
            source = nb.cells[index].source
            if matches(source.strip(), quoted.strip()):
                return (_code_line(text, starts[index], source) if starts else None), number
    return None, None


def _code_line(text: str, start: int, source: str) -> int:
    """1-based line of the file where the cell's code begins: myst-nb's source map gives the
    cell's start (its options, if it has any), the code follows them."""
    lines = text.splitlines()
    first = source.strip("\n").splitlines()[0].rstrip() if source.strip() else ""
    for k in range(start, min(len(lines), start + 200)):
        if lines[k].rstrip() == first:
            return k + 1
    return start + 1


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
    line, cell = _locate(path, source)
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
