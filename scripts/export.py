"""Plain Jupyter notebooks from the book's MyST Markdown chapters (no MyST needed to read them).

`make notebooks` (scripts/make_notebooks.py) and the course packs build on three functions:

* :func:`glue_values` -- the glued values of a chapter, from its executed build;
* :func:`plain_notebook` -- MyST markdown cells turned into plain Markdown, cell by cell;
* :func:`install_cell` -- the guarded first code cell that installs the library when missing.

What each MyST construct becomes is listed in CONTRIBUTING.md ("Notebook export"). A construct
that the converter does not know raises ``ValueError`` naming it and its page: the export never
leaves MyST syntax behind silently.
"""
from __future__ import annotations

import copy
import json
import os
import re
import tempfile
import tomllib
from pathlib import Path, PurePosixPath

import nbformat
import yaml

from bibliography import cite_labels, read_bib, reference_entry
from bookindex import PROOF_KINDS, Target, book_index, figure_options
import executed
from bookutils import ROOT, read_notebook
from mystreader import Block, blocks
from pins import reader_pins

# ----------------------------------------------------------------------------- glue values

GLUE_MIME = "application/papermill.record/"


def _docname(source: Path, root: Path = ROOT) -> str:
    return Path(source).resolve().relative_to(root.resolve()).with_suffix("").as_posix()


def harvest_glue(nb: nbformat.NotebookNode) -> dict[str, str]:
    """The values glued in an executed notebook: key -> text/plain, as myst-nb stores them."""
    values = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            scrapbook = output.get("metadata", {}).get("scrapbook", {})
            data = output.get("data", {})
            plain = scrapbook.get("mime_prefix", GLUE_MIME) + "text/plain"
            if "name" in scrapbook and (plain in data or "text/plain" in data):
                values[scrapbook["name"]] = data.get(plain, data.get("text/plain"))
    return values


def _build_glue(source: Path, root: Path) -> Path:
    return root / "_build" / "jupyter_execute" / f"{_docname(source, root)}.glue.json"


def read_glue_json(path: Path) -> dict[str, str]:
    """The values in a ``<page>.glue.json`` that myst-nb writes beside an executed page:
    key -> text/plain."""
    return {key: out["data"]["text/plain"] for key, out in json.loads(path.read_text()).items()
            if "text/plain" in out.get("data", {})}


def glue_values(source: Path, *, root: Path = ROOT, timeout: int = 300) -> dict[str, object]:
    """The glued values of a chapter: key -> the text/plain string that myst-nb formats.

    From the first of these that is current: the chapter's saved execution
    (``_build/executed/``, which `make test` writes; see :mod:`executed`), the executed build
    (``_build/jupyter_execute/<docname>.glue.json``, which myst-nb writes, when it is newer than
    the source and the library): the exported prose then shows exactly the numbers of that run.
    Otherwise the chapter is executed once with nbclient, in a temporary folder (neither is
    there on a fresh clone or on Binder, and a stale one would show numbers the code no longer
    computes).
    """
    source = Path(source).resolve()
    if source.is_relative_to(root.resolve()):
        saved = executed.load(_docname(source, root), root)
        if saved is not None:
            return harvest_glue(saved)
    cached = _build_glue(source, root)
    inputs = [source, *(root / "lib").rglob("*.py")]   # the chapter and the library it runs
    if cached.exists() and cached.stat().st_mtime >= max(p.stat().st_mtime for p in inputs):
        return read_glue_json(cached)
    from nbclient import NotebookClient

    nb = read_notebook(source)
    with tempfile.TemporaryDirectory(prefix="glue-") as folder:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": folder}}).execute()
    return harvest_glue(nb)


def format_glue(text: str, fmt: str) -> str:
    """Format a glued text/plain value with a format spec exactly as ``{glue:text}`` does."""
    from myst_nb.core.variables import format_plain_text

    return format_plain_text(text, fmt)


# ----------------------------------------------------------------------------- conversion

ADMONITIONS = {
    "admonition", "note", "tip", "hint", "important", "warning", "caution", "attention",
    "danger", "error", "seealso", "margin", "sidebar", "dropdown", "topic",
}
DROPPED = {"bibliography", "chapter-times", "toctree", "tableofcontents", "exercise-end",
           "solution-end"}


