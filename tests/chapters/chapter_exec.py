"""Execute a chapter notebook from scratch and record its wall time."""
from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path

from bookutils import ROOT, in_ci, read_notebook

# CI always uses 60 s; locally CHAPTER_BUDGET_S may relax it.
BUDGET_S = 60.0 if in_ci() else float(os.environ.get("CHAPTER_BUDGET_S", "60"))
CELL_TIMEOUT_S = 120
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


def record_timing(docname: str, seconds: float, status: str) -> None:
    """Merge one chapter's wall time into _build/timings/chapters.json (safe across workers)."""
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    with open(TIMINGS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
        data[docname] = {"seconds": round(seconds, 2), "status": status, "budget_seconds": BUDGET_S,
                         "recorded": time.strftime("%Y-%m-%dT%H:%M:%S")}
        TIMINGS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
