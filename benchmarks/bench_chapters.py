"""The book's time budget: each notebook page executed from scratch, its wall and CPU seconds.

The budget (CONTRIBUTING.md, the chapter rules): on an idle 2-core machine each chapter executes
in at most 60 s and the whole book in at most 4 minutes. `make test` only measures and reports these times
(a loaded machine must pass the tests); this benchmark checks them. Each page is executed in the
repository's environment, one page after another in a fresh kernel, as the book build does
(`tests/chapters/chapter_exec.py`, default threads). For each page the wall seconds and the CPU
seconds of its kernel process (user + system, read from the reaped child's resource usage) are
printed: the CPU seconds hardly depend on the load, the wall seconds do, so the load average is
printed before and after. PASS when every page and the total are within the budget; on a busy
machine (load average above 0.5 at the start) the wall verdict is printed but says the machine
was busy. Exits 1 on FAIL.

Usage: python benchmarks/bench_chapters.py [--only 03 07]
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "chapters"), str(ROOT / "scripts")]

from bookutils import has_code_cells, source_path, toc_docnames  # noqa: E402
from chapter_exec import BUDGET_S, execute  # noqa: E402

BOOK_BUDGET_S = 240.0
IDLE_LOAD = 0.5


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None,
                        help="pages whose name contains one of these (e.g. 03 07)")
    args = parser.parse_args()
    pages = [name for name in toc_docnames() if has_code_cells(source_path(name))]
    if args.only:
        pages = [p for p in pages if any(key in p for key in args.only)]
    start_load = os.getloadavg()[0]
    print(f"bench_chapters: {len(pages)} pages, one after another in fresh kernels "
          f"(about 2-3 min idle); budget {BUDGET_S:.0f} s per page, {BOOK_BUDGET_S:.0f} s in all; "
          f"{os.cpu_count()} cores; {load()}", flush=True)
    rows, failures = [], []
    for name in pages:
        cpu0, wall0 = children_cpu(), time.perf_counter()
        _, seconds, failure = execute(source_path(name))
        cpu = children_cpu() - cpu0
        wall = time.perf_counter() - wall0
        verdict = "error" if failure else ("PASS" if seconds <= BUDGET_S else "FAIL")
        rows.append((name, seconds, cpu, verdict))
        print(f"{seconds:7.1f} s wall  {cpu:7.1f} s CPU  {verdict:5s} {name}  "
              f"(with kernel start and stop {wall:.1f} s; {load()})", flush=True)
        if failure:
            failures.append(f"{name} failed to execute: {failure.splitlines()[0]}")
        elif seconds > BUDGET_S:
            failures.append(f"{name} took {seconds:.1f} s (budget {BUDGET_S:.0f} s)")
    total = sum(r[1] for r in rows)
    total_cpu = sum(r[2] for r in rows)
    if not args.only and total > BOOK_BUDGET_S:
        failures.append(f"the book took {total:.1f} s (budget {BOOK_BUDGET_S:.0f} s)")
    print(f"{total:7.1f} s wall  {total_cpu:7.1f} s CPU  in all; {load()}")
    if start_load > IDLE_LOAD:
        print(f"note: the machine was busy at the start (load average {start_load:.2f} on "
              f"{os.cpu_count()} cores): wall times are inflated, the budget is for an idle "
              "machine; compare the CPU seconds")
    if failures:
        print("FAIL: " + "; ".join(failures))
        return 1
    print(f"PASS: every page within {BUDGET_S:.0f} s"
          + ("" if args.only else f", the book within {BOOK_BUDGET_S:.0f} s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
