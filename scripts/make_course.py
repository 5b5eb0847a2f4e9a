"""Write course packs from the chapters: make_course.py OUTDIR [CHAPTER ...].

CHAPTER is a chapter number (`01`, `3`), a page name (`01-attention-model`, `intro`) or the path
of a MyST notebook (`tests/site/data/sample_chapter.md`); the packs hold them in that order.
Without CHAPTER: every notebook page of _toc.yml. OUTDIR is emptied first, but only when it
holds nothing that this script did not write (its manifest `.course-pack.json` lists that).

    OUTDIR/student/      the chapters without solutions, a README for students, the wheel
    OUTDIR/instructor/   the chapters complete, the same README and wheel
    OUTDIR/nbgrader/     an nbgrader course folder: source/<chapter>/<chapter>.ipynb (one
                         assignment per chapter, with the README and wheel), a README and
                         nbgrader_config.py (the per-cell timeout of autograde)

Every notebook goes through the same steps: read the chapter (MyST, jupytext), the pack's
transform (student / instructor / nbgrader, on the MyST exercise gates), the MyST-free export
(`export_notebook`), then outputs are dropped. The conventions are in CONTRIBUTING.md.
"""
from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import string
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import nbformat

from bookutils import ROOT, chapter_notebooks, clean_for_export, read_notebook
from gates import student_notebook
from pins import constraints
from nbgrader_source import lock_unmarked, nbgrader_notebook

MANIFEST = ".course-pack.json"
# nbgrader's settings for grading the packs (its per-cell timeout), shipped in nbgrader/.
NBGRADER_CONFIG = "nbgrader_config.py"
TEMPLATES = Path(__file__).parent / "course_templates"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Folders Jupyter and Python create next to notebooks that are opened or run: safe to delete.
DISPOSABLE = {".ipynb_checkpoints", "__pycache__"}
# What the wheel is built from (copied to a temporary folder, so the build leaves no trace here).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "lib")


class CourseError(Exception):
    """A request make_course.py refuses, with a message for the person who typed it."""


# ----------------------------------------------------------------------------- chapters

def select_chapters(tokens: list[str], root: Path = ROOT) -> list[Path]:
    """Source paths of the chapters named by ``tokens`` (numbers, page names or paths), in that
    order; every notebook page of the toc when ``tokens`` is empty."""
    pages = chapter_notebooks(root)
    if not tokens:
        return pages
    chosen = []
    for token in tokens:
        path = Path(token)
        if path.suffix in (".md", ".ipynb") and path.is_file():
            match = [path.resolve()]
        else:
            name = token.removesuffix(".md").removesuffix(".ipynb").split("/")[-1]
            match = [p for p in pages if p.stem == name
                     or (name.isdigit() and p.stem.split("-")[0].isdigit()
                         and int(p.stem.split("-")[0]) == int(name))
                     or p.stem.split("-", 1)[-1] == name]
        if len(match) != 1:
            known = ", ".join(p.stem for p in pages)
            what = "no chapter" if not match else "several chapters"
            raise CourseError(f"CHAPTERS: {what} match {token!r}; the chapters are {known} "
                              "(give a number such as 01, a name, or the path of a .md notebook)")
        if match[0] in chosen:
            raise CourseError(f"CHAPTERS: {token!r} is given twice")
        chosen.append(match[0])
    return chosen


def chapter_title(nb: nbformat.NotebookNode, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = re.search(r"^# (.+)$", cell.source, re.M)
            if m:
                return m[1].strip()
    return fallback


# ----------------------------------------------------------------------------- the output folder

def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if not p.is_dir() and not DISPOSABLE & set(p.relative_to(folder).parts))


