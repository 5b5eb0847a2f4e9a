"""Build a Jupyter Book the way `make book` does, and read the result."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bookutils import ROOT

JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"
BUILD_ARGS = ["-W", "-n", "--keep-going"]
# Output lines that contain "WARNING" but are known noise. Empty: the kernels' "running over TCP
# without encryption" warning is gone at its source (_ext/booksite/kernels.py starts kernels on IPC).
KNOWN_NOISE: list[re.Pattern] = []


@dataclass
class Build:
    """A finished `jupyter-book build`: return code, output (stdout and stderr interleaved as a
    terminal shows them), wall time, the book folder, whether it reused executed pages."""

    rc: int
    output: str
    seconds: float
    book: Path
    reused: bool = False    # True when the pages' outputs came from the chapter stage's runs

    @property
    def html(self) -> Path:
        return self.book / "_build" / "html"

    def warnings(self) -> list[str]:
        """Output lines mentioning WARNING, without the known noise."""
        return [line for line in self.output.splitlines()
                if "WARNING" in line and not any(p.search(line) for p in KNOWN_NOISE)]


def build(book: Path, args: list[str] = BUILD_ARGS) -> Build:
    """Run `jupyter-book build BOOK -W -n --keep-going` (or with other ``args``)."""
    start = time.perf_counter()
    proc = subprocess.run([str(JUPYTER_BOOK), "build", str(book), *args], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return Build(proc.returncode, proc.stdout, time.perf_counter() - start, book)


def reusing_config(root: Path, cache: Path) -> Path:
    """The book's _config.yml with one change, for a build that executes nothing: myst-nb's
    ``cache`` mode reading the jupyter-cache at ``cache`` (scripts/executed.py writes it from
    the chapter stage's runs); and the local extension's folder made absolute. Written next to
    the cache; returns its path."""
    config = (root / "_config.yml").read_text()
    config, count = re.subn(r"^(  execute_notebooks:) force$",
                            rf"\1 cache\n  cache: {cache}", config, flags=re.M)
    assert count == 1, "_config.yml has no `execute: execute_notebooks: force` line"
    # Jupyter Book resolves local extensions against the config file's folder.
    config, count = re.subn(r"^(    booksite:) _ext\b", rf"\1 {root / '_ext'}", config, flags=re.M)
    assert count == 1, "_config.yml has no `local_extensions: booksite: _ext` line"
    path = cache.parent / "_config.yml"
    path.write_text(config)
    return path


def fetch_vendor() -> None:
    """Make sure _vendor/ (offline MathJax) exists and is current, as `make` does."""
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch_vendor.sh"), str(ROOT / "_vendor")],
                   check=True, capture_output=True)
