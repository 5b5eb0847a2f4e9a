"""Write every notebook page of the toc as an .ipynb without outputs: make_notebooks.py OUTDIR."""
from __future__ import annotations

import argparse
from pathlib import Path

import nbformat

from bookutils import ROOT, chapter_notebooks, clean_for_export, read_notebook


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("outdir", type=Path)
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    for path in chapter_notebooks():
        target = args.outdir / f"{path.stem}.ipynb"
        nbformat.write(clean_for_export(read_notebook(path)), target)
        print(f"{path.relative_to(ROOT)} -> {target}")


if __name__ == "__main__":
    main()