_ROLE = re.compile(r"\{(?P<name>[\w:+-]+)\}`(?P<content>[^`]*)`")
_SUBSTITUTION = re.compile(r"\{\{.+?\}\}", re.S)
# What myst-parser reads before substitutions and links, so they are left as written: a role,
# a code span, inline math ($...$, which myst parses first), an autolink, an escaped brace.
_LEFT_ALONE = re.compile(r"\{[\w:+-]+\}`[^`]*`|(?P<ticks>`+)(?:(?!(?P=ticks)).)+(?P=ticks)"
                         r"|(?<![\\$])\$(?![\s$])(?:[^$\\]|\\.)+?(?<!\s)\$(?!\d)|<[a-z][\w+.-]*:[^<>\s]*>|\\\{",
                         re.S)
# a relative Markdown link to a page source: `](<page>.md)`, `](../<page>.md#<section>)`
_PAGE_LINK = re.compile(r"\]\((?P<target>(?![a-z][\w+.-]*:|#|/)[^()\s#]+\.(?:md|ipynb))"
                        r"(?P<anchor>#[^()\s]*)?\)")
_EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


def _outside_literals(text: str, convert) -> str:
    """``text`` with ``convert`` applied to the stretches outside :data:`_LEFT_ALONE`."""
    out, pos = [], 0
    for span in _LEFT_ALONE.finditer(text):
        out += [convert(text[pos:span.start()]), span[0]]
        pos = span.end()
    return "".join(out + [convert(text[pos:])])


class ExportError(ValueError):
    """A MyST construct the export cannot convert (the message names it and the page)."""


