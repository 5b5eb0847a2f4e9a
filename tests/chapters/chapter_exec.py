"""Execute a chapter notebook from scratch and record its wall time."""
from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path

from bookutils import ROOT, read_notebook

# The book's time budget per chapter on an idle 2-core machine (CONTRIBUTING.md, chapter rules).
# It is a measurement, never an assertion of the tests: `make test` reports each chapter's time against it
# (the summary and _build/timings/chapters.json), and `make bench` (benchmarks/bench_chapters.py)
# checks it on an idle machine, with the load it measured. A loaded machine must still pass.
BUDGET_S = 60.0
# A guard against a hung cell only, not a budget: 20 times the chapter budget, so that it cannot
# fire on a slow or busy machine (a chapter's slowest cell takes about 30 s on an idle machine).
CELL_TIMEOUT_S = 1200
TIMINGS = ROOT / "_build" / "timings" / "chapters.json"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def execute(path: Path):
    """Execute a notebook page in its own folder.

    Returns (notebook, wall seconds, failure): failure is None, or a message naming the failing
    cell with its source and traceback.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = read_notebook(path)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    failure = None
    try:
        client.execute()
    except CellExecutionError as exc:
        failure = describe_failure(nb, exc)
    return nb, time.perf_counter() - start, failure


def describe_failure(nb, exc) -> str:
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                tb = _ANSI.sub("", "\n".join(out.traceback))
                return (f"cell {index} raised {out.ename}: {out.evalue}\n"
                        f"--- cell source ---\n{cell.source}\n--- traceback ---\n{tb}")
    return _ANSI.sub("", str(exc))


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the OS does not report it)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def record_timing(docname: str, seconds: float | None, status: str, reason: str = "") -> None:
    """Merge one chapter's run into _build/timings/chapters.json (safe across workers).

    ``status`` is what happened to the chapter's checks ("passed" or "failed", with ``reason``);
    ``seconds`` is its wall time (None if it never finished), recorded apart from the status:
    ``over_budget`` compares it with the budget, and ``load_average`` says how busy the machine
    was, so that a slow run on a busy machine reads as what it is.
    """
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    with open(TIMINGS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
        data[docname] = {"status": status, "reason": reason,
                         "seconds": None if seconds is None else round(seconds, 2),
                         "budget_seconds": BUDGET_S,
                         "over_budget": None if seconds is None else seconds > BUDGET_S,
                         "load_average": load_average(),
                         "recorded": time.strftime("%Y-%m-%dT%H:%M:%S")}
        TIMINGS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def recorded(docname: str, check, record) -> float:
    """Run ``check()`` (the checks of one page; returns its wall seconds) and ``record`` what
    happened, whatever it was: (docname, seconds, status, reason) with status "passed",
    "failed" or "skipped", the reason the first line of the failure, and the seconds the
    failure carries as ``chapter_seconds`` (None when the page never finished)."""
    seconds, status, reason = None, "failed", "did not finish"
    try:
        seconds = check()
        status, reason = "passed", ""
        return seconds
    except BaseException as exc:  # pytest's fail and skip outcomes are BaseExceptions
        status = "skipped" if type(exc).__name__ == "Skipped" else "failed"
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        seconds = getattr(exc, "chapter_seconds", seconds)
        raise
    finally:
        record(docname, seconds, status, reason)
