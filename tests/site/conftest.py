"""Site tests: one book build per session, a local web server, and a headless Chromium."""
from __future__ import annotations

import functools
import http.server
import json
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bookutils import ROOT, in_ci  # noqa: E402
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
    emptied _build/html, so no file of an older build is served), so every page is executed and
    every warning re-emitted; timed to _build/timings/build.json."""
    shutil.rmtree(ROOT / "_build" / "html", ignore_errors=True)
    result = build(ROOT, BUILD_ARGS + ["--all"])
    timings = ROOT / "_build" / "timings"
    timings.mkdir(parents=True, exist_ok=True)
    (timings / "build.json").write_text(json.dumps(
        {"seconds": round(result.seconds, 1), "rc": result.rc,
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
