"""Every exported notebook executes outside the repository, the way a reader runs it, and its
Markdown shows no MyST.

For each notebook page of the toc, the exported notebook's code (install cell first) is
executed once, from a temporary folder outside the repository, in a kernel of a fresh virtual
environment where the library is installed as a reader installs it (`pip install`, not
editable; the dependencies come from the project's environment through a .pth file). The
values that this run glues then fill the prose of the export, so the numbers a reader sees
are the numbers the notebook computes; the test checks that the exported code cells are
exactly the ones it ran, that no MyST residue is left (rendered with markdown-it-py), and that
every glued value the prose quotes appears in it. One page is also re-run cell by cell after
its exercises (last cell first), and must print the same outputs.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

import export
from bookutils import ROOT, chapter_notebooks, clean_for_export, read_notebook
from residue import residue

PAGES = chapter_notebooks()
RERUN = {"chapters/01-attention-model"}   # the re-run check doubles a page's time: one page
CELL_TIMEOUT = 300
GLUE_ROLE = re.compile(r"\{glue(?::text|:)?\}`([^`]*)`")


@dataclass
class Reader:
    """A fresh virtual environment with the library installed, and a kernel spec for it."""

    python: Path
    kernels: Path
    env: dict


@pytest.fixture(scope="session")
def reader(tmp_path_factory) -> Reader:
    home = tmp_path_factory.mktemp("reader")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # The dependencies (numpy, torch, ipykernel, ...) of the project's environment. Its .pth
    # files are not read from there, so its editable install of the library is not seen.
    Path(purelib, "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    source = home / "src"       # a copy: the build must not write into the repository
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "lib", source / "lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", str(source)],
                   check=True, env=env, capture_output=True, text=True)
    where = subprocess.run([str(python), "-c", "import maxmargin; print(maxmargin.__file__)"],
                           check=True, capture_output=True, text=True, env=env,
                           cwd=home).stdout.strip()
    assert Path(where).is_relative_to(venv), f"maxmargin imported from {where}, not the venv"
    kernels = home / "kernels"
    (kernels / "reader").mkdir(parents=True)
    (kernels / "reader" / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "reader", "language": "python"}))
    return Reader(python, kernels, env)


def outputs(cell) -> list:
    """What a reader sees of a cell's outputs (text, and which kind of image)."""
    seen = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            seen.append((out.name, out.text))
        elif out.output_type == "error":
            seen.append(("error", out.ename, out.evalue))
        else:
            data = out.get("data", {})
            seen.append((out.output_type, data.get("text/plain", ""),
                         *sorted(k for k in data if k.startswith("image/"))))
    return seen


def execute(nb, reader: Reader, folder: Path, *, rerun: bool) -> list | None:
    """Run ``nb`` in place in the reader's kernel from ``folder``; with ``rerun``, run every
    cell a second time after the whole notebook, last cell first (so that each re-run sees
    the state the end of the notebook left, not a state its predecessors rebuilt), and
    return the cells whose outputs changed."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    km = AsyncKernelManager(kernel_name="reader",
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[
                                str(reader.kernels)]))
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, kernel_name="reader",
                            resources={"metadata": {"path": str(folder)}})
    changed = []
    with client.setup_kernel(env=reader.env, cwd=str(folder)):
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        probe = nbformat.v4.new_code_cell("import maxmargin\nprint(maxmargin.__file__)")
        nb.cells.append(probe)
        client.execute_cell(probe, len(nb.cells) - 1)
        nb.cells.pop()
        where = probe.outputs[0].text.strip()
        assert Path(where).is_relative_to(reader.python.parents[1]), \
            f"the kernel imported maxmargin from {where}, not the reader's install"
        if rerun:
            first = [outputs(cell) for cell in nb.cells]
            for index, cell in reversed(list(enumerate(nb.cells))):
                if cell.cell_type != "code" or "skip-execution" in cell.metadata.get("tags", []):
                    continue
                again = copy.deepcopy(cell)
                client.execute_cell(again, index)
                nb.cells[index] = cell
                if outputs(again) != first[index]:
                    changed.append((index, first[index], outputs(again)))
    return changed


@pytest.mark.chapter
@pytest.mark.parametrize("source", PAGES, ids=lambda p: p.stem)
def test_exported_notebook_runs_outside_the_repository_and_reads_without_myst(
        source, reader, tmp_path):
    docname = source.relative_to(ROOT).with_suffix("").as_posix()
    assert not tmp_path.resolve().is_relative_to(ROOT.resolve())
    config = export.read_config()

    runnable = read_notebook(source)
    first_code = next(i for i, c in enumerate(runnable.cells) if c.cell_type == "code")
    runnable.cells.insert(first_code, export.install_cell(config))
    runnable = clean_for_export(runnable)
    changed = execute(runnable, reader, tmp_path, rerun=docname in RERUN)
    values = export.harvest_glue(runnable)

    plain = export.export_notebook(source, values, config=config)
    nbformat.validate(plain)
    assert [c.source for c in plain.cells if c.cell_type == "code"] == \
        [c.source for c in runnable.cells if c.cell_type == "code"], \
        "the exported code cells differ from the ones executed"
    assert [c for c in plain.cells if c.cell_type == "code"][0].metadata["export"] == \
        {"install": True}

    problems = [f"markdown cell {i}: {r}" for i, cell in enumerate(plain.cells)
                if cell.cell_type == "markdown" for r in residue(cell.source)]
    assert not problems, "MyST residue in the export:\n" + "\n".join(problems)

    text = "\n".join(c.source for c in plain.cells if c.cell_type == "markdown")
    quoted = {m.split("::")[-1].rsplit(":", 1)[0] if ":" in m.split("::")[-1] else m
              for m in GLUE_ROLE.findall(source.read_text(encoding="utf8"))}
    used = plain.metadata["export"]["glue"]
    assert set(used) == quoted, f"glued values not quoted: {quoted ^ set(used)}"
    missing = {key: shown for key, shown in used.items() if shown not in text}
    assert not missing, f"glued values that do not appear in the prose: {missing}"

    assert not changed, "re-running cells after the exercises changed their outputs:\n" + \
        "\n".join(f"code cell {i}: {a} -> {b}" for i, a, b in changed)


def test_the_rerun_check_sees_a_changed_output(reader, tmp_path):
    """The re-run comparison can fail: a generator created in one cell and drawn from in the
    next gives another number when that cell is run again."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import numpy as np\nrng = np.random.default_rng(0)"),
        nbformat.v4.new_code_cell("print(rng.normal())"),
        nbformat.v4.new_code_cell("print(np.random.default_rng(0).normal())")])
    changed = execute(nb, reader, tmp_path, rerun=True)
    assert [index for index, _, _ in changed] == [1]
