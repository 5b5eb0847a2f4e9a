"""Write every notebook page of the toc as a plain Jupyter notebook: make_notebooks.py OUTDIR.

The notebooks read without MyST (scripts/export.py): the prose shows the numbers of the
executed build, the first cell installs the library when it is missing, there are no outputs.
The glued numbers come from `_build/jupyter_execute` when the build is newer than the chapter,
else each chapter is executed once (about 3 minutes for the book).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import nbformat

from bookutils import ROOT, chapter_notebooks
from export import export_notebook, glue_values, read_config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("sources", type=Path, nargs="*", help="default: the toc's notebooks")
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    config = read_config()
    for path in args.sources or chapter_notebooks():
        path = path.resolve()
        target = args.outdir / f"{path.stem}.ipynb"
        nb = export_notebook(path, glue_values(path), config=config)
        nbformat.validate(nb)
        nbformat.write(nb, target)
        print(f"{path.relative_to(ROOT)} -> {target}")


if __name__ == "__main__":
    main()
