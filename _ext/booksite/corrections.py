"""The record of every printed number and verdict, and the "Updates and corrections" page.

**The record.** Every number the book prints is glued from a run and quoted with
``{glue:text}`key:fmt```. The book's ``glue:text`` role (:class:`GluedText`, myst-nb's role
with a wrapper) marks each quoted value with its chapter, key and format and an anchor
(``#num-<key>``); each table whose last column is "Status" (the reproduction appendix) gives
every row an anchor (``#verdict-<claim>``) and its verdict. After all pages are read, the
values are formatted as the pages print them, and each build writes
``_build/html/_static/numbers.json``::

    {"version": "0.2.0",
     "numbers": [{"chapter", "key", "format", "text" (as printed), "raw" (myst-nb's
                  full-precision text/plain), "page", "anchor", "context" (the sentence or
                  the table row it is printed in)}, ...],   # glued, never printed: format null
     "verdicts": [{"page", "claim", "verdict", "anchor", "context"}, ...]}

**The page.** The ``{updates-and-corrections}`` directive compares this build's record with the
previous release's, ``releases/<version>/numbers.json`` (the highest version below this one),
and lists every changed, added and removed number and verdict, grouped by chapter, old and new
value, linked to the place in the book; changed verdicts first, in a box of their own. With no
previous release the page says that this is the first release.

**Last-digit rule** (:func:`is_change`). A printed number counts as changed only when its
printed text changed *and* its full-precision glued value moved by at least one unit of the
last printed digit. A smaller move only flips the rounding of the last digit, which other
machines' last bits do (the book's checks assert bounds, not such digits). Integers (counts)
move by at least one unit, so every change of a count is listed. Without a full-precision value
the printed values must differ by more than one unit. Text that is not a number, and verdicts,
are compared exactly (spacing aside).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import docname_join, logging
from sphinx.util.docutils import SphinxDirective

LOGGER = logging.getLogger(__name__)
GLUE_CLASS = "glued-value"
RECORD = Path("_static") / "numbers.json"
RELEASES = "releases"                 # releases/<version>/numbers.json, in the book's folder
STATUS_HEADER = "status"              # a table whose last column is this lists verdicts
ENV_NUMBERS, ENV_VERDICTS, ENV_PAGES = ("booksite_numbers", "booksite_verdicts",
                                        "booksite_updates_pages")
ENV_RESULT = "booksite_corrections"

# ----------------------------------------------------------------------- comparison (pure)

_NUMBER = re.compile(r"^\s*[+-]?(\d[\d,_]*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?\s*(%?)\s*$")
_RAW = re.compile(r"^\s*(?:np\.\w+\()?\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf|nan)"
                  r"\s*\)?\s*$")


def last_unit(text: str) -> float | None:
    """One unit of the last printed digit of ``text`` ("0.9412" -> 1e-4, "1.2e-05" -> 1e-6,
    "39" -> 1, "92.5%" -> 0.1), in the printed scale; None when ``text`` is not a number."""
    m = _NUMBER.match(text or "")
    if not m:
        return None
    decimals = len(m.group(2) or "")
    return 10.0 ** (int(m.group(3) or 0) - decimals)


def printed_value(text: str) -> float | None:
    """The number ``text`` prints, in the printed scale ("92.5%" -> 92.5); None if none."""
    if last_unit(text) is None:
        return None
    return float(text.strip().rstrip("%").replace(",", "").replace("_", ""))


def raw_value(text: str | None) -> float | None:
    """The full-precision value of myst-nb's text/plain ("0.94123", "np.float64(0.9)", "51")."""
    m = _RAW.match(text or "")
    return float(m.group(1)) if m else None


def is_change(old: dict, new: dict) -> bool:
    """Whether a printed number changed (the module's last-digit rule). ``old``, ``new``: the
    record's entries (``text`` as printed, ``raw`` the full-precision text/plain)."""
    if " ".join(old["text"].split()) == " ".join(new["text"].split()):
        return False
    units = last_unit(old["text"]), last_unit(new["text"])
    if None in units:
        return True
    unit = max(units)
    scale = 100.0 if new["text"].strip().endswith("%") else 1.0
    a, b = raw_value(old.get("raw")), raw_value(new.get("raw"))
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return abs(printed_value(new["text"]) - printed_value(old["text"])) > unit * (1 + 1e-9)
    return abs(b - a) * scale >= unit * (1 - 1e-9)


