"""Chapter tests: the reader's environment, the per-chapter timing fixture, the summary."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE.parent / "notebooks"))    # residue.py, shared with the course tests

# Chapters execute two at a time (pytest -n 2) on two cores, so each kernel gets one BLAS /
# OpenMP / torch thread. With the default pools the four threads oversubscribe the cores and
# spin-wait: an 8 s chapter was measured at 128 s that way. The reader's kernels inherit these.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from chapter_exec import BUDGET_S, TIMINGS, load_average, record_timing  # noqa: E402
from reader import Reader, make_reader  # noqa: E402


@pytest.fixture(scope="session")
def reader(tmp_path_factory) -> Reader:
    """A fresh virtual environment outside the repository with the library pip-installed."""
    return make_reader(tmp_path_factory.mktemp("reader"))


@pytest.fixture
def record_chapter(record_property):
    """Record a chapter's wall time for the terminal summary and _build/timings/chapters.json."""
    def record(docname: str, seconds: float | None, status: str, reason: str = "") -> None:
        record_property("chapter", docname)
        record_property("chapter_seconds", seconds)
        record_timing(docname, seconds, status, reason)
    return record


def pytest_terminal_summary(terminalreporter):
    """Print the wall time of every chapter executed in this session against the budget, with
    the machine's load: a measurement, not a verdict (`make bench` checks the budget idle)."""
    rows = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            props = dict(getattr(report, "user_properties", []))
            if getattr(report, "when", None) == "call" and props.get("chapter_seconds") is not None:
                rows.append((props["chapter"], props["chapter_seconds"], report.outcome))
    if not rows:
        return
    terminalreporter.section("chapter wall times (measured; the budget is checked by make bench)")
    for name, seconds, outcome in sorted(rows):
        over = "  over the budget" if seconds > BUDGET_S else ""
        terminalreporter.write_line(f"{seconds:7.1f} s  {outcome:7}  {name}{over}")
    load = load_average()
    terminalreporter.write_line(
        f"{sum(r[1] for r in rows):7.1f} s  total; budget {BUDGET_S:.0f} s per chapter on an idle "
        f"machine; load average now {'unknown' if load is None else load} on {os.cpu_count()} "
        f"cores; written to {TIMINGS}")
