"""Course packs: students get every task and stub but no solution; instructors get everything."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from bookutils import ROOT, chapter_notebooks, read_notebook, scan

SAMPLE = Path(__file__).parent / "data" / "sample_chapter.md"
SOURCES = chapter_notebooks() + [SAMPLE]
SOLUTION_MARKERS = ("{solution-start}", "{solution-end}", "{solution}")


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("course")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_course.py"), str(out),
                    *map(str, SOURCES)], check=True, capture_output=True, text=True)
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


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_course_packs(source, packs):
    nb = read_notebook(source)
    _, exercises = scan(nb)
    student = load(packs / "student" / f"{source.stem}.ipynb")
    instructor = load(packs / "instructor" / f"{source.stem}.ipynb")
    student_text = text_of(student)

    assert [c.source for c in instructor.cells] == [c.source for c in nb.cells], \
        "the instructor notebook must hold every cell of the chapter"
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
    assert "{numref}`fig-sample-softmax`" in student
