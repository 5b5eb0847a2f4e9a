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


def fetch_vendor() -> None:
    """Make sure _vendor/ (offline MathJax) exists and is current, as `make` does."""
    subprocess.run(["bash", str(ROOT / "scripts" / "fetch_vendor.sh"), str(ROOT / "_vendor")],
                   check=True, capture_output=True)
