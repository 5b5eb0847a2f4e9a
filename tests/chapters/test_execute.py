"""Each toc page with code executes once, the way a reader runs it; the rest of `make test`
reuses that run.

For each notebook page, the exported notebook's code (install cell first) is executed once,
from a temporary folder outside the repository, in a kernel of a fresh virtual environment
where the library is installed as a reader installs it (`pip install`, not editable; the
dependencies come from the project's environment through a .pth file). That one execution is
checked four ways:

* it runs clean, and its outputs follow the figure and glue rules (alt text, opaque figures,
  one display per figure cell, glued Python numbers); its wall time is recorded against the
  chapter budget (60 s), a measurement that `make bench` checks on an idle machine, never an
  assertion here;
* the export reads without MyST: the values this run glues fill the prose of the export, the
  exported code cells are exactly the ones that ran less the hidden cells (tagged ``glue``)
  that glue the checks' numbers, no MyST residue is left (rendered with markdown-it-py), and
  every glued value the prose quotes appears in it;
* chapter 01 is re-run cell by cell after its exercises (last cell first), and must print the
  same outputs, and executed a second time in the repository's own environment, where it must
  glue identical values (two fresh executions, two environments);
* the run is saved (scripts/executed.py) for the -W book build, Binder's notebooks and the
  course packs of tests/site, which then execute nothing again.
"""
from __future__ import annotations

import base64
import io
import re
import time

import nbformat
import pytest
from chapter_exec import execute as execute_in_repository
from chapter_exec import describe_failure, recorded
from raw_reprs import line_problem, raw_reprs
from reader import execute
from residue import residue

import executed
import export
from bookutils import ROOT, clean_for_export, has_code_cells, in_ci, read_notebook, source_path
from bookutils import toc_docnames

PAGES = [name for name in toc_docnames() if has_code_cells(source_path(name))]
REPRODUCED_CHAPTER = "chapters/01-attention-model"
GLUE_ROLE = re.compile(r"\{glue(?::text|:)?\}`([^`]*)`")