class _Converter:
    """Converts the markdown cells of one page; collects the citations it met."""

    def __init__(self, docname: str, values: dict, notebook_map, root: Path):
        self.docname = docname
        self.values = values
        self.notebook_map = notebook_map
        self.index = book_index(root)
        self.root = root
        self.bib = read_bib(root / "references.bib") if (root / "references.bib").exists() else {}
        self.cite = cite_labels(self.bib)
        self.cited: list[str] = []
        self.used_glue: dict[str, str] = {}   # key -> the text shown

    def fail(self, what: str) -> ExportError:
        return ExportError(f"{self.docname}: cannot export {what}")

    # --- inline roles
    def roles(self, text: str) -> str:
        """Prose: substitutions filled in, roles converted, links to pages re-pointed."""
        text = _outside_literals(text, lambda piece: _PAGE_LINK.sub(self.page_link, piece))
        return _ROLE.sub(self.role, self.substitute(text))

    def substitute(self, text: str) -> str:
        """``{{ expression }}`` outside code spans, rendered as myst-parser renders it (Jinja,
        with _config.yml's ``myst_substitutions``); an unknown name is an ExportError."""
        import jinja2

        environment = jinja2.Environment(undefined=jinja2.StrictUndefined)

        def render(m: re.Match) -> str:
            try:
                return environment.from_string(m[0]).render(self.index.substitutions)
            except jinja2.TemplateError as error:
                raise self.fail(f"the substitution {m[0]} ({error})") from error

        return _outside_literals(text, lambda piece: _SUBSTITUTION.sub(render, piece))

    def page_link(self, m: re.Match) -> str:
        """A Markdown link to a page of the book (``[text](<page>.md#<anchor>)``), re-pointed as a
        {doc} link is: the sibling notebook, or the page on the site."""
        docname = self._resolve_doc(m["target"])
        if docname not in self.index.pages:
            raise self.fail(f"the link ({m['target']}): no page {docname!r} in the toc")
        href = self._href(docname) if docname != self.docname else ""
        return f"]({href}{m['anchor'] or ''})"

    def _explicit(self, content: str) -> tuple[str, str]:
        m = _EXPLICIT.match(content)
        return (m["text"], m["target"].strip()) if m else ("", content.strip())

    def _href(self, docname: str) -> str:
        return self.index.link(docname, self.docname, self.notebook_map)

    def _resolve_doc(self, target: str) -> str:
        target = target.removesuffix(".md").removesuffix(".ipynb")
        if target.startswith("/"):
            return target[1:]
        base = PurePosixPath(self.docname).parent
        return os.path.normpath(str(base / target)).replace(os.sep, "/")

    def _anchor(self, target: Target, text: str, label: str = "") -> str:
        """``text``, linked to the target's notebook or page (to the heading of a section,
        ``label`` its ``(label)=``)."""
        href = "" if target.docname == self.docname else self._href(target.docname)
        if target.kind == "section":
            if self.index.site_url and href.startswith(self.index.site_url):
                from docutils.nodes import make_id   # the id Sphinx gives the label's target

                slug = make_id(label or target.title)
            elif href.startswith("http"):   # GitHub's heading anchors
                slug = re.sub(r"[^\w\- ]", "", target.title.lower()).replace(" ", "-")
            else:                         # JupyterLab's heading anchors
                slug = target.title.replace(" ", "-")
            href += "#" + slug
        return f"[{text}]({href})" if href else text

    def role(self, m: re.Match) -> str:
        name, content = m["name"], m["content"]
        handler = _ROLES.get(name)
        if handler is None:
            raise self.fail(f"the role {{{name}}}`{content}`")
        return handler(self, name, content)

    def _doc_role(self, name: str, content: str) -> str:
        text, target = self._explicit(content)
        docname = self._resolve_doc(target)
        if docname not in self.index.pages:
            raise self.fail(f"{{doc}}`{content}`: no page {docname!r} in the toc")
        return f"[{text or self.index.pages[docname].title}]({self._href(docname)})"

    def _reference_role(self, name: str, content: str) -> str:
        """``{ref}``, ``{numref}``, ``{eq}``, ``{prf:ref}``: the target's name as the site shows it."""
        text, label = self._explicit(content)
        target = self.index.labels.get(label)
        if target is None:
            raise self.fail(f"{{{name}}}`{content}`: unknown label {label!r}")
        if name == "eq":
            shown = f"({target.number})"
        elif name == "numref":
            shown = f"Fig. {target.number}" if not text else text.replace(
                "%s", target.number).replace("{number}", target.number).replace(
                "{name}", target.title)
        elif name == "ref":
            shown = text or target.title or label
        elif text:
            shown = text
        else:
            kind = target.kind.capitalize()
            head = f"{kind} {target.number}" if target.number else kind
            shown = f"{head} ({target.title})" if target.title else head
        return self._anchor(target, shown, label)

    def _cite_role(self, name: str, content: str) -> str:
        keys = [k.strip() for k in content.split(",") if k.strip()]
        missing = [k for k in keys if k not in self.cite]
        if missing:
            raise self.fail(f"{{{name}}}`{content}`: no entry {missing} in references.bib")
        for key in keys:
            if key not in self.cited:
                self.cited.append(key)
        if name.startswith("cite:t"):
            return "; ".join(f"{self.cite[k][0]} [{self.cite[k][1]}]" for k in keys)
        return "[" + "; ".join(" ".join(self.cite[k]) for k in keys) + "]"

    def _literal_role(self, name: str, content: str) -> str:
        if name == "abbr":
            return content
        return f"`{self._explicit(content)[0] or content}`"

    def glue(self, content: str, role: str) -> str:
        """A glued value, formatted as myst-nb does: ``[<page>.md::]key[:format]``."""
        doc, _, rest = content.rpartition("::")
        key, fmt = rest.rsplit(":", 1) if role == "glue:text" and ":" in rest else (rest, "")
        lookup = f"{self._resolve_doc(doc)}::{key}" if doc else key
        if lookup not in self.values:
            raise self.fail(f"{{{role}}}`{content}`: no glued value {lookup!r} (execute the "
                            "chapter, or pass the values of the pages it quotes)")
        text = format_glue(str(self.values[lookup]), fmt)
        self.used_glue[lookup] = text
        return text

    # --- blocks
    def convert(self, source: str) -> str:
        """Plain Markdown of a MyST source (a cell, or the body of a directive), block by block
        as :func:`mystreader.blocks` reads it; the lines between blocks are prose."""
        lines = source.splitlines()
        out: list[str] = []
        prose: list[str] = []      # plain lines, converted together (a role may wrap lines)

        def flush() -> None:
            if prose:
                out.extend(self.roles("\n".join(prose)).split("\n"))
                prose.clear()

        pos, container = 0, range(0)       # container: lines of the list or quote around
        for block in blocks(source):
            if block.kind == "text":
                container = range(block.start, block.stop)
            if block.kind in ("text", "heading") or block.start < pos:
                continue                       # prose, or inside a block already converted
            prose.extend(lines[pos:block.start])
            pos = block.stop
            if block.kind in ("target", "comment", "break"):
                continue                       # `(label)=`, `% ...`, `+++`: not shown
            flush()
            if block.kind == "code" or block.kind == "math" and not block.name:
                # a plain code block or an unlabelled equation: copied as it is
                out.extend(lines[block.start:block.stop])
                continue
            if block.kind == "directive":
                shown = self.directive(block.name, block.arg, block.options, list(block.body))
            else:
                shown = self.display_math(block)
            if block.start in container:       # keep it in its list item or quote
                shown = _nested(shown, lines[block.start])
            out.extend(shown)
        prose.extend(lines[pos:])
        flush()
        return "\n".join(out)

    def display_math(self, block: Block) -> list[str]:
        """A labelled display equation: its label becomes ``\\tag{number}``."""
        target = self.index.labels.get(block.name)
        body = list(block.body)
        text = "\n".join(body)
        tag = [f"\\tag{{{target.number}}}"] if (target and target.number
                                                 and "\\begin{align" not in text
                                                 and "\\tag" not in text) else []
        return ["$$"] + body + tag + ["$$"]

    def boxed(self, title: str, body: list[str]) -> list[str]:
        """A bold title line and the body as a blockquote (math kept on one line)."""
        inner = _flatten_math(self.convert("\n".join(body)).strip("\n"))
        quoted = [f"> {line}" if line.strip() else ">" for line in inner.splitlines()]
        return [f"**{self.roles(title)}**", ""] + quoted + [""] if quoted else \
            [f"**{self.roles(title)}**", ""]

    def directive(self, name: str, arg: str, options: dict, body: list[str]) -> list[str]:
        """The plain Markdown of one directive (:data:`_DIRECTIVES` says which method)."""
        if name in DROPPED:
            return []
        handler = _DIRECTIVES.get(name) or (
            _Converter._proof if name.startswith("prf:") else None) or (
            _Converter._admonition if name in ADMONITIONS else None)
        if handler is None:
            raise self.fail(f"the directive {{{name}}} (add it to scripts/export.py)")
        return handler(self, name, arg, options, body)

    def _proof(self, name, arg, options, body) -> list[str]:
        kind = name.removeprefix("prf:")
        if kind == "proof":
            return self.boxed("Proof." if not arg else f"Proof ({arg}).", body + ["", "∎"])
        if kind not in PROOF_KINDS:
            raise self.fail(f"the directive {{{name}}}")
        label = options.get("label", "")
        target = self.index.labels.get(label) if label else None
        number = target.number if target and target.docname == self.docname else ""
        head = kind.capitalize() + (f" {number}" if number else "")
        return self.boxed(f"{head} ({arg})." if arg else f"{head}.", body)

    def _admonition(self, name, arg, options, body) -> list[str]:
        title = arg or {"seealso": "See also", "margin": "", "sidebar": ""}.get(
            name, name.capitalize())
        return self.boxed(title or "Note", body)

    def _exercise(self, name, arg, options, body) -> list[str]:
        label = options.get("label", "")
        target = self.index.labels.get(label) if label else None
        number = f" {target.number}" if target and target.number else ""
        heading = f"### Exercise{number}" + (f": {self.roles(arg)}" if arg else "")
        return [heading, ""] + self.convert("\n".join(body)).splitlines() + [""]

    def _solution(self, name, arg, options, body) -> list[str]:
        target = self.index.labels.get(arg.strip())
        number = f" {target.number}" if target and target.number else ""
        return [f"#### Solution to Exercise{number}", ""] + \
            self.convert("\n".join(body)).splitlines() + [""]

    def _math(self, name, arg, options, body) -> list[str]:
        label = options.get("label", "")
        number = self.index.labels[label].number if label in self.index.labels else ""
        tag = [f"\\tag{{{number}}}"] if number else []
        return ["$$"] + body + tag + ["$$", ""]

    def _code(self, name, arg, options, body) -> list[str]:
        return ["```" + arg] + body + ["```"]

    def _figure(self, name, arg, options, body) -> list[str]:
        caption = self.convert("\n".join(body)).strip()
        if name == "glue:figure":
            return [f"*{caption}* (the figure is the output of the cell that glues "
                    f"`{arg}`: run it)", ""]
        alt = options.get("alt", caption.splitlines()[0] if caption else "figure")
        return [f"![{alt}]({arg})", "", f"*{caption}*" if caption else "", ""]

    def _quote(self, name, arg, options, body) -> list[str]:
        return self.boxed("", body)[2:]