def _printed(record: dict | None) -> dict[tuple, dict]:
    """The printed numbers of a record by (chapter, key, format), the first place each is
    printed in its own chapter preferred."""
    found: dict[tuple, dict] = {}
    for entry in (record or {}).get("numbers", []):
        if entry.get("format") is None or entry.get("text") is None:
            continue
        ident = (entry["chapter"], entry["key"], entry["format"])
        if ident not in found or (entry["page"] == entry["chapter"]
                                  and found[ident]["page"] != entry["chapter"]):
            found[ident] = entry
    return found


def diff_records(old: dict | None, new: dict) -> list[dict]:
    """Every changed, added and removed printed number and verdict from ``old`` to ``new``.

    Returns dicts ``kind`` ("number" or "verdict"), ``change`` ("changed", "added",
    "removed"), ``chapter`` (the number's chapter, the verdict's page), ``what`` (key or claim),
    ``old``, ``new`` (None when absent), ``page``, ``anchor`` (None when removed), ``context``.
    """
    changes = []
    before, after = _printed(old), _printed(new)
    for ident in [*after, *(i for i in before if i not in after)]:
        a, b = before.get(ident), after.get(ident)
        if a is not None and b is not None and not is_change(a, b):
            continue
        here = b or a
        changes.append({"kind": "number", "chapter": ident[0], "what": ident[1],
                        "change": "changed" if a and b else ("added" if b else "removed"),
                        "old": a and a["text"], "new": b and b["text"], "page": here["page"],
                        "anchor": b and b["anchor"], "context": here["context"]})

    def verdicts(record):
        return {(v["page"], " ".join(v["claim"].split())): v
                for v in (record or {}).get("verdicts", [])}

    before, after = verdicts(old), verdicts(new)
    for ident in [*after, *(i for i in before if i not in after)]:
        a, b = before.get(ident), after.get(ident)
        if a is not None and b is not None and \
                " ".join(a["verdict"].split()) == " ".join(b["verdict"].split()):
            continue
        here = b or a
        changes.append({"kind": "verdict", "chapter": ident[0], "what": ident[1],
                        "change": "changed" if a and b else ("added" if b else "removed"),
                        "old": a and a["verdict"], "new": b and b["verdict"],
                        "page": here["page"], "anchor": b and b["anchor"],
                        "context": here["context"]})
    return changes


def _version_key(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.+-]", name))


def previous_release(folder: Path, version: str) -> tuple[str, dict] | None:
    """(version, record) of the highest ``folder/<v>/numbers.json`` with v below ``version``."""
    if not folder.is_dir():
        return None
    older = [p.parent.name for p in folder.glob("*/numbers.json")
             if re.fullmatch(r"\d+(\.\d+)*", p.parent.name)
             and _version_key(p.parent.name) < _version_key(version)]
    if not older:
        return None
    name = max(older, key=_version_key)
    return name, json.loads((folder / name / "numbers.json").read_text())


# ------------------------------------------------------------------- collection (reading)

def glued_text_role():
    """myst-nb's ``glue:text`` role, its value wrapped in an inline that names it."""
    from myst_nb.ext.glue.roles import PasteTextRole
    from myst_nb.ext.glue.utils import PendingGlueReference

    class GluedText(PasteTextRole):
        def run(self):
            result, messages = super().run()
            if len(result) != 1:
                return result, messages
            key, _, fmt = self.text.rpartition(":") if ":" in self.text else (self.text, "", "s")
            if "::" in key:
                key = key.split("::", 1)[1]
            pending = result[0] if isinstance(result[0], PendingGlueReference) else None
            wrapper = nodes.inline("", "", result[0], classes=[GLUE_CLASS])
            wrapper["glue_chapter"] = (pending.refdoc if pending
                                       else self.document.settings.env.docname)
            wrapper["glue_key"], wrapper["glue_format"] = key, fmt
            anchor, k = nodes.make_id(f"num-{key}"), 1
            while anchor in self.document.ids:
                k += 1
                anchor = nodes.make_id(f"num-{key}-{k}")
            wrapper["ids"].append(anchor)
            self.document.ids[anchor] = wrapper
            return [wrapper], messages

    return GluedText()


def _segments(node: nodes.Node) -> list:
    """The text of ``node`` as strings and, for glued values, [index of the wrapper] markers
    resolved later (a cross-page value has no text before all pages are read)."""
    out: list = []
    for child in node.children if isinstance(node, nodes.Element) else []:
        if isinstance(child, nodes.inline) and GLUE_CLASS in child["classes"]:
            out.append({"chapter": child["glue_chapter"], "key": child["glue_key"],
                        "format": child["glue_format"], "anchor": child["ids"][0]})
        elif isinstance(child, addnodes.pending_xref) and child.get("reftype") == "doc" \
                and not child.get("refexplicit"):      # {doc}`page`: its title, known later
            target = child["reftarget"]
            out.append({"doc": target[1:] if target.startswith("/")
                        else docname_join(child.get("refdoc", ""), target)})
        elif isinstance(child, nodes.Text):
            out.append(child.astext())
        elif isinstance(child, (nodes.entry,)):
            out += ([" | "] if out else []) + _segments(child)
        else:
            out += _segments(child)
    return out


