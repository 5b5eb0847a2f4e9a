"""The build's chapter kernels: local sockets, a quiet shutdown, a quiet poller.

**A timeout reads as a timeout.** When a cell times out while it still prints, nbclient closes
the kernel's channels under its own output poller, which then died with a ZMQError (or an
AssertionError on IPC sockets) printed as "Task exception was never retrieved" before the
build's summary: a second, misleading traceback. The poller now ends quietly when its channel
was closed under it (the timeout itself is reported in the summary).

**Chapter kernels log nothing that looks like an error.** ipykernel warns "Kernel is running
over TCP without encryption" for every kernel nbclient starts, and jupyter_client interrupts
(SIGINT) each kernel before shutting it down, which now and then lands while the kernel still
handles its last message and logs "ERROR | KeyboardInterrupt caught in kernel". A reader of
the build log takes both for failures. The build's kernels use local sockets (IPC), which the
network cannot reach and which do not warn, and are shut down without the interrupt (the
shutdown request, then SIGTERM and SIGKILL if needed, still stop a kernel that hangs).

**Why patches, not hooks.** myst-nb (through jupyter-cache) builds its ``NotebookClient`` itself,
with neither a traitlets config nor a kernel-manager argument, so no public setting reaches the
client. Three private members of the supported versions (nbclient 0.10-0.11, jupyter_client 8) are
therefore replaced: ``NotebookClient._kernel_manager_class_default`` (the default of the public
``kernel_manager_class`` trait), ``KernelManager._async_interrupt_kernel`` (overridden in a
subclass; ``_async_shutdown_kernel`` calls it) and ``NotebookClient._async_poll_output_msg``
(wrapped). A renamed member would make a patch a silent no-op, so
``tests/site/test_booksite.py`` checks each one against the installed packages, without a build.
"""
from __future__ import annotations

import uuid
from pathlib import Path


def quiet_kernels() -> type:
    """Make nbclient start kernels on IPC sockets (in the Jupyter runtime folder) and shut them
    down without a SIGINT first; returns the kernel-manager class it installed."""
    from jupyter_client import AsyncKernelManager
    from jupyter_core.paths import jupyter_runtime_dir
    from nbclient import NotebookClient
    from traitlets import CaselessStrEnum, default

    class BookKernelManager(AsyncKernelManager):
        transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

        @default("ip")
        def _ip_default(self) -> str:
            # An absolute path: the kernel runs in the chapter's folder, the build elsewhere.
            runtime = Path(jupyter_runtime_dir())
            runtime.mkdir(parents=True, exist_ok=True)
            return str(runtime / f"book-kernel-{uuid.uuid4().hex[:12]}")

        async def _async_interrupt_kernel(self) -> None:
            if not self.shutting_down:
                await super()._async_interrupt_kernel()

    NotebookClient._kernel_manager_class_default = lambda self: BookKernelManager
    quiet_output_poller(NotebookClient)
    return BookKernelManager


def quiet_output_poller(client_class) -> None:
    """Let nbclient's IOPub poller end quietly when its channel was closed under it.

    After a cell times out (or the kernel dies), nbclient cancels the poller and closes the
    kernel's channels; a poller that had just been woken by output then reads from a closed
    socket and fails (ZMQError, or AssertionError on IPC), and asyncio prints that failure as
    "Task exception was never retrieved" with a traceback unrelated to the chapter. Failures of
    a poller whose channel is still open are raised as before.
    """
    original = client_class._async_poll_output_msg
    if getattr(original, "_booksite_quiet", False):
        return

    async def poll_output(self, parent_msg_id, cell, cell_index):
        try:
            return await original(self, parent_msg_id, cell, cell_index)
        except Exception:
            channel = getattr(self.kc, "_iopub_channel", None) if self.kc is not None else None
            if channel is None or getattr(channel, "socket", None) is None:
                return None  # closed under the poller: the timeout is reported by the summary
            raise

    poll_output._booksite_quiet = True
    client_class._async_poll_output_msg = poll_output