# What each role and directive becomes: the _Converter method that writes it.
_ROLES = {
    **dict.fromkeys(("glue", "glue:", "glue:text"), lambda c, name, content: c.glue(content, name)),
    "doc": _Converter._doc_role,
    **dict.fromkeys(("ref", "numref", "eq", "prf:ref"), _Converter._reference_role),
    **dict.fromkeys(("cite", "cite:p", "cite:t", "cite:ps", "cite:ts"), _Converter._cite_role),
    "math": lambda c, name, content: f"${content}$",
    **dict.fromkeys(("sub", "subscript"), lambda c, name, content: f"<sub>{content}</sub>"),
    **dict.fromkeys(("sup", "superscript"), lambda c, name, content: f"<sup>{content}</sup>"),
    **dict.fromkeys(("abbr", "term", "kbd", "code", "samp", "file", "command", "program"),
                    _Converter._literal_role),
}
_DIRECTIVES = {
    **dict.fromkeys(("exercise", "exercise-start"), _Converter._exercise),
    **dict.fromkeys(("solution", "solution-start"), _Converter._solution),
    "math": _Converter._math,
    **dict.fromkeys(("code-block", "code", "sourcecode"), _Converter._code),
    **dict.fromkeys(("figure", "glue:figure"), _Converter._figure),
    **dict.fromkeys(("epigraph", "pull-quote"), _Converter._quote),
}