def _container(node: nodes.Node) -> nodes.Element:
    """The table row, else the paragraph (else the nearest element) a value is printed in."""
    row = node.parent
    while row is not None and not isinstance(row, nodes.row):
        row = row.parent
    if row is not None:
        return row
    box = node.parent
    while box is not None and not isinstance(box, (nodes.paragraph, nodes.TextElement)):
        box = box.parent
    return box or node.parent


def collect(app: Sphinx, doctree: nodes.document) -> None:
    """doctree-read: the page's glued values and verdict rows, kept in the environment."""
    env, docname = app.env, app.env.docname
    numbers = []
    for wrapper in doctree.findall(lambda n: isinstance(n, nodes.inline)
                                   and GLUE_CLASS in n["classes"]):
        numbers.append({"chapter": wrapper["glue_chapter"], "key": wrapper["glue_key"],
                        "format": wrapper["glue_format"], "page": docname,
                        "anchor": wrapper["ids"][0],
                        "row": isinstance(_container(wrapper), nodes.row),
                        "context": _segments(_container(wrapper))})
    verdicts = []
    for table in doctree.findall(nodes.table):
        head = [r for h in table.findall(nodes.thead) for r in h.findall(nodes.row)]
        if not head or head[0].children[-1].astext().strip().lower() != STATUS_HEADER:
            continue
        for body in table.findall(nodes.tbody):
            for row in body.findall(nodes.row):
                claim = _segments(row.children[0])
                text = " ".join("".join(s for s in claim if isinstance(s, str)).split())
                anchor, k = nodes.make_id(f"verdict-{text[:60]}"), 1
                while anchor in doctree.ids:
                    k += 1
                    anchor = nodes.make_id(f"verdict-{text[:60]}-{k}")
                row["ids"].append(anchor)
                doctree.ids[anchor] = row
                verdicts.append({"page": docname, "claim": claim, "anchor": anchor,
                                 "verdict": _segments(row.children[-1]),
                                 "context": _segments(row)})
    for name, items in ((ENV_NUMBERS, numbers), (ENV_VERDICTS, verdicts)):
        store = getattr(env, name, None) or {}
        store[docname] = items
        setattr(env, name, store)


def purge(app: Sphinx, env, docname: str) -> None:
    for name in (ENV_NUMBERS, ENV_VERDICTS):
        getattr(env, name, {}).pop(docname, None)
    getattr(env, ENV_PAGES, set()).discard(docname)


def merge(app: Sphinx, env, docnames, other) -> None:
    for name in (ENV_NUMBERS, ENV_VERDICTS):
        store = getattr(env, name, None) or {}
        store.update({d: v for d, v in (getattr(other, name, None) or {}).items()
                      if d in docnames})
        setattr(env, name, store)
    pages = getattr(env, ENV_PAGES, None) or set()
    setattr(env, ENV_PAGES, pages | (getattr(other, ENV_PAGES, None) or set()) & set(docnames))


# --------------------------------------------------------------------- the record (updated)

def _glue_cache(env, docname: str, cache: dict) -> dict:
    if docname not in cache:
        path = Path(env.mystnb_config.output_folder, *docname.split("/"))
        path = path.with_name(path.name + ".glue.json")
        cache[docname] = json.loads(path.read_text()) if path.is_file() else {}
    return cache[docname]


def _sentence(parts: list[str], marker: int) -> str:
    """The sentence of ``"".join(parts)`` that contains part ``marker``."""
    text = "".join(parts)
    start = sum(len(p) for p in parts[:marker])
    ends = [m.end() for m in re.finditer(r"[.;!?](?=\s+[A-Z(\[])", text)]
    begin = max([e for e in ends if e <= start], default=0)
    stop = min([e for e in ends if e > start], default=len(text))
    return " ".join(text[begin:stop].split())


