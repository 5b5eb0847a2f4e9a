"""Course packs: students get every task and stub but no solution; instructors get everything;
the nbgrader source grades with nbgrader itself; the library ships as a wheel that installs."""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement

from bookutils import ROOT, chapter_notebooks, in_ci, read_notebook
from gates import scan
import make_course
from make_course import CourseError, empty_outdir, select_chapters

SAMPLE = Path(__file__).parent / "data" / "sample_chapter.md"
SOURCES = chapter_notebooks() + [SAMPLE]
SOLUTION_MARKERS = ("{solution-start}", "{solution-end}", "{solution}")
# The round trip through nbgrader: the sample and the fastest real chapter with exercises.
GRADED = [ROOT / "chapters" / "06-joint-training.md", SAMPLE]
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def run_make_course(outdir: Path, *chapters) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "make_course.py"), str(outdir),
                           *map(str, chapters)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("course")
    run = run_make_course(out, *SOURCES)
    assert run.returncode == 0, run.stderr
    return out


def load(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return nb


def text_of(nb) -> str:
    return "\n".join(cell.source for cell in nb.cells)


def defined_names(source: str) -> set[str]:
    """Names bound at the top level of a cell (def, class, import, assignment)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def used_names(source: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}


def function_heads(source: str) -> list[tuple[str, str, str | None]]:
    """(name, arguments, docstring) of each top-level function of a cell."""
    return [(n.name, ast.unparse(n.args), ast.get_docstring(n)) for n in ast.parse(source).body
            if isinstance(n, ast.FunctionDef)]


def is_subsequence(short: list, long: list) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def grader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_course_packs(source, packs):
    nb = read_notebook(source)
    _, exercises = scan(nb)
    student = load(packs / "student" / f"{source.stem}.ipynb")
    instructor = load(packs / "instructor" / f"{source.stem}.ipynb")
    student_text = text_of(student)

    chapter_code = [c.source for c in nb.cells if c.cell_type == "code"
                    and "glue" not in c.metadata.get("tags", [])]
    assert is_subsequence(chapter_code, [c.source for c in instructor.cells]), \
        "the instructor notebook must hold every code cell of the chapter but its glue cells, " \
        "in order"
    assert all(not c.get("outputs") for c in student.cells + instructor.cells), "packs have outputs"
    left = [m for m in SOLUTION_MARKERS if m in student_text]
    assert not left, f"solution directives left in the student notebook: {left}"

    solution_code = [s for e in exercises.values() for s in e.solutions]
    other_code = {line.strip() for c in nb.cells if c.cell_type == "code"
                  and c.source not in solution_code for line in c.source.splitlines()}
    leaked = {line.strip() for s in solution_code for line in s.splitlines()
              if len(line.strip()) >= 12 and line.strip() not in other_code} & \
             {line.strip() for line in student_text.splitlines()}
    assert not leaked, f"solution code in the student notebook: {sorted(leaked)}"

    # Students run the notebook with stubs for solutions: only exercise checks may use their names.
    stubs = {s for e in exercises.values() for s in e.stubs}
    checks = {s for e in exercises.values() for s in e.checks}
    others = [c.source for c in student.cells if c.cell_type == "code" and c.source not in stubs]
    solution_only = set().union(set(), *map(defined_names, solution_code)) - set().union(
        set(), *map(defined_names, others))
    dependent = {name for src in others if src not in checks
                 for name in used_names(src) & solution_only}
    assert not dependent, f"cells outside solutions use names only a solution defines: {dependent}"

    for label, exercise in exercises.items():
        assert exercise.stubs, f"exercise {label} has no cell tagged exercise-stub"
        assert exercise.has_solution, f"exercise {label} has no solution"
        assert all(stub in student_text for stub in exercise.stubs), f"{label}: stub missing"
        assert all(check in student_text for check in exercise.checks), f"{label}: check missing"
        stub_names = set().union(*(defined_names(s) for s in exercise.stubs))
        solution_names = set().union(set(), *(defined_names(s) for s in exercise.solutions))
        assert stub_names <= solution_names or not exercise.solutions, (
            f"{label}: the solution does not define {sorted(stub_names - solution_names)} "
            "from the stub")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_nbgrader_source(source, packs):
    """The nbgrader version: each stub an answer cell holding the solution between nbgrader's
    markers inside the stub's functions, each check a locked test cell with points, every other
    cell locked, and the same code as the student pack outside the answers."""
    _, exercises = scan(read_notebook(source))
    graded = load(packs / "nbgrader" / "source" / source.stem / f"{source.stem}.ipynb")
    student = load(packs / "student" / f"{source.stem}.ipynb")
    metas = [grader(c) for c in graded.cells]
    assert all(m.get("schema_version") == 3 for m in metas), "a cell lacks nbgrader metadata"
    ids = [m["grade_id"] for m in metas]
    assert len(ids) == len(set(ids)), "grade ids repeat"

    answers = [c for c in graded.cells if grader(c)["solution"]]
    tests = [c for c in graded.cells if grader(c)["grade"]]
    assert all(not grader(c)["locked"] and c.cell_type == "code" for c in answers)
    assert all(BEGIN in c.source and END in c.source for c in answers), "an answer has no region"
    assert [c.source for c in tests] == [s for e in exercises.values() for s in e.checks], \
        "the test cells must be the exercise checks, in order"
    assert all(grader(c)["locked"] and grader(c)["points"] > 0 and not grader(c)["solution"]
               for c in tests)
    rest = [c for c in graded.cells if c not in answers and c not in tests]
    assert all(grader(c)["locked"] for c in rest), "a read-only cell is not locked"

    stubs = [s for e in exercises.values() for s in e.stubs]
    for stub in stubs:
        matches = [c for c in answers if function_heads(c.source) == function_heads(stub)]
        assert len(matches) == 1, f"no answer cell keeps the heads of the stub\n{stub}"
        inside = matches[0].source.split(BEGIN, 1)[1].split(END, 1)[0]
        solution_lines = {line.strip() for e in exercises.values() for s in e.solutions
                          for line in s.splitlines() if line.strip()}
        assert {line.strip() for line in inside.splitlines() if line.strip()} <= solution_lines
    code = [c.source for c in graded.cells if c.cell_type == "code" and c not in answers]
    student_code = [c.source for c in student.cells if c.cell_type == "code"
                    and c.source not in stubs]
    assert code == student_code, "outside the answers, nbgrader's cells must be the student's"


def test_sample_is_split_at_the_gates(packs):
    """The sample chapter keeps the task, stub, check and later prose, and loses the solution."""
    _, exercises = scan(read_notebook(SAMPLE))
    assert set(exercises) == {"ex-sample-softmax"}
    student = text_of(load(packs / "student" / f"{SAMPLE.stem}.ipynb"))
    assert "Write `stable_softmax(a)`" in student
    assert "raise NotImplementedError" in student
    assert "stable_softmax(np.array([1000.0" in student
    assert "Subtract the largest entry first" not in student
    assert "e = np.exp(a - a.max())" not in student
    assert "shows attention concentrating on one token" in student


def test_packs_hold_no_glue(packs):
    """No code cell of any pack calls myst-nb's glue or imports myst_nb; the checks' code is
    folded. Bug caught: every check cell ended in glue(...) calls that do nothing in a pack
    (the numbers are already in its prose), and the packs' first cells imported myst_nb, so
    students had to install myst-nb (and Sphinx, docutils, jupyter-cache, SQLAlchemy with it)."""
    checks = {c.source for source in SOURCES for c in read_notebook(source).cells
              if "check" in c.metadata.get("tags", [])}
    found, unfolded = [], []
    for path in sorted(packs.rglob("*.ipynb")):
        for i, cell in enumerate(load(path).cells):
            if cell.cell_type != "code":
                continue
            if re.search(r"\bglue\(|myst_nb", cell.source):
                found.append(f"{path.relative_to(packs)} cell {i}: {cell.source[:80]!r}")
            if cell.source in checks and not (cell.metadata.get("jupyter", {}).get("source_hidden")
                                              and cell.metadata.get("cellView") == "form"):
                unfolded.append(f"{path.relative_to(packs)} cell {i}")
    assert not found, "glue in the packs:\n" + "\n".join(found[:20])
    assert checks and not unfolded, "check cells not folded:\n" + "\n".join(unfolded[:20])


def test_packs_show_no_myst(packs):
    """Every pack's Markdown, rendered by a plain CommonMark renderer, has no MyST left
    (the same residue list as the exported notebooks' test, tests/notebooks/residue.py)."""
    sys.path.insert(0, str(ROOT / "tests" / "notebooks"))
    from residue import residue

    found = []
    for path in sorted(packs.rglob("*.ipynb")):
        for i, cell in enumerate(load(path).cells):
            if cell.cell_type == "markdown":
                found += [f"{path.relative_to(packs)} cell {i}: {hit}"
                          for hit in residue(cell.source)]
    assert not found, "MyST residue:\n" + "\n".join(found[:20])


def test_partial_packs_have_no_dead_links(graded_packs):
    """In a pack of some chapters (06 and the sample), links to a chosen chapter open its
    notebook beside, links to any other page open the page on the site, and no link leads to
    a page's MyST source; each nbgrader assignment, a folder of its own, links only to the
    site. Bug caught: every exported chapter linked as a sibling notebook, dead in a pack
    without it (the pack of 06 linked the notebook of chapter 03)."""
    from notebook_links import dead_links, hrefs

    notebooks = sorted(graded_packs.rglob("*.ipynb"))
    dead = [f"{p.relative_to(graded_packs)}: {d}" for p in notebooks for d in dead_links(p, None)]
    assert not dead, "\n".join(dead)
    nbgrader_links = [h for p in notebooks if "nbgrader" in p.parts for h in hrefs(load(p))]
    assert nbgrader_links and not any(h.endswith(".ipynb") for h in nbgrader_links), \
        nbgrader_links


def test_export_is_plugged_into_every_pack(tmp_path, monkeypatch):
    """Every pack's notebooks go through the export (the module `export` of scripts/; here a
    stand-in that adds a first cell), once per chapter for the glue values, after the pack's
    transform; a cell the export adds to the nbgrader version is locked."""
    import types

    import nbformat.v4 as v4

    calls = {"glue": [], "plain": []}

    def glue_values(source):
        calls["glue"].append(source)
        return {"sample-shift-err": 0.0}

    def plain_notebook(nb, docname, values, *, notebook_dir_map):
        calls["plain"].append((docname, values, notebook_dir_map))
        nb = nbformat.from_dict(nb)
        nb.cells.insert(0, v4.new_code_cell("# added by the export"))
        return nb

    fake = types.SimpleNamespace(glue_values=glue_values, plain_notebook=plain_notebook)
    monkeypatch.setitem(sys.modules, "export", fake)
    make_course.make_course(tmp_path / "out", [SAMPLE])
    assert calls["glue"] == [SAMPLE.resolve()]
    page, values = "tests/site/data/sample_chapter", {"sample-shift-err": 0.0}
    beside = {page: "sample_chapter.ipynb"}   # student/ and instructor/; nbgrader: none
    assert sorted(calls["plain"], key=str) == sorted(
        [(page, values, beside), (page, values, beside), (page, values, {})], key=str)
    for path in ("student", "instructor", "nbgrader/source/sample_chapter"):
        nb = load(tmp_path / "out" / path / "sample_chapter.ipynb")
        assert nb.cells[0].source == "# added by the export", path
    graded = load(tmp_path / "out" / "nbgrader/source/sample_chapter/sample_chapter.ipynb")
    assert grader(graded.cells[0])["locked"] and not grader(graded.cells[0])["solution"]


# ----------------------------------------------------------------------------- selection, folder

def test_chapters_are_selected_and_ordered():
    """Numbers, names and paths pick chapters in the order given; mistakes are named."""
    by_number = select_chapters(["3", "01"])
    assert [p.stem for p in by_number] == ["03-gd-to-svm", "01-attention-model"]
    assert select_chapters(["06-joint-training", "attention-model", str(SAMPLE)]) == [
        ROOT / "chapters" / "06-joint-training.md", ROOT / "chapters" / "01-attention-model.md",
        SAMPLE.resolve()]
    assert select_chapters([]) == chapter_notebooks()
    with pytest.raises(CourseError, match=r"no chapter match '99'.*01-attention-model"):
        select_chapters(["99"])
    with pytest.raises(CourseError, match="given twice"):
        select_chapters(["01", "01-attention-model"])


def test_output_folder_is_emptied_only_when_it_is_a_pack(tmp_path):
    """make course empties its own earlier output (stale chapters disappear) and refuses the
    repository, a folder containing it, and a folder with files it did not write."""
    for folder in (ROOT, ROOT.parent):
        with pytest.raises(CourseError, match="repository"):
            empty_outdir(folder)
    notes = tmp_path / "notes"
    (notes / "student").mkdir(parents=True)
    (notes / "student" / "01-attention-model.ipynb").write_text("{}")
    (notes / "gradebook.db").write_text("grades")
    with pytest.raises(CourseError, match="gradebook.db"):
        empty_outdir(notes)
    assert (notes / "gradebook.db").exists(), "a refused folder was touched"

    old = tmp_path / "old"      # a pack of the first make_course.py: notebooks only
    (old / "instructor" / ".ipynb_checkpoints").mkdir(parents=True)
    (old / "instructor" / "99-gone.ipynb").write_text("{}")
    (old / "instructor" / ".ipynb_checkpoints" / "99-gone-checkpoint.ipynb").write_text("{}")
    empty_outdir(old)
    assert old.is_dir() and not any(old.iterdir())


def test_make_course_target_passes_chapters():
    """`make course CHAPTERS="01 03"` hands the selection to make_course.py."""
    run = subprocess.run(["make", "-n", "course", "CHAPTERS=01 03"],
                         cwd=ROOT, capture_output=True, text=True)
    assert re.search(r"scripts/make_course\.py course 01 03\s*$", run.stdout, re.M), run.stdout


@pytest.fixture(scope="module")
def graded_packs(tmp_path_factory) -> Path:
    """Packs of GRADED written over a stale pack (an earlier run with another chapter)."""
    out = tmp_path_factory.mktemp("graded") / "course"
    (out / "student").mkdir(parents=True)
    (out / "student" / "99-stale.ipynb").write_text("{}")
    (out / make_course.MANIFEST).write_text(json.dumps({"files": ["student/99-stale.ipynb"]}))
    run = run_make_course(out, *GRADED)
    assert run.returncode == 0, run.stderr
    return out


def test_rerun_replaces_the_pack(graded_packs):
    stems = [p.stem for p in GRADED]
    for pack in ("student", "instructor"):
        notebooks = sorted(p.stem for p in (graded_packs / pack).glob("*.ipynb"))
        assert notebooks == sorted(stems), f"{pack}/ holds {notebooks}"
    assert sorted(p.name for p in (graded_packs / "nbgrader" / "source").iterdir()) == \
        sorted(stems)
    manifest = json.loads((graded_packs / make_course.MANIFEST).read_text())
    assert manifest["chapters"] == stems
    on_disk = sorted(str(p.relative_to(graded_packs)) for p in graded_packs.rglob("*")
                     if p.is_file() and p.name != make_course.MANIFEST)
    assert manifest["files"] == on_disk


# ----------------------------------------------------------------------------- README, wheel

def wheel_of(folder: Path) -> Path:
    wheels = list(folder.glob("maxmargin-*.whl"))
    assert len(wheels) == 1, f"{folder} must hold exactly one wheel: {wheels}"
    return wheels[0]


@pytest.mark.parametrize("pack", ["student", "instructor", "nbgrader/source/sample_chapter"])
def test_readme_tells_students_what_to_do(pack, packs):
    """The README installs the wheel that is beside it (after the CPU-only PyTorch on Linux),
    lists the notebooks that are beside it, and says how the exercises are checked."""
    folder = packs / pack
    text = (folder / "README.md").read_text()
    torch = next(line for line in (ROOT / "constraints.txt").read_text().splitlines()
                 if line.startswith("torch=="))
    assert f"pip install {torch} --index-url https://download.pytorch.org/whl/cpu" in text
    assert f'pip install -c constraints.txt "./{wheel_of(folder).name}[book]"' in text
    # the pins beside the wheel are the book's (the install line above uses them)
    assert (folder / "constraints.txt").read_bytes() == (ROOT / "constraints.txt").read_bytes()
    assert "jupyter lab" in text and "## How the exercises are checked" in text
    listed = re.findall(r"^- `([^`]+\.ipynb)`", text, re.M)
    assert sorted(listed) == sorted(p.name for p in folder.glob("*.ipynb"))


def test_wheel_holds_the_library(packs):
    """The wheel has every module of lib/maxmargin (maxmargin.book included) and the
    requirements of pyproject.toml; all packs carry the same wheel."""
    wheel = wheel_of(packs / "student")
    expected = {str(p.relative_to(ROOT / "lib")) for p in (ROOT / "lib" / "maxmargin").rglob("*.py")
                if "__pycache__" not in p.parts}
    assert "maxmargin/book/plots.py" in expected
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        meta = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"
    assert not {n for n in names if n.endswith(".py")} - expected, "the wheel has extra modules"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requires = {line.split(":", 1)[1].strip() for line in meta.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line}
    # the library's own ranges (not the book's pins), as Requirement objects: the metadata
    # writes each specifier set in its own order
    assert {Requirement(r) for r in requires} == {Requirement(r) for r in project["dependencies"]}
    assert f"Requires-Python: {project['requires-python']}" in meta
    for folder in [packs / "instructor", *(packs / "nbgrader" / "source").iterdir()]:
        assert wheel_of(folder).read_bytes() == wheel.read_bytes()


def clean_env(**extra) -> dict:
    """The environment without PYTHONPATH (which could point at the repository's lib/)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel_venv(graded_packs, tmp_path_factory) -> Path:
    """A fresh virtual environment outside the repository with the pack's wheel installed by
    its own pip. Its dependencies (torch, cvxpy, ..., and nbgrader) are not downloaded again:
    a .pth file appends this test environment's site-packages after the venv's own."""
    import sysconfig

    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env())
    python = venv / "bin" / "python"
    wheel = wheel_of(graded_packs / "student")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    str(wheel)], check=True, cwd=venv, env=clean_env())
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True,
                          env=clean_env()).stdout.strip()
    parents = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "zz_test_dependencies.pth").write_text("\n".join(sorted(parents)) + "\n")
    return venv


def test_wheel_installs_into_a_fresh_venv(wheel_venv):
    """`pip install maxmargin-*.whl` gives a library that imports from the venv, not the repo."""
    probe = ("import json, maxmargin, maxmargin.book.plots as plots\n"
             "print(json.dumps([maxmargin.__file__, plots.__file__]))")
    run = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", probe], cwd=wheel_venv,
                         capture_output=True, text=True, env=clean_env())
    assert run.returncode == 0, run.stderr
    for path in map(Path, json.loads(run.stdout)):
        assert wheel_venv in path.parents and ROOT not in path.parents, path


# ----------------------------------------------------------------------------- install lines
# The documented install lines are checked by resolving them with pip against the package index
# (`pip install --dry-run --report`: the exact set of distributions a user's pip would install,
# without downloading the 1.9 GB), and the nbgrader round trip runs in an environment that holds
# only that set (linked from this test environment, which has the book's pins).

TEACHING = ROOT / "chapters" / "teaching.md"


def bash_block(text: str, after: str = "", containing: str = "") -> list[str]:
    """The lines of the first ```bash block after the text ``after`` that contains
    ``containing``."""
    for block in re.findall(r"```bash\n(.*?)```", text[text.index(after):], re.S):
        if containing in block:
            return block.splitlines()
    raise AssertionError(f"no bash block with {containing!r} after {after!r}")


def pip_lines(lines: list[str], cwd: Path) -> list[list[str]]:
    """The arguments of each `pip install` line, as the shell gives them in ``cwd``: comments
    dropped, `NAME=$(ls GLOB)` lines evaluated (exactly one match), $NAME substituted. The
    CPU-only torch line (an --index-url of its own) is left out: the resolution of the other
    lines includes the pinned torch."""
    import shlex

    names, out = {}, []
    for line in lines:
        assigned = re.fullmatch(r"\s*(\w+)=\$\(ls ([^)\s]+)\)\s*", line)
        if assigned:
            found = sorted(cwd.glob(assigned[2]))
            assert len(found) == 1, f"{line}: {found}"
            names[assigned[1]] = str(found[0])
            continue
        line = re.sub(r"\$\{?(\w+)\}?", lambda m: names.get(m[1], m[0]), line)
        words = shlex.split(line, comments=True)
        # an unquoted glob (course/student/maxmargin-*.whl), as the shell expands it
        words = [str(next(iter(sorted(cwd.glob(w))), w)) if "*" in w and "[" not in w else w
                 for w in words]
        if words[:2] == ["pip", "install"] and "--index-url" not in words:
            out.append(words[2:])
    assert out, f"no pip install line in {lines}"
    return out


_resolved: dict = {}


def resolve(args: list[str], cwd: Path) -> dict[str, str]:
    """canonical name -> version of every distribution ``pip install <args>`` would install
    into an empty environment (pip resolves against the index and installs nothing)."""
    from packaging.utils import canonicalize_name

    key = (tuple(args), str(cwd))
    if key not in _resolved:
        report = cwd / ".." / f"report-{len(_resolved)}.json"
        run = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                              "--ignore-installed", "--report", str(report), *args],
                             cwd=cwd, capture_output=True, text=True, env=clean_env())
        assert run.returncode == 0, f"pip cannot resolve {args}:\n{run.stderr[-3000:]}"
        items = json.loads(report.read_text())["install"]
        _resolved[key] = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
                          for i in items}
    return _resolved[key]


def imported_modules(sources: list[str]) -> set[str]:
    """Top-level modules imported by the code ``sources`` and, through maxmargin, by every
    module of the library they import (anywhere in a file: lazy imports run too)."""
    found, seen, todo = set(), set(), list(sources)
    while todo:
        source = "\n".join(line for line in todo.pop().splitlines()   # (not a "!=" line)
                           if not re.match(r"\s*(%|!(?!=))", line))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                found.add(name.split(".")[0])
                if name.startswith("maxmargin") and name not in seen:
                    seen.add(name)
                    path = ROOT / "lib" / Path(*name.split("."))
                    for file in (path.with_suffix(".py"), path / "__init__.py"):
                        if file.is_file():
                            todo.append(file.read_text())
                    if path.is_dir():   # a package imported whole: its modules too
                        todo += [f.read_text() for f in path.glob("*.py")]
    return found - set(sys.stdlib_module_names) - {"maxmargin"}


def missing_from(resolved: dict[str, str], modules: set[str]) -> list[str]:
    """The modules no distribution of ``resolved`` provides (by this environment's map)."""
    from importlib.metadata import packages_distributions
    from packaging.utils import canonicalize_name

    provides = packages_distributions()
    unknown = sorted(m for m in modules if m not in provides)
    assert not unknown, f"modules this test environment does not have: {unknown}"
    return sorted(m for m in modules
                  if not {canonicalize_name(d) for d in provides[m]} & set(resolved))


def documented_installs(packs: Path) -> dict[str, tuple[list[list[str]], Path, set[str]]]:
    """name -> (pip arguments, folder they run in, modules needed beyond the notebooks')."""
    student = packs / "student"
    graded = next((packs / "nbgrader" / "source").iterdir())
    teaching = bash_block(TEACHING.read_text(), "On a JupyterHub with nbgrader", "nbgrader==")
    students = bash_block((student / "README.md").read_text(), "## Install")
    grading = bash_block((packs / "nbgrader" / "README.md").read_text(), "grading environment",
                         "nbgrader==")
    return {"teaching.md (JupyterHub)": (pip_lines(teaching, packs.parent),
                                         packs.parent, {"nbgrader", "ipykernel"}),
            "student README": (pip_lines(students, student), student, {"jupyterlab"}),
            "nbgrader README": (pip_lines(grading, graded), graded, {"nbgrader", "ipykernel"})}


@pytest.fixture(scope="module")
def course_dir(packs) -> Path:
    """The packs as `course/` (teaching.md's lines name course/student/...)."""
    course = packs.parent / "course"
    if not course.exists():
        course.symlink_to(packs, target_is_directory=True)
    return course


@pytest.mark.parametrize("doc", ["teaching.md (JupyterHub)", "student README", "nbgrader README"])
def test_documented_install_lines_bring_what_the_notebooks_import(doc, course_dir):
    """Each documented install line, resolved by pip against the index, brings a distribution
    for every module the pack notebooks import (and the library modules they import, lazily
    too), and the tools the line is for. Bug caught: teaching.md's JupyterHub line installed
    the wheel without [book] (no Matplotlib: autograde gave the chapter 7 solution 1 of 2
    points with 26 errors). The notebooks no longer import myst-nb (their glue cells are left
    out), so none of the lines needs to bring it."""
    args, cwd, tools = documented_installs(course_dir)[doc]
    notebooks = sorted((course_dir / "instructor").glob("*.ipynb"))
    modules = imported_modules([c.source for p in notebooks for c in load(p).cells
                                if c.cell_type == "code"]) | tools
    assert {"matplotlib", "numpy", "torch"} <= modules and "myst_nb" not in modules, modules
    resolved = {}
    for line in args:
        resolved |= resolve(line, cwd)
    assert "maxmargin" in resolved, f"{doc}: the line does not install the wheel"
    missing = missing_from(resolved, modules)
    assert not missing, f"{doc}: `pip install {' '.join(args[0])}` leaves out {missing}"


def test_every_inline_install_of_the_wheel_has_the_book_extra():
    """Prose that tells a reader how to install the pack's wheel (README.md, teaching.md, the
    pack READMEs' templates) installs it with [book]. Bug caught: README's course-pack line
    `pip install maxmargin-*.whl` (no Matplotlib for the notebooks)."""
    texts = {p: p.read_text() for p in [ROOT / "README.md", TEACHING,
                                        *(ROOT / "scripts" / "course_templates").glob("*.md")]}
    lines = [(p.name, m[0]) for p, text in texts.items()
             for m in re.finditer(r"pip install[^`\n]*(?:maxmargin|\$wheel)[^`\n]*", text)]
    assert len(lines) >= 4, lines
    bare = [line for line in lines if "[book]" not in line[1]]
    assert not bare, bare


@pytest.fixture(scope="module")
def documented_venv(graded_packs, tmp_path_factory) -> Path:
    """A fresh virtual environment holding only what teaching.md's JupyterHub lines install:
    the pack's wheel installed by the venv's pip, and each other distribution pip resolves those
    lines to, linked from this test environment (same pins, no 1.9 GB download). A package the
    lines leave out (Matplotlib without [book]) is missing there, as on the hub."""
    from importlib.metadata import distributions
    from packaging.utils import canonicalize_name

    base = tmp_path_factory.mktemp("documented")
    course = base / "course"
    course.symlink_to(graded_packs, target_is_directory=True)
    args = pip_lines(bash_block(TEACHING.read_text(), "On a JupyterHub with nbgrader",
                                "nbgrader=="), base)
    resolved = {}
    for line in args:
        resolved |= resolve(line, base)
    venv = base / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   env=clean_env())
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                "get_paths()['purelib'])"], check=True, capture_output=True,
                               text=True, env=clean_env()).stdout.strip())
    linked = base / "linked"
    linked.mkdir()
    here = {canonicalize_name(d.metadata["Name"]): d for d in distributions()}
    for name in resolved:
        if name == "maxmargin" or name not in here:
            continue    # the wheel is installed below; a drifted unpinned extra is left out
        dist = here[name]
        for top in {Path(f).parts[0] for f in dist.files or []}:
            if top in ("..", "__pycache__") or top.endswith(".pth") or (linked / top).exists():
                continue
            (linked / top).symlink_to(dist.locate_file(top))
        for entry in dist.entry_points.select(group="console_scripts"):   # alembic, jupyter...
            module, _, attr = entry.value.partition(":")
            script = venv / "bin" / entry.name
            script.write_text(f"#!{python}\nimport sys\nfrom {module} import {attr.split('.')[0]}"
                              f"\nsys.exit({attr.strip()}())\n")
            script.chmod(0o755)
    (site / "zz_documented.pth").write_text(f"{linked}\n")
    wheel = wheel_of(graded_packs / "student")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True, cwd=base,
                   env=clean_env())
    return venv


# ----------------------------------------------------------------------------- nbgrader

def require_nbgrader() -> None:
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        message = "nbgrader is missing: pip install -e '.[book,test]' (the test extra pins it)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def nbgrader(course: Path, venv: Path, *args: str) -> str:
    """Run nbgrader's command line in ``course`` with the venv's Python, so the kernels that
    execute the notebooks are that Python and import the library from the wheel."""
    kernels = course.parent / "jupyter" / "kernels" / "python3"
    if not kernels.exists():
        kernels.mkdir(parents=True)
        (kernels / "kernel.json").write_text(json.dumps({
            "argv": [str(venv / "bin" / "python"), "-m", "ipykernel_launcher", "-f",
                     "{connection_file}"], "display_name": "Python 3", "language": "python"}))
    path = os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")])
    env = clean_env(PATH=path, JUPYTER_PATH=str(course.parent / "jupyter"),
                    JUPYTER_CONFIG_DIR=str(course.parent / "config"))
    run = subprocess.run([str(venv / "bin" / "python"), "-m", "nbgrader", *args], cwd=course,
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{run.stderr[-5000:]}"
    return run.stderr


def errors(nb) -> dict[str, str]:
    """grade_id -> the error name of each code cell that raised."""
    return {grader(c).get("grade_id", f"cell {i}"): o.ename for i, c in enumerate(nb.cells)
            if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"}


def test_nbgrader_round_trip(graded_packs, documented_venv, tmp_path):
    """nbgrader generate_assignment, then autograde of the instructor's notebook (full marks)
    and of the untouched student version (zero on every exercise, no error anywhere else),
    read from nbgrader's gradebook; the student version is the student pack's notebook."""
    require_nbgrader()
    from nbgrader.api import Gradebook

    wheel_venv = documented_venv
    course = tmp_path / "course"
    shutil.copytree(graded_packs / "nbgrader" / "source", course / "source")
    # the pack's own settings (its per-cell timeout), as the nbgrader README has instructors do
    shipped = (graded_packs / "nbgrader" / "nbgrader_config.py").read_text()
    (course / "nbgrader_config.py").write_text(
        shipped + '\nc.CourseDirectory.course_id = "maxmargin"\n')
    nbgrader(course, wheel_venv, "generate_assignment", "*", "--force")
    names = [p.stem for p in GRADED]
    for name in names:
        release = load(course / "release" / name / f"{name}.ipynb")
        student = load(graded_packs / "student" / f"{name}.ipynb")
        _, exercises = scan(read_notebook(next(p for p in GRADED if p.stem == name)))
        stubs = [s for e in exercises.values() for s in e.stubs]
        answers = [c for c in release.cells if grader(c).get("solution")]
        assert all(BEGIN not in c.source for c in release.cells), "a solution was released"
        assert [h for c in answers for h in function_heads(c.source)] == \
            [h for s in stubs for h in function_heads(s)], "released stubs differ from ours"
        code = [c.source for c in release.cells if c.cell_type == "code" and c not in answers]
        assert code == [c.source for c in student.cells if c.cell_type == "code"
                        and c.source not in stubs], "the release differs from the student pack"
        for who, folder in (("instructor", "source"), ("student", "release")):
            target = course / "submitted" / who / name
            target.mkdir(parents=True)
            shutil.copy(course / folder / name / f"{name}.ipynb", target)
        # chapters/teaching.md: a solved notebook without nbgrader's metadata (the instructor
        # pack's, as one from Binder) gets no points, so it must be graded by running it.
        target = course / "submitted" / "unreleased" / name
        target.mkdir(parents=True)
        shutil.copy(graded_packs / "instructor" / f"{name}.ipynb", target)
    nbgrader(course, wheel_venv, "autograde", "*", "--force")

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for name in names:
            _, exercises = scan(read_notebook(next(p for p in GRADED if p.stem == name)))
            checks = sum(len(e.checks) for e in exercises.values())
            for who in ("instructor", "student"):
                notebook = gradebook.find_submission_notebook(name, name, who)
                scores = {g.name: (g.score, g.max_score) for g in notebook.grades}
                assert len(scores) == checks and checks > 0, scores
                if who == "instructor":
                    assert all(s == m > 0 for s, m in scores.values()), (name, scores)
                else:
                    assert all(s == 0 < m for s, m in scores.values()), (name, scores)
            notebook = gradebook.find_submission_notebook(name, name, "unreleased")
            scores = {g.name: (g.score, g.max_score) for g in notebook.grades}
            assert sum(s or 0 for s, _ in scores.values()) == 0 < checks, \
                f"teaching.md says a notebook without nbgrader metadata scores 0: {scores}"
            graded = {who: load(course / "autograded" / who / name / f"{name}.ipynb")
                      for who in ("instructor", "student")}
            assert not errors(graded["instructor"]), errors(graded["instructor"])
            failed = errors(graded["student"])
            exercise_cells = {grader(c)["grade_id"] for c in graded["student"].cells
                              if grader(c).get("solution") or grader(c).get("grade")}
            assert set(failed) <= exercise_cells, f"a cell outside the exercises failed: {failed}"
            assert {k for k, v in failed.items() if v == "NotImplementedError"} == {
                g for g in exercise_cells if g.endswith("-check")}, failed


def test_pack_readmes_say_what_each_pack_holds_and_costs(packs):
    """The student README does not send students to a solution it lacks, and says the install
    size and the longest chapter's time; the nbgrader pack ships nbgrader_config.py with a
    per-cell timeout between the slowest cell under load (93 s) with margin and the book's hang
    guard (1200 s), and its README says so. Bugs caught: "(in the instructor's pack, after the
    solution)" in the student pack, "a chapter takes about a minute at most", no config."""
    student = (packs / "student" / "README.md").read_text()
    instructor = (packs / "instructor" / "README.md").read_text()
    assert "instructor" not in student and "after the solution" in instructor
    assert "1.9 GB" in student and "about a minute at most" not in student
    assert "chapter 3" in student and "print" in student
    namespace: dict = {}

    class Config:
        class Execute:
            timeout = 30
        CourseDirectory = None

    config = Config()
    exec((packs / "nbgrader" / "nbgrader_config.py").read_text(),
         {"get_config": lambda: config}, namespace)
    assert 3 * 93 <= config.Execute.timeout <= 1200, config.Execute.timeout
    assert "nbgrader_config.py" in (packs / "nbgrader" / "README.md").read_text()
