"""Site tests: one book build per session, a local web server, and a headless Chromium."""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bookutils import ROOT, in_ci  # noqa: E402
from executed import reusing_config  # noqa: E402
from sitebuild import BUILD_ARGS, Build, build, fetch_vendor  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


@pytest.fixture(scope="session")
def vendor() -> Path:
    """_vendor/ with the offline MathJax and widget scripts (fetched once, as `make` does)."""
    fetch_vendor()
    return ROOT / "_vendor"


@pytest.fixture(scope="session")
def book_build(vendor) -> Build:
    """The book built once per session as `make book` does, but from scratch (--all, into an
    emptied _build/html, so no file of an older build is served), so every page is rendered and
    every warning re-emitted; timed to _build/timings/build.json.

    When the chapter stage of this checkout saved a current run of every notebook page
    (scripts/executed.py: same page, library and pins), the build takes their outputs from a
    jupyter-cache written from those runs instead of executing the pages a second time;
    otherwise (`pytest tests/site` alone on a fresh clone) it executes them, as `make book`.
    Under pytest-xdist the first worker to ask builds, and the other waits for it and reads its
    result (tests/site/conftest.py schedules the build first, so the browser checks of the other
    worker find it done)."""
    import fcntl

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return _build_book()
    shared = ROOT / "_build" / "reused" / f"build-{run}.json"
    shared.parent.mkdir(parents=True, exist_ok=True)
    with open(shared.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if shared.exists():
            data = json.loads(shared.read_text())
            return Build(**{**data, "book": Path(data["book"])})
        result = _build_book()
        for older in shared.parent.glob("build-*.json"):   # earlier sessions' results
            older.unlink()
        shared.write_text(json.dumps({**result.__dict__, "book": str(result.book)}))
        return result


def _build_book() -> Build:
    import executed
    from bookutils import chapter_notebooks

    shutil.rmtree(ROOT / "_build" / "html", ignore_errors=True)
    pages = [p.relative_to(ROOT).with_suffix("").as_posix() for p in chapter_notebooks()]
    cache = ROOT / "_build" / "reused" / "jupyter_cache"
    missing = executed.jupyter_cache(pages, cache)
    args = BUILD_ARGS + ["--all"]
    if not missing:
        args += ["--config", str(reusing_config(ROOT, cache))]
    result = build(ROOT, args)
    result.reused = not missing
    timings = ROOT / "_build" / "timings"
    timings.mkdir(parents=True, exist_ok=True)
    (timings / "build.json").write_text(json.dumps(
        {"seconds": round(result.seconds, 1), "rc": result.rc,
         "pages_executed": "none (the chapter stage's runs)" if not missing else missing,
         "recorded": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2) + "\n")
    return result


@pytest.fixture(scope="session")
def built_html(book_build) -> Path:
    """The HTML folder of a successful build (fails the dependent test otherwise)."""
    if book_build.rc != 0:
        pytest.fail(f"the book build failed (rc {book_build.rc}); see test_book_builds_cleanly",
                    pytrace=False)
    return book_build.html


@pytest.fixture(scope="session")
def site_url(built_html) -> str:
    """Base URL of _build/html served on 127.0.0.1 at a free port."""
    handler = functools.partial(_QuietHandler, directory=str(built_html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright; skipped locally (failed in CI) when missing."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: apt-get install chromium (the browser checks need it)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


_SESSION_START = time.time()


# Test files that need the whole book and run on the worker that builds it; the browser checks
# need it too, but are shared out one by one at the end of the queue: after the PDF's tests, whose
# printing opens Playwright's sync API, which cannot run while the browser fixture holds it.
BOOK_FILES = {"test_binder.py", "test_build.py"}
BROWSER_FILES = {"test_browser.py", "test_explorer_twins.py", "test_search.py",
                 "test_figure_text.py"}


def pytest_collection_modifyitems(items):
    """The order of the queue under pytest-xdist: the book build and its checks first, the course
    packs next, then the tiny books, the rest, and the browser checks last (by then the book is
    built, so neither worker waits for it)."""
    def rank(item) -> int:
        name = item.path.name
        tiny = ("test_tiny_books.py", "test_corrections.py")
        return (0 if name in BOOK_FILES else 1 if name == "test_course.py"
                else 2 if name in tiny else 4 if name in BROWSER_FILES else 3)

    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if item.path.is_relative_to(here)]
    ordered = sorted((items[i] for i in slots), key=rank)   # stable within each file
    for i, item in zip(slots, ordered):
        items[i] = item            # tests outside tests/site keep their places


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (`make test-site` runs two workers), the tests of BOOK_FILES form one
    unit of work, so one worker builds the book once and checks it, and test_course.py another
    (its module fixtures write the packs once); every other test is a unit of its own, shared
    out in the order above. (pytest-xdist's `--dist loadgroup` ignores its marks under pytest
    9.2: pytest-xdist issue 1386.) The other worker's first browser check reads the build
    through `book_build`'s shared result."""
    from xdist.scheduler import LoadScopeScheduling

    class SiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            name = file.rsplit("/", 1)[-1]
            if name in BOOK_FILES:
                return "book"
            return file if name == "test_course.py" else nodeid

    return SiteScheduling(config, log)


def pytest_terminal_summary(terminalreporter):
    """Print the page weights that the browser tests measured in this session."""
    weights = ROOT / "_build" / "timings" / "page-weights.json"
    if not weights.exists() or weights.stat().st_mtime < _SESSION_START:
        return
    data = json.loads(weights.read_text())
    terminalreporter.section("page weights (the page and everything it loads)")
    for name, row in sorted(data.items()):
        terminalreporter.write_line(f"{row['bytes'] / 1e6:7.2f} MB  ({row.get('gzip_bytes', 0) / 1e6:4.2f} MB "
                                    f"gzipped)  {row['files']:3d} files  {name}")
    terminalreporter.write_line(f"written to {weights}")
