"""Write course packs from the chapters: make_course.py OUTDIR [SOURCE ...].

OUTDIR/student/*.ipynb have every solution removed (exercise stubs and checks are kept);
OUTDIR/instructor/*.ipynb are complete. Both have no outputs. By default the sources are the
notebook pages of _toc.yml. The exercise conventions are in CONTRIBUTING.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import nbformat

from bookutils import chapter_notebooks, clean_for_export, read_notebook, student_notebook


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("sources", type=Path, nargs="*", help="default: the toc's notebooks")
    args = parser.parse_args(argv)
    packs = {"student": student_notebook, "instructor": lambda nb: nb}
    for pack in packs:
        (args.outdir / pack).mkdir(parents=True, exist_ok=True)
    for path in args.sources or chapter_notebooks():
        nb = read_notebook(path)
        for pack, transform in packs.items():
            target = args.outdir / pack / f"{path.stem}.ipynb"
            nbformat.write(clean_for_export(transform(nb)), target)
        print(f"{path.name}: student + instructor")


if __name__ == "__main__":
    main()