def build_record(app: Sphinx, env) -> dict:
    """This build's record (the module's docstring gives its form), pages in reading order."""
    from myst_nb.core.variables import format_plain_text

    from .times import _toc_order

    cache: dict = {}

    def value(chapter: str, key: str, fmt: str) -> tuple[str | None, str | None]:
        output = _glue_cache(env, chapter, cache).get(key)
        raw = ((output or {}).get("data") or {}).get("text/plain")
        if raw is None:
            return None, None
        try:
            return format_plain_text(raw, fmt), raw
        except Exception:   # myst-nb warns where the value is quoted
            return None, raw

    def render(segments: list) -> list[str]:
        return [s if isinstance(s, str) else _title(env, s["doc"]) if "doc" in s
                else (value(s["chapter"], s["key"], s["format"])[0] or "?") for s in segments]

    order = {name: i for i, name in enumerate(_toc_order(app))}
    pages = sorted(set(getattr(env, ENV_NUMBERS, {})) | set(getattr(env, ENV_VERDICTS, {})),
                   key=lambda d: (order.get(d, len(order)), d))
    numbers, printed = [], set()
    for page in pages:
        for item in getattr(env, ENV_NUMBERS, {}).get(page, []):
            text, raw = value(item["chapter"], item["key"], item["format"])
            if text is None:
                continue
            parts = render(item["context"])
            marker = next(i for i, s in enumerate(item["context"])
                          if isinstance(s, dict) and s.get("anchor") == item["anchor"])
            context = " ".join("".join(parts).split()) if item["row"] else _sentence(parts, marker)
            numbers.append({"chapter": item["chapter"], "key": item["key"],
                            "format": item["format"], "text": text, "raw": raw, "page": page,
                            "anchor": item["anchor"], "context": context})
            printed.add((item["chapter"], item["key"]))
    for chapter in sorted({c for c, _ in printed} | set(pages),
                          key=lambda d: (order.get(d, len(order)), d)):
        for key, output in _glue_cache(env, chapter, cache).items():
            raw = (output.get("data") or {}).get("text/plain")
            if (chapter, key) not in printed and raw is not None:
                numbers.append({"chapter": chapter, "key": key, "format": None, "text": None,
                                "raw": raw, "page": None, "anchor": None, "context": None})
    verdicts = []
    for page in pages:
        for item in getattr(env, ENV_VERDICTS, {}).get(page, []):
            verdicts.append({"page": page, "claim": " ".join("".join(render(item["claim"])).split()),
                             "verdict": " ".join("".join(render(item["verdict"])).split()),
                             "anchor": item["anchor"],
                             "context": " ".join("".join(render(item["context"])).split())})
    return {"version": app.config.version, "numbers": numbers, "verdicts": verdicts}


def compare(app: Sphinx, env) -> list[str]:
    """env-updated: the record, the previous release's and their differences; the pages that
    show them are written again."""
    record = build_record(app, env)
    previous = previous_release(Path(app.srcdir) / RELEASES, app.config.version)
    changes = diff_records(previous[1] if previous else None, record)
    setattr(env, ENV_RESULT, {"record": record, "previous": previous and previous[0],
                              "changes": changes})
    return sorted(getattr(env, ENV_PAGES, None) or [])


def write_record(app: Sphinx, exception: Exception | None) -> None:
    """build-finished: the record, ``numbers.json`` in the output folder's ``_static``."""
    if exception is not None or app.builder.format != "html":
        return
    result = getattr(app.env, ENV_RESULT, None)
    if result is None:
        return
    path = Path(app.outdir) / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result["record"], indent=1, ensure_ascii=False) + "\n")


def page_context(app, pagename, templatename, context, doctree) -> None:
    """html-page-context: the templates link the updates page when the book has one."""
    pages = sorted(getattr(app.env, ENV_PAGES, None) or [])
    context["book_updates_page"] = pages[0] if pages else ""


# ---------------------------------------------------------------------------- the page

class updates_node(nodes.General, nodes.Element):
    """Placeholder for the list of changes, filled in when its page is written."""


class UpdatesAndCorrections(SphinxDirective):
    """``{updates-and-corrections}``: every number and verdict that changed since the
    previous release."""

    def run(self) -> list[nodes.Node]:
        pages = getattr(self.env, ENV_PAGES, None) or set()
        pages.add(self.env.docname)
        setattr(self.env, ENV_PAGES, pages)
        return [updates_node()]


def _title(env, docname: str) -> str:
    title = env.titles.get(docname)
    return title.astext() if title is not None else docname


def _paragraph(*parts) -> nodes.paragraph:
    para = nodes.paragraph()
    for part in parts:
        para += nodes.Text(part) if isinstance(part, str) else part
    return para


def _link(app, docname: str, change: dict) -> nodes.Node:
    text = change["context"] or change["page"] or ""
    text = text if len(text) <= 160 else text[:157] + "..."
    if not change["anchor"] or change["page"] not in app.env.all_docs:
        return nodes.Text(text)
    if app.builder.name == "singlehtml":
        uri = "#" + change["anchor"]
    else:
        uri = app.builder.get_relative_uri(docname, change["page"]) + "#" + change["anchor"]
    return nodes.reference("", text, refuri=uri, internal=True)


