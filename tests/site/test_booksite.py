"""The book's Sphinx extension (_ext/booksite/) against the installed packages, without a build.

booksite.kernels replaces three private members of nbclient and jupyter_client (its docstring
says why no public hook exists); a renamed member would turn a patch into a silent no-op, and
only these tests would notice before a build log fills with misleading tracebacks again.
"""
from __future__ import annotations

import asyncio
import inspect
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from bookutils import ROOT

sys.path.insert(0, str(ROOT / "_ext"))

from booksite.failures import _locate  # noqa: E402
from booksite.kernels import quiet_kernels, quiet_output_poller  # noqa: E402


def run(coroutine):
    """asyncio.run in a thread of its own: an earlier test of the session (the browser's sync
    API) may leave an event loop running in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_output_poller_is_quiet_only_when_its_channel_was_closed():
    """Bugs caught: a patch that swallows the poller's failures while its channel is open (lost
    cell output errors), or one that still lets a closed channel's failure through (the
    misleading traceback), or one that wraps twice when the extension is set up twice."""

    class Client:
        async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
            raise AssertionError("read from a socket")  # jupyter_client on a closed IPC socket

    quiet_output_poller(Client)
    patched = Client._async_poll_output_msg
    quiet_output_poller(Client)  # patching twice wraps once
    assert Client._async_poll_output_msg is patched
    client = Client()
    client.kc = SimpleNamespace(_iopub_channel=SimpleNamespace(socket=None))
    assert run(client._async_poll_output_msg("id", {}, 0)) is None
    client.kc._iopub_channel.socket = object()
    with pytest.raises(AssertionError, match="read from a socket"):
        run(client._async_poll_output_msg("id", {}, 0))


def test_patched_members_exist_in_the_installed_packages():
    """The three private members booksite.kernels replaces are still there and still used the
    way the patches assume. Bug caught: an nbclient or jupyter_client upgrade that renames one
    (the patch would still run, and change nothing)."""
    from jupyter_client import AsyncKernelManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    assert "_kernel_manager_class_default" in vars(NotebookClient)
    assert callable(getattr(NotebookClient, "_async_poll_output_msg", None))
    assert "_async_poll_output_msg" in inspect.getsource(NotebookClient), \
        "nbclient no longer polls output through _async_poll_output_msg"
    assert callable(getattr(AsyncKernelManager, "_async_interrupt_kernel", None))
    shutdown = inspect.getsource(KernelManager._async_shutdown_kernel)
    assert "self._async_interrupt_kernel()" in shutdown, \
        "jupyter_client's shutdown no longer interrupts through _async_interrupt_kernel"


def test_quiet_kernels_reach_the_client_myst_nb_builds(tmp_path, monkeypatch):
    """After quiet_kernels(), a NotebookClient built with no arguments (as jupyter-cache builds
    it) uses the book's kernel manager: IPC transport, an absolute socket path. Bugs caught: a
    patched default the trait no longer reads (TCP kernels and their warning are back), a
    relative socket path (the kernel runs in the chapter's folder and cannot find it)."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    manager_class = quiet_kernels()
    client = NotebookClient(nbformat.v4.new_notebook())
    assert client.kernel_manager_class is manager_class
    manager = manager_class()
    assert manager.transport == "ipc"
    assert Path(manager.ip).is_absolute() and Path(manager.ip).parent == tmp_path / "runtime"


def test_shutdown_skips_only_the_interrupt_of_a_kernel_shutting_down():
    """Bugs caught: a manager that never interrupts (a reader's interrupt button would do
    nothing) or one that still sends SIGINT on shutdown (the "KeyboardInterrupt caught in
    kernel" log line)."""
    manager = quiet_kernels()()
    manager.shutting_down = True
    assert run(manager._async_interrupt_kernel()) is None   # skipped: no kernel to interrupt
    manager.shutting_down = False
    with pytest.raises(RuntimeError, match="(?i)no kernel is running|cannot interrupt"):
        run(manager._async_interrupt_kernel())              # passed on to jupyter_client


LONG_CELL = "\n".join(["def failing():"] + [f"    a{k} = {k}" for k in range(10)]
                      + ["    raise RuntimeError"])
CHAPTER = f"""\
---
jupytext:
  text_representation:
    format_name: myst
kernelspec:
  name: python3
---
# A chapter

````md
```{{code-cell}} ipython3
shown_not_run = 1
```
````

```{{code-cell}} ipython3
first = 1
```

```{{code-cell}} ipython3
---
mystnb:
  figure:
    caption: A figure cell with a yaml header
---
first = 1
second = 2
```

<!--
```{{code-cell}} ipython3
commented_out = 1
```
-->

```{{code-cell}} ipython3
{LONG_CELL}
```
"""


def test_failure_location_counts_only_cells_the_build_ran(tmp_path):
    """The failing cell's line and number `Cell In[k]`, as the build log prints them, from the
    errors nbclient raises. Bugs caught: a `{code-cell}` shown in a ````md block or a comment
    counted as a cell (the log points at the wrong cell), and nbclient's preview of a long cell
    in a timeout (a list of its first and last five lines) not recognised."""
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    from booksite.failures import _split_error

    page = tmp_path / "chapter.md"
    page.write_text(CHAPTER)
    lines = CHAPTER.splitlines()
    failing = lines.index("def failing():") + 1           # 1-based line of the cell's code
    assert _locate(page, "first = 1") == (lines.index("first = 1") + 1, 1)
    header = lines.index("second = 2")               # the code after the yaml header
    assert _locate(page, "first = 1\nsecond = 2") == (header, 2)

    cell = nbformat.v4.new_code_cell(LONG_CELL)
    timeout = CellTimeoutError.error_from_timeout_and_cell("Timeout", 3, cell)
    kind, source, _ = _split_error(f"CellTimeoutError: {timeout}")
    assert kind == "CellTimeoutError" and source.startswith("['def failing():'"), source
    assert _locate(page, source) == (failing, 3)

    error = CellExecutionError.from_cell_and_msg(cell, {
        "ename": "RuntimeError", "evalue": "", "traceback": ["RuntimeError"]})
    kind, source, _ = _split_error(f"CellExecutionError: {error}")
    assert kind == "CellExecutionError" and _locate(page, source) == (failing, 3)

    assert _locate(page, "shown_not_run = 1") == (None, None)
    assert _locate(page, "commented_out = 1") == (None, None)