def output_problems(nb) -> list[str]:
    """Convention breaches visible only after execution: figure alt text, opacity, glue types,
    results shown as raw Python reprs (tests/chapters/raw_reprs.py)."""
    from PIL import Image

    problems = [f"{p}: show it with maxmargin.book.tables" for p in raw_reprs(nb)]
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        options = cell.metadata.get("mystnb", {})
        displays = [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
        pngs = [o.data["image/png"] for o in displays if "image/png" in o.get("data", {})]
        if pngs and not options.get("image", {}).get("alt"):
            problems.append(f"cell {index}: an image output needs `mystnb: image: alt:` text")
        for png in pngs:
            image = Image.open(io.BytesIO(base64.b64decode(png)))
            if "A" in image.getbands() and image.getchannel("A").getextrema()[0] < 255:
                problems.append(f"cell {index}: the figure has a transparent background")
        if "interactive-twin" in cell.metadata.get("tags", []):
            html = [o.data.get("text/html", "") for o in displays]
            if pngs or len(html) != 1 or 'class="mm-explorer"' not in html[0]:
                problems.append(f"cell {index}: an interactive-twin cell must display exactly "
                                "one output, the HTML of explore.interactive, and no image")
        if "figure" in options and len(displays) != 1:
            problems.append(f"cell {index}: a figure cell must display exactly one output, "
                            f"it displayed {len(displays)}")
        for out in displays:
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            plain = next((v for k, v in out.data.items() if k.endswith("text/plain")), "")
            if name and plain.startswith("np."):
                problems.append(f"cell {index}: glue {name!r} holds a numpy scalar ({plain}); "
                                "glue float(x) or int(x)")
    return problems


def glued_values(nb) -> dict[str, dict]:
    """Every myst-nb glue output of an executed notebook: name -> mime bundle."""
    return {out.metadata["scrapbook"]["name"]: dict(out.data)
            for cell in nb.cells if cell.cell_type == "code"
            for out in cell.outputs if "scrapbook" in out.get("metadata", {})}


def export_problems(source, runnable, values, config) -> list[str]:
    """What is wrong with the export of ``source`` filled with ``values`` (the glue of the
    executed ``runnable``): changed code, a missing install cell, MyST residue, quoted values
    that are not glued or not shown."""
    plain = export.export_notebook(source, values, config=config)
    nbformat.validate(plain)
    problems = []
    if [c.source for c in plain.cells if c.cell_type == "code"] != \
            [c.source for c in runnable.cells if c.cell_type == "code"
             and export.GLUE_TAG not in c.metadata.get("tags", [])]:
        problems.append("the exported code cells differ from the ones executed (less the "
                        "hidden cells that glue the checks' numbers)")
    if [c for c in plain.cells if c.cell_type == "code"][0].metadata.get("export") != \
            {"install": True}:
        problems.append("the first code cell of the export is not the install cell")
    problems += [f"MyST residue in markdown cell {i}: {r}" for i, cell in enumerate(plain.cells)
                 if cell.cell_type == "markdown" for r in residue(cell.source)]
    text = "\n".join(c.source for c in plain.cells if c.cell_type == "markdown")
    quoted = {m.split("::")[-1].rsplit(":", 1)[0] if ":" in m.split("::")[-1] else m
              for m in GLUE_ROLE.findall(source.read_text(encoding="utf8"))}
    used = plain.metadata["export"]["glue"]
    if set(used) != quoted:
        problems.append(f"glued values not quoted: {sorted(quoted ^ set(used))}")
    missing = {key: shown for key, shown in used.items() if shown not in text}
    if missing:
        problems.append(f"glued values that do not appear in the prose: {missing}")
    return problems


@pytest.mark.chapter
@pytest.mark.parametrize("docname", PAGES)
def test_chapter(docname, reader, tmp_path, record_chapter):
    """The page executes as a reader runs it; its outputs follow the figure and glue rules; its
    export reads without MyST; the run is saved for the rest of the suite. Its wall time is
    recorded against the budget (a measurement: `make bench` checks the budget on an idle
    machine), never asserted, so a busy machine passes."""
    assert not tmp_path.resolve().is_relative_to(ROOT.resolve())
    recorded(docname, lambda: _check_chapter(docname, reader, tmp_path), record_chapter)


def _check_chapter(docname, reader, tmp_path) -> float:
    """Execute and check one page; returns its wall seconds (failures raise, carrying them)."""
    from nbclient.exceptions import CellExecutionError

    source = source_path(docname)
    config = export.read_config()
    page = read_notebook(source)
    runnable = page.copy()
    first_code = next(i for i, c in enumerate(runnable.cells) if c.cell_type == "code")
    runnable.cells = [*page.cells[:first_code], export.install_cell(config),
                      *page.cells[first_code:]]
    runnable = clean_for_export(runnable)
    start = time.perf_counter()
    try:
        run = execute(runnable, reader, tmp_path, rerun=docname == REPRODUCED_CHAPTER)
    except CellExecutionError as exc:
        failure = pytest.fail.Exception(
            f"{docname} failed to execute: {describe_failure(runnable, exc)}", pytrace=False)
        failure.chapter_seconds = time.perf_counter() - start
        raise failure from None
    try:
        _check_run(docname, source, config, page, runnable, run)
    except BaseException as exc:
        exc.chapter_seconds = run.seconds
        raise
    return run.seconds


def _check_run(docname, source, config, page, runnable, run) -> None:
    """The checks of one executed page (outputs, export, re-run, second environment)."""
    ran = executed.with_outputs(page, runnable, skip=1)
    executed.save(docname, ran, run.seconds, how="tests/chapters: the exported notebook in a "
                  "reader's environment outside the repository")

    problems = output_problems(ran)
    problems += export_problems(source, runnable, export.harvest_glue(runnable), config)
    assert not problems, f"{docname}:\n" + "\n".join(problems)
    assert not run.changed, "re-running cells after the exercises changed their outputs:\n" + \
        "\n".join(f"code cell {i}: {a} -> {b}" for i, a, b in run.changed)

    if docname == REPRODUCED_CHAPTER:
        again, _, failure = execute_in_repository(source)
        if failure:
            pytest.fail(f"{docname} failed in the repository's environment: {failure}",
                        pytrace=False)
        first, second = glued_values(ran), glued_values(again)
        if not first:
            message = (f"{docname} glues no values yet, so there is nothing to compare; "
                       "chapters must glue their checked numbers (CONTRIBUTING.md)")
            if in_ci():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        differ = sorted(k for k in first.keys() | second.keys() if first.get(k) != second.get(k))
        assert not differ, f"glued values differ between two runs: {differ}"


def test_the_rerun_check_sees_a_changed_output(reader, tmp_path):
    """The re-run comparison can fail: a generator created in one cell and drawn from in the
    next gives another number when that cell is run again."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import numpy as np\nrng = np.random.default_rng(0)"),
        nbformat.v4.new_code_cell("print(rng.normal())"),
        nbformat.v4.new_code_cell("print(np.random.default_rng(0).normal())")])
    assert [index for index, _, _ in execute(nb, reader, tmp_path, rerun=True).changed] == [1]


@pytest.mark.parametrize("line, what", [
    ("{'GD': 0.9784902943378606, 'NGD': 0.9993558912037398}", "a dict"),
    ("({4.0: 2.46, 8.0: 4.2, 16.0: 4.96},", "a dict"),
    ("array([0.8446, 0.1711, 0.    ])", "a numpy repr"),
    ("[((0,), (1, 0, 0), True), ((1,), (0, 1, 0), True)]", "a list of tuples or lists"),
    ("[[1.  0.5 0.5 0.5 0.5 0.5 0.5]", "a list of tuples or lists"),
    ("TrapSet(sequences=(0,), selection=(1, 0), escape_gap=2.0)", "a dataclass repr"),
    ("settled tokens (0-based): [0 0 0 0 1 1]", "a numpy array"),
    ("u_mm = [0.9801 0.1986 0.    ]", "a numpy array"),
    ("at steps [np.int64(5250), np.int64(8750)]", "a numpy repr"),
    ("penalty [0.001, 0.0001, 1e-05, 1e-06]", "a list of numbers"),
    ("0.31326168751822286", "a bare float with more than 6 significant digits"),
    ("rho = 60, R = 20: 6.291230090484487e-09 degrees", "a float's full repr"),
    # what a chapter may print: formatted numbers, intervals, vectors, shapes, tables
    ("u_mm = (0.9801, 0.1986, 0), margin 1/||p_mm|| = 1.1604", None),
    ("converged, optimal tokens         4897 [95.05, 96.17]%", None),
    ("X: shape (3, 7, 3) (n, T, d); labels Y = (1, 1, 1)", None),
    ("p2* = -47.040784", None),
    ("{0}           (1, 0, 0)  (1, 0)            2  yes", None),
])
def test_the_raw_repr_check_sees_each_kind(line, what):
    """Bug caught (issue 39): a result printed as Python's repr (11 outputs in chapter 3, 7 in
    chapter 7) passes the output check; and the check must not refuse formatted output."""
    assert line_problem(line) == what


def test_saved_runs_are_dropped_when_their_inputs_change(tmp_path):
    """A saved run whose page, library or pins changed is not reused (a stale number would
    reach the site and the exported notebooks); nor are outputs pinned to other code."""
    import shutil

    book = tmp_path / "book"
    (book / "lib" / "maxmargin").mkdir(parents=True)
    (book / "lib" / "maxmargin" / "core.py").write_text("x = 1\n")
    (book / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (book / "constraints.txt").write_text("numpy==2.4.6\n")
    (book / "page.md").write_text((ROOT / "tests" / "site" / "data" / "sample_chapter.md")
                                  .read_text())
    page = read_notebook(book / "page.md")
    executed.save("page", page, 1.5, how="test", root=book)
    assert executed.load("page", book) is not None
    for path, edit in ((book / "page.md", "\nA new sentence.\n"),
                       (book / "lib" / "maxmargin" / "core.py", "y = 2\n"),
                       (book / "pyproject.toml", "# another pin\n"),
                       (book / "constraints.txt", "scipy==1.17.1\n")):
        kept = path.read_text()
        path.write_text(kept + edit)
        assert executed.load("page", book) is None, f"an edit of {path.name} was not noticed"
        path.write_text(kept)
        assert executed.load("page", book) is not None
    (book / "lib" / "maxmargin" / "new.py").write_text("z = 3\n")
    assert executed.load("page", book) is None, "a new library file was not noticed"
    shutil.rmtree(book / "lib" / "maxmargin")
    other = page.copy()
    other.cells = [c.copy() for c in page.cells]
    code = next(c for c in other.cells if c.cell_type == "code")
    code.source += "\nprint('changed')"
    with pytest.raises(ValueError, match="code cells differ"):
        executed.with_outputs(page, other)


def test_the_timings_record_status_and_time_apart(tmp_path, monkeypatch):
    """A page that executed but failed a later check is recorded as failed with its time (the
    old record said "passed" before the checks ran); a slow page that passes is recorded as
    passed and over the budget (time is a measurement, not a verdict); a page that never
    finished has no time."""
    import json

    import chapter_exec

    monkeypatch.setattr(chapter_exec, "TIMINGS", tmp_path / "chapters.json")
    record = chapter_exec.record_timing

    def fails_after_running():
        exc = pytest.fail.Exception("the export quotes a value it does not glue", pytrace=False)
        exc.chapter_seconds = 12.5
        raise exc

    def hangs():
        raise KeyboardInterrupt

    with pytest.raises(pytest.fail.Exception):
        recorded("a", fails_after_running, record)
    assert recorded("b", lambda: chapter_exec.BUDGET_S * 3, record) == chapter_exec.BUDGET_S * 3
    with pytest.raises(KeyboardInterrupt):
        recorded("c", hangs, record)
    data = json.loads((tmp_path / "chapters.json").read_text())
    assert {k: (v["status"], v["seconds"], v["over_budget"]) for k, v in data.items()} == {
        "a": ("failed", 12.5, False), "b": ("passed", chapter_exec.BUDGET_S * 3, True),
        "c": ("failed", None, None)}
    assert data["a"]["reason"] == "the export quotes a value it does not glue"