def _table(app, docname: str, changes: list[dict]) -> nodes.table:
    table = nodes.table(classes=["updates-table", "colwidths-auto"])
    group = nodes.tgroup(cols=5)
    table += group
    group += [nodes.colspec(colwidth=w) for w in (12, 18, 15, 15, 40)]
    head = nodes.thead()
    group += head
    head += nodes.row("", *[nodes.entry("", nodes.paragraph(text=t))
                            for t in ("Change", "Number or claim", "Old", "New", "In the book")])
    body = nodes.tbody()
    group += body
    for change in changes:
        label = (f"verdict {change['change']}" if change["kind"] == "verdict"
                 else change["change"])
        what = nodes.literal(text=change["what"]) if change["kind"] == "number" \
            else nodes.Text(change["what"] if len(change["what"]) <= 80
                            else change["what"][:77] + "...")
        row = nodes.row("", nodes.entry("", nodes.paragraph(text=label)),
                        nodes.entry("", _paragraph(what)),
                        nodes.entry("", nodes.paragraph(text=change["old"] or "-")),
                        nodes.entry("", nodes.paragraph(text=change["new"] or "-")),
                        nodes.entry("", _paragraph(_link(app, docname, change))),
                        classes=[f"change-{change['kind']}", f"change-{change['change']}"])
        body += row
    return table


def updates_content(app, docname: str) -> list[nodes.Node]:
    result = getattr(app.env, ENV_RESULT, None) or {"record": {"version": app.config.version,
                                                              "numbers": [], "verdicts": []},
                                                   "previous": None, "changes": []}
    version, previous, changes = result["record"]["version"], result["previous"], result["changes"]
    printed = sum(1 for n in result["record"]["numbers"] if n["format"] is not None)
    verdicts = len(result["record"]["verdicts"])
    out: list[nodes.Node] = []
    if previous is None:
        out.append(_paragraph(
            f"Version {version} is the first release: there is no previous release to compare "
            f"with. This build prints {printed} glued numbers and {verdicts} verdicts; from the "
            "next release on, this page lists every one of them that changed."))
        return out
    def count(n: int, what: str) -> str:
        return f"{n} {what}{'s' * (n != 1)}"

    out.append(_paragraph(
        f"Version {version} against version {previous}, the previous release: "
        f"{count(sum(c['kind'] == 'number' for c in changes), 'number')} and "
        f"{count(sum(c['kind'] == 'verdict' for c in changes), 'verdict')} changed, were added "
        f"or were removed, of the {printed} numbers and {verdicts} verdicts this build prints."))
    if not changes:
        out.append(_paragraph("No number and no verdict changed."))
        return out
    changed = [c for c in changes if c["kind"] == "verdict" and c["change"] == "changed"]
    if changed:
        box = nodes.admonition(classes=["attention", "changed-verdicts"])
        box += nodes.title(text=f"{len(changed)} verdict{'s' * (len(changed) != 1)} changed")
        items = nodes.bullet_list()
        for c in changed:
            items += nodes.list_item("", _paragraph(
                nodes.strong(text=c["what"][:120]), f": {c['old']} → ",
                nodes.strong(text=c["new"]), " (", _link(app, docname, dict(c, context="see the row")), ")"))
        box += items
        out.append(box)
    order = []
    for c in changes:
        if c["chapter"] not in order:
            order.append(c["chapter"])
    for chapter in order:
        group = [c for c in changes if c["chapter"] == chapter]
        group.sort(key=lambda c: (c["kind"] != "verdict", c["change"] != "changed"))
        out.append(nodes.rubric(text=_title(app.env, chapter)))
        out.append(_table(app, docname, group))
    return out


class UpdatesTransform(SphinxPostTransform):
    default_priority = 8   # before references are resolved

    def run(self, **kwargs) -> None:
        for node in list(self.document.findall(updates_node)):
            node.replace_self(updates_content(self.app, self.env.docname))


def setup_corrections(app: Sphinx) -> None:
    app.setup_extension("myst_nb")
    app.add_role_to_domain("glue", "text", glued_text_role(), override=True)
    app.add_node(updates_node)
    app.add_directive("updates-and-corrections", UpdatesAndCorrections)
    app.add_post_transform(UpdatesTransform)
    app.connect("doctree-read", collect)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    app.connect("env-updated", compare)
    app.connect("html-page-context", page_context)
    app.connect("build-finished", write_record)