def empty_outdir(outdir: Path, root: Path = ROOT) -> None:
    """Create ``outdir``, or empty it when it holds only what an earlier run wrote.

    Raises CourseError for the repository, a folder that contains it, or a folder with files
    that no run of make_course.py wrote (an nbgrader gradebook, notes, the chapters ...)."""
    target = outdir.resolve()
    if target == root or target in root.parents:
        raise CourseError(f"refusing to empty {outdir}: it is (or contains) the repository")
    if target.exists() and not target.is_dir():
        raise CourseError(f"{outdir} exists and is not a folder")
    if not target.exists():
        target.mkdir(parents=True)
        return
    files = _files(target)
    manifest = target / MANIFEST
    if manifest.is_file():
        written = set(json.loads(manifest.read_text())["files"]) | {MANIFEST}
    else:  # a pack of the first make_course.py: student/ and instructor/ notebooks only
        written = {f for f in files if re.fullmatch(r"(student|instructor)/[^/]+\.ipynb", f)}
    foreign = [f for f in files if f not in written]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5
                                           else "")
        raise CourseError(
            f"refusing to empty {outdir}: it does not look like a course pack written by "
            f"make course ({shown} not written by it). Move those files away, or choose "
            "another folder.")
    shutil.rmtree(target)
    target.mkdir()


# ----------------------------------------------------------------------------- the wheel

def build_wheel(dest: Path, root: Path = ROOT) -> Path:
    """Build the library's wheel into ``dest`` (no network, no build isolation) and return it.

    The build runs on a copy of the package files, so it leaves no build/ or egg-info here."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in WHEEL_SOURCES:
            if (root / name).is_dir():
                shutil.copytree(root / name, src / name, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.egg-info", "*.pyc"))
            else:
                shutil.copy2(root / name, src / name)
        run = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "--quiet", "--wheel-dir", str(Path(tmp) / "dist"), str(src)],
            capture_output=True, text=True)
        if run.returncode != 0:
            raise CourseError("building the wheel failed (it needs setuptools and wheel in "
                              f"this environment):\n{run.stdout}{run.stderr}")
        (wheel,) = (Path(tmp) / "dist").glob("maxmargin-*.whl")
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(wheel, dest / wheel.name))


# ----------------------------------------------------------------------------- READMEs

def _project(root: Path = ROOT) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]


def torch_pin(root: Path = ROOT) -> str:
    """The `torch==X` pin of constraints.txt."""
    version = constraints(root).get("torch")
    if version is None:
        raise CourseError("constraints.txt must pin torch")
    return f"torch=={version}"


def render(template: str, **values) -> str:
    """A template of scripts/course_templates/ with its $placeholders filled in (all of them)."""
    return string.Template((TEMPLATES / template).read_text()).substitute(values)


def readme(kind: str, titles: dict[str, str], wheel: Path, root: Path = ROOT) -> str:
    """The students' README of a pack: kind is "student", "instructor" or "nbgrader"."""
    python = _project(root)["requires-python"].removeprefix(">=")
    listing = "\n".join(f"- `{stem}.ipynb`: {title}" for stem, title in titles.items())
    follows = {"student": "A check cell follows it",
               "instructor": "A check cell follows (in this pack, after the solution)"}
    checks = (render("checks-nbgrader.md") if kind == "nbgrader" else
              render("checks-notebook.md", check_follows=follows[kind]))
    solutions = {"student": "The solutions are not included.",
                 "instructor": "This is the instructor's pack: every solution is included.",
                 "nbgrader": "Your instructor grades the exercises with nbgrader."}[kind]
    return render("README-student.md", chapters=listing, wheel=wheel.name, python=python,
                  torch_pin=torch_pin(root), torch_index=TORCH_CPU_INDEX, checks=checks,
                  solutions=solutions)


# ----------------------------------------------------------------------------- the export step

_glue_cache: dict[Path, dict] = {}


def docname_of(source: Path, root: Path) -> str:
    """The page name of a chapter file (its stem when it lies outside the book)."""
    try:
        return source.resolve().relative_to(root.resolve()).with_suffix("").as_posix()
    except ValueError:
        return source.stem