def _nested(shown: list[str], opening: str) -> list[str]:
    """``shown`` (the export of a block that opened on the line ``opening`` of a list item or a
    quote) with that line's prefix: the list marker on its first line, the marker's width in
    spaces and any ``>`` on the others."""
    found = re.match(r"^([ \t>]*)((?:[-*+]|\d+[.)])[ \t]+)?", opening)
    first, rest = found[0], found[1] + " " * len(found[2] or "")
    return [((first if k == 0 else rest) + line).rstrip() for k, line in enumerate(shown)]


def _flatten_math(text: str) -> str:
    """Join the lines of every ``$...$`` and ``$$...$$`` span, so that a blockquote's ``> ``
    never lands inside math (JupyterLab would typeset it)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            j = text.find("$$", i + 2)
            if j < 0:
                break
            out.append("$$" + " ".join(p.strip() for p in text[i + 2:j].splitlines()
                                         if p.strip() and not p.strip().startswith("%"))
                       + "$$")
            i = j + 2
        elif text[i] == "$" and (i == 0 or text[i - 1] != "\\"):
            j = i + 1
            while j < len(text) and not (text[j] == "$" and text[j - 1] != "\\"):
                j += 1
            if j >= len(text):
                break
            out.append(" ".join(text[i:j + 1].split("\n")))
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    out.append(text[i:])
    return "".join(out)


def plain_notebook(nb: nbformat.NotebookNode, docname: str, values: dict, *,
                   notebook_dir_map: dict[str, str] | None = None,
                   root: Path = ROOT) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose markdown cells are plain Markdown (no MyST).

    ``nb``: a notebook as :func:`bookutils.read_notebook` reads a page; ``docname``: its page
    (``"chapters/03-gd-to-svm"``); ``values``: its glued values (:func:`glue_values`), plus
    ``"<docname>::<key>"`` entries for values quoted from other pages;
    ``notebook_dir_map``: docname -> link to that page's notebook, relative to this one, for
    notebooks that travel together (a course pack); pages not in the map (default: every page)
    link to the page on the site (``html: baseurl``), else to their source in the repository.
    Cells keep their order, type and code; a markdown cell stays one cell (dropped only when
    nothing is left of it and it has no metadata), except that a solution is cut out of it
    into a cell of its own: solutions are folded away (:func:`_solutions_apart`). A code cell
    tagged ``glue`` (hidden on the site: it glues the numbers of the check before it) is left
    out; one tagged ``check`` or ``hide-input`` (folded on the site) is folded (:func:`_fold`).
    A figure code cell is followed by a new markdown cell with its number
    and caption, and the citations become a last markdown cell with the reference list.
    Raises :class:`ExportError` (a ``ValueError``) on a construct it cannot convert or a
    glued value missing from ``values``.
    """
    # a notebook is often downloaded alone: links to other pages open the site, not a sibling
    conv = _Converter(docname, values, {} if notebook_dir_map is None else notebook_dir_map, root)
    new = copy.deepcopy(nb)
    new.cells = _solutions_apart(new)
    cells = []
    figures = 0
    for cell in new.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code" and GLUE_TAG in tags:
            continue              # run on the site only: it glues the check's numbers
        if cell.cell_type == "code" and FOLDED & set(tags):
            _fold(cell)
        if cell.cell_type == "markdown":
            cell.source = _tidy(conv.convert(cell.source))
            if cell.metadata.get("export", {}).get("solution"):
                cell.source = _folded(cell.source)
            if not cell.source.strip() and not cell.metadata:
                continue          # a cell that held only gates, targets or comments
        cells.append(cell)
        if cell.cell_type == "code":
            figure = figure_options({"mystnb": cell.metadata.get("mystnb")})
            if figure is not None:
                figures += 1
                prefix = conv.index.chapter.get(docname)
                number = f"{prefix}.{figures}" if prefix else str(figures)
                caption = _flatten_math(conv.convert(str(figure.get("caption", ""))).strip())
                cells.append(nbformat.v4.new_markdown_cell(
                    f"**Fig. {number}.** {caption}".strip(),
                    metadata={"export": {"figure_caption": figure.get("name", "")}}))
    if conv.cited:
        items = [f"- {reference_entry(k, conv.bib[k], conv.cite[k])}" for k in conv.cited]
        cells.append(nbformat.v4.new_markdown_cell("## References\n\n" + "\n".join(items),
                                                   metadata={"export": {"references": True}}))
    new.cells = cells
    new.metadata.setdefault("export", {})["glue"] = conv.used_glue
    return new


