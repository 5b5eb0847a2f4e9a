"""A reader's environment: a fresh virtual environment outside the repository with the library
installed as a reader installs it, and a kernel that runs notebooks there."""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from bookutils import ROOT

# Seconds per cell of a reader's run: a guard against a hung cell, not a budget (the budget is a
# measurement, see chapter_exec.py): 30 times a chapter's budget, so that a loaded machine cannot
# trip it (the slowest cell takes about 30 s idle; chapter 04's long continuations on the torch
# loop, which the portability matrix forces, took over 300 s on a loaded machine).
CELL_TIMEOUT = float(os.environ.get("CHAPTER_CELL_TIMEOUT_S", "1800"))


@dataclass
class Reader:
    """A fresh virtual environment with the library installed, and a kernel spec for it."""

    python: Path
    kernels: Path
    env: dict


def make_reader(home: Path) -> Reader:
    """A venv in ``home`` where `pip install` (not editable) put the library; the dependencies
    (numpy, torch, ipykernel, ...) come from the project's environment through a .pth file."""
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # The project environment's .pth files are not read from there, so its editable install
    # of the library is not seen.
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
    # Compile the GD kernel into the venv's numba cache now (about 10 s on an idle machine), so
    # that no chapter's wall time, which has a budget, pays for it.
    subprocess.run([str(python), "-c", "from maxmargin import _compiled; _compiled.ready()"],
                   check=True, capture_output=True, text=True, env=env, cwd=home)
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


@dataclass
class Run:
    """One execution in the reader's kernel: wall seconds of the notebook's own cells (kernel
    start included, the re-run excluded), and the cells whose outputs a re-run changed."""

    seconds: float
    changed: list


def execute(nb, reader: Reader, folder: Path, *, rerun: bool) -> Run:
    """Run ``nb`` in place in the reader's kernel from ``folder``; with ``rerun``, run every
    cell a second time after the whole notebook, last cell first (so that each re-run sees
    the state the end of the notebook left, not a state its predecessors rebuilt), and
    report the cells whose outputs changed. A failing cell raises nbclient's
    CellExecutionError (its output is in ``nb``)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    km = AsyncKernelManager(kernel_name="reader",
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[
                                str(reader.kernels)]))
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, kernel_name="reader",
                            resources={"metadata": {"path": str(folder)}})
    changed = []
    start = time.perf_counter()
    with client.setup_kernel(env=reader.env, cwd=str(folder)):
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        seconds = time.perf_counter() - start
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
    return Run(seconds, changed)