def export_notebook(nb: nbformat.NotebookNode, source: Path, root: Path = ROOT,
                    siblings: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """The chapter as a plain Jupyter notebook, MyST turned into Markdown (scripts/export.py).

    ``siblings``: docname -> file name of the pages whose notebooks sit beside this one in the
    pack (links to any other page go to the site). The glued values are read once per
    chapter. Packs get no install cell: their README has students install the pack's wheel,
    and the export's install cell would install the repository's main branch instead."""
    import export
    from bookindex import book_index

    source = source.resolve()
    if source not in _glue_cache:
        _glue_cache[source] = export.glue_values(source)
    docname = docname_of(source, root)
    index = book_index(root)
    if docname not in index.pages:   # a chapter outside the toc: index its own labels
        index.add_page(docname, source.read_text(encoding="utf8"))
    return export.plain_notebook(nb, docname, _glue_cache[source],
                                 notebook_dir_map=siblings if siblings is not None else {})


# ----------------------------------------------------------------------------- main

# Each returns a new notebook (the export may change what it is given).
TRANSFORMS = {"student": student_notebook, "instructor": copy.deepcopy,
              "nbgrader": nbgrader_notebook}


def make_course(outdir: Path, chapters: list[Path], root: Path = ROOT) -> list[str]:
    """Write the packs of ``chapters`` into the emptied ``outdir``; the files written."""
    empty_outdir(outdir, root)
    _glue_cache.clear()
    written: list[str] = []

    def write(relative: str, content) -> None:
        path = outdir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, nbformat.NotebookNode):
            nbformat.validate(content)
            nbformat.write(content, path)
        elif isinstance(content, Path):
            shutil.copy2(content, path)
        else:
            path.write_text(content)
        written.append(relative)

    try:
        with tempfile.TemporaryDirectory() as tmp:
            wheel = build_wheel(Path(tmp), root)
            notebooks = {path: read_notebook(path) for path in chapters}
            titles = {p.stem: chapter_title(nb, p.stem) for p, nb in notebooks.items()}
            for pack in ("student", "instructor"):
                write(f"{pack}/README.md", readme(pack, titles, wheel, root))
                write(f"{pack}/{wheel.name}", wheel)
                write(f"{pack}/constraints.txt", root / "constraints.txt")
            write("nbgrader/README.md", render(
                "README-nbgrader.md", assignments=", ".join(f"`{s}`" for s in titles),
                first=next(iter(titles)), wheel=wheel.name, torch_pin=torch_pin(root),
                torch_index=TORCH_CPU_INDEX))
            write(f"nbgrader/{NBGRADER_CONFIG}", TEMPLATES / NBGRADER_CONFIG)
            in_pack = {docname_of(path, root): f"{path.stem}.ipynb" for path in notebooks}
            for path, nb in notebooks.items():
                for pack, transform in TRANSFORMS.items():
                    # student/ and instructor/ hold every chosen chapter side by side; each
                    # nbgrader assignment is a folder of its own, so it links only to the site
                    siblings = {} if pack == "nbgrader" else in_pack
                    try:
                        out = clean_for_export(export_notebook(transform(nb), path, root,
                                                               siblings))
                    except ValueError as error:
                        raise CourseError(f"{path.name}: {error}") from error
                    if pack == "nbgrader":
                        folder = f"nbgrader/source/{path.stem}"
                        write(f"{folder}/{path.stem}.ipynb", lock_unmarked(out))
                    else:
                        write(f"{pack}/{path.stem}.ipynb", out)
                folder = f"nbgrader/source/{path.stem}"
                write(f"{folder}/README.md",
                      readme("nbgrader", {path.stem: titles[path.stem]}, wheel, root))
                write(f"{folder}/{wheel.name}", wheel)
                write(f"{folder}/constraints.txt", root / "constraints.txt")
                print(f"{path.name}: student, instructor, nbgrader/source/{path.stem}")
    finally:
        (outdir / MANIFEST).write_text(json.dumps(
            {"written_by": "scripts/make_course.py", "chapters": [p.stem for p in chapters],
             "files": sorted(written)}, indent=1) + "\n")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("chapters", nargs="*", help="numbers, names or paths; default: all")
    args = parser.parse_args(argv)
    try:
        chapters = select_chapters(args.chapters)
        make_course(args.outdir, chapters)
    except CourseError as error:
        print(f"make_course.py: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.outdir}/: student/, instructor/, nbgrader/ for "
          + " ".join(p.stem for p in chapters))
    return 0


if __name__ == "__main__":
    sys.exit(main())