SOLUTION_SUMMARY = "Show the solution"
# The book's tag of a cell that only glues a check's numbers into the prose (hidden on the site
# by myst-nb's `remove-cell`; left out of the notebook, which fills the numbers in itself), and
# the tags of the cells whose code the notebook folds: what the site folds (myst-nb's
# `hide-input`) and every check (the intro's is hidden on the site, not folded there).
GLUE_TAG, FOLDED = "glue", {"hide-input", "check"}


def _fold(cell: nbformat.NotebookNode) -> None:
    """Collapse a code cell's source, its outputs left in view: ``jupyter.source_hidden`` for
    JupyterLab, Notebook 7 and VS Code; ``cellView: form`` for Colab."""
    cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    cell.metadata["cellView"] = "form"


def _solutions_apart(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """The cells of ``nb`` with each solution folded away, as the site's closed dropdown: its
    Markdown a cell of its own (metadata ``export.solution``, wrapped by :func:`_folded` in a
    ``<details>`` block after the heading), its code cells' source collapsed
    (:func:`_fold`). The rest of a cut Markdown cell stays one cell per side of the solution."""
    from gates import pieces

    cells: list[nbformat.NotebookNode] = []
    last, headed = None, set()
    for piece in pieces(nb):
        cell, solution = piece.cell, piece.role.startswith("solution")
        if solution and piece.label not in headed:   # the heading: from the gate, as on the site
            headed.add(piece.label)
            gate = f"```{{solution-start}} {piece.label}\n```"
            if cell.cell_type == "markdown" and not re.match(r"\s*(`{3,}|:{3,})\s*\{solution",
                                                             cell.source):
                cell.source = gate + "\n\n" + cell.source
            elif cell.cell_type == "code":
                cells.append(nbformat.v4.new_markdown_cell(
                    gate, metadata={"export": {"solution": piece.label}}))
                last = (cells[-1], (piece.origin, True))
        if solution:
            cell.metadata.setdefault("export", {})["solution"] = piece.label
            if cell.cell_type == "code":
                _fold(cell)
        if (last is not None and cell.cell_type == "markdown" == last[0].cell_type
                and last[1] == (piece.origin, solution)):
            last[0].source += "\n" + cell.source   # the text of one chapter cell stays one cell
            continue
        cells.append(cell)
        last = (cell, (piece.origin, solution))
    return cells


def _folded(text: str) -> str:
    """A solution's converted Markdown: its heading, then the rest inside ``<details>`` (a
    closed block that JupyterLab, Colab, VS Code and GitHub show on a click)."""
    head, _, body = text.partition("\n")
    if not head.startswith("#"):
        head, body = "", text
    body = body.strip("\n")
    folded = (f"<details>\n<summary>{SOLUTION_SUMMARY}</summary>\n\n{body}\n\n</details>"
              if body else "")
    return "\n\n".join(part for part in (head, folded) if part)


def _tidy(text: str) -> str:
    """At most one blank line in a row, none at the ends."""
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


# ----------------------------------------------------------------------------- install cell

COLAB_MODULES = {"cvxpy": "cvxpy", "clarabel": "clarabel",
                 "jupytext": "jupytext", "ipywidgets": "ipywidgets", "numpy": "numpy",
                 "scipy": "scipy", "torch": "torch", "matplotlib": "matplotlib",
                 "numba": "numba", "llvmlite": "llvmlite"}
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def read_config(root: Path = ROOT) -> dict:
    """What the install cell needs: the repository URL and branch (``_config.yml``), the pins
    of what a reader's notebook runs (the library and its ``book`` extra, ``constraints.txt``),
    the book's title and version (the notebook says which version of the book it is)."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    pins = reader_pins(root)
    return {"repo_url": config["repository"]["url"].rstrip("/"),
            "branch": config["repository"].get("branch", "main"),
            "pins": pins, "name": project["name"], "title": config.get("title", ""),
            "version": project["version"]}


def install_cell(config: dict) -> nbformat.NotebookNode:
    """The first code cell: installs the library when ``import maxmargin`` fails, else nothing.

    ``config`` is :func:`read_config`'s dict. On Colab the library is installed without its
    dependencies, and only the missing ones are added at our pins: Colab's own numpy, scipy,
    matplotlib and torch stay (our exact torch pin would replace Colab's CUDA build with a
    2.7 GB download and force a restart). Elsewhere on Linux, the CPU-only PyTorch wheel is
    installed first, then the library with its ``book`` extra at the pins.
    """
    url = f"git+{config['repo_url']}@{config['branch']}"
    exact = " ".join(f"{name}=={version}" for name, version in config["pins"].items())
    colab = [(COLAB_MODULES[name], f"{name}=={version}") for name, version
             in config["pins"].items() if name in COLAB_MODULES]
    items = [f'"{module}": "{pin}",' for module, pin in colab]
    pins = "\n".join(" " * 12 + " ".join(items[k:k + 2]) for k in range(0, len(items), 2))
    source = f'''\
# {config['title']}, version {config['version']} of the book.
# Installs the book's library if it is missing (Colab, a plain Jupyter);
# does nothing where it is installed (a clone of the repository, Binder).
import importlib.util
import sys

if importlib.util.find_spec("maxmargin") is None:
    book = "{config['name']}[book] @ {url}"
    if "google.colab" in sys.modules:  # keep Colab's torch, numpy...
        pins = {{  # module: pin, installed only when Colab lacks the module
{pins}
        }}
        missing = " ".join(pin for module, pin in pins.items()
                           if importlib.util.find_spec(module) is None)
        %pip install -q --no-deps "{{book}}"
        if missing:
            %pip install -q {{missing}}
    else:
        if sys.platform == "linux":  # CPU-only PyTorch: no 2.7 GB of CUDA
            %pip install -q torch=={config['pins']['torch']} --index-url {CPU_INDEX}
        %pip install -q "{{book}}" {exact}'''
    return nbformat.v4.new_code_cell(source, metadata={"export": {"install": True},
                                                       "tags": ["install"]})


def export_notebook(source: Path, values: dict, *, config: dict | None = None,
                    notebook_dir_map: dict[str, str] | None = None,
                    root: Path = ROOT) -> nbformat.NotebookNode:
    """The plain notebook of one page: markdown converted, the install cell as the first code
    cell (after the title and opening), no outputs."""
    from bookutils import clean_for_export

    nb = read_notebook(source)
    plain = plain_notebook(nb, _docname(source, root), values,
                           notebook_dir_map=notebook_dir_map, root=root)
    first_code = next((i for i, c in enumerate(plain.cells) if c.cell_type == "code"),
                      len(plain.cells))
    plain.cells.insert(first_code, install_cell(config or read_config(root)))
    return clean_for_export(plain)
