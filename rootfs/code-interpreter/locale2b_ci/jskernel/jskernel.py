"""locale2b's JavaScript kernel: a Jupyter wrapper kernel over Node.

Why our own: `ijavascript` (the usual Node kernel) needs `zeromq@5`, whose
install compiles libzmq from a tarball fetched from GitHub: it cannot be
installed from the npm registry alone, and a build step that downloads is not
something a template build should depend on. This kernel reuses ipykernel for
the Jupyter protocol (ZeroMQ through pyzmq's wheels) and runs cells in a Node
child (driver.cjs beside this file) with nothing but Node's standard library.

Run as `python jskernel.py -f <connection file>` (the kernelspec does). The
Node binary is $LOCALE2B_NODE, else `node` on PATH.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import time

from ipykernel.kernelapp import IPKernelApp
from ipykernel.kernelbase import Kernel

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.cjs")

# How long a cell may ignore an interrupt (code that never yields, after an
# `await`) before the Node process is replaced.
INTERRUPT_GRACE_S = 3.0


class NodeProcess:
    """The Node child and its pipes (see driver.cjs for what each fd carries)."""

    def __init__(self) -> None:
        node = os.environ.get("LOCALE2B_NODE") or shutil.which("node")
        if not node:
            raise RuntimeError("node was not found on PATH (set LOCALE2B_NODE)")
        cells_r, self._cells_w = os.pipe()
        self._events_r, events_w = os.pipe()
        interrupt_r, self._interrupt_w = os.pipe()
        fds = (cells_r, events_w, interrupt_r)
        self.proc = subprocess.Popen(
            [node, DRIVER, *(str(fd) for fd in fds)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=fds,
        )
        for fd in fds:
            os.close(fd)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self._events_r, selectors.EVENT_READ, "events")
        self.selector.register(self.proc.stdout.fileno(), selectors.EVENT_READ, "stdout")
        self.selector.register(self.proc.stderr.fileno(), selectors.EVENT_READ, "stderr")
        self._buffer = b""

    def send_cell(self, cell_id: int, code: str) -> None:
        os.write(self._cells_w, (json.dumps({"id": cell_id, "code": code}) + "\n").encode())

    def interrupt(self, cell_id: int) -> None:
        try:
            os.write(self._interrupt_w, f"{cell_id}\n".encode())
        except OSError:
            pass

    def read(self, timeout: float | None):
        """Waits up to `timeout` for output: yields ("event", dict) and ("stdout"|"stderr", text)."""
        for key, _ in self.selector.select(timeout):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                self.selector.unregister(key.fd)
                if key.data == "events":
                    yield "eof", None
                continue
            if key.data != "events":
                yield key.data, chunk.decode("utf-8", "replace")
                continue
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                yield "event", json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.selector.close()
        for fd in (self._cells_w, self._events_r, self._interrupt_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc.stdout.close()
        self.proc.stderr.close()


class JavaScriptKernel(Kernel):
    implementation = "locale2b-javascript"
    implementation_version = "1.0"
    language = "javascript"
    language_version = "node"
    language_info = {
        "name": "javascript",
        "mimetype": "application/javascript",
        "file_extension": ".js",
    }
    banner = "locale2b JavaScript kernel (Node)"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._node: NodeProcess | None = None
        self._cell_id = 0
        self._start_node()

    def _start_node(self) -> None:
        self._node = NodeProcess()
        output = []
        for kind, value in self._wait_events(None, until="ready"):
            if kind == "exited":
                raise RuntimeError(f"node {DRIVER} exited before it was ready: {''.join(output)[-2000:]}")
            if kind in ("stdout", "stderr"):
                output.append(value)

    def _wait_events(self, cell_id: int | None, until: str):
        """Yields output until the `until` event (for `cell_id`), Node's exit, or an interrupt's grace ends."""
        node = self._node
        interrupted_at = None
        while True:
            timeout = (
                None if interrupted_at is None else max(0.0, interrupted_at + INTERRUPT_GRACE_S - time.monotonic())
            )
            try:
                got = list(node.read(timeout))
            except KeyboardInterrupt:
                # The kernel manager's SIGINT: pass it to Node for this cell.
                if cell_id is not None and interrupted_at is None:
                    interrupted_at = time.monotonic()
                    node.interrupt(cell_id)
                continue
            if not got and interrupted_at is not None:
                yield "stuck", None
                return
            for kind, value in got:
                if kind == "eof":
                    yield "exited", None
                    return
                yield kind, value
                if kind == "event" and value.get("type") == until and value.get("id") == cell_id:
                    return

    def do_execute(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False, **kwargs):
        count = self.execution_count  # ipykernel counts (when not silent)
        self._cell_id += 1
        cell_id = self._cell_id
        error = None
        self._node.send_cell(cell_id, code)
        for kind, value in self._wait_events(cell_id, until="done"):
            if kind in ("stdout", "stderr"):
                self._stream(kind, value, silent)
            elif kind == "event":
                error = self._event(value, count, silent) or error
            elif kind in ("exited", "stuck"):
                error = self._replace_node(kind, silent)
        if error:
            return {"status": "error", "execution_count": count, **error}
        return {"status": "ok", "execution_count": count, "payload": [], "user_expressions": {}}

    def _stream(self, name: str, text: str, silent: bool) -> None:
        if not silent and text:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def _event(self, event: dict, count: int, silent: bool) -> dict | None:
        kind = event.get("type")
        if kind == "stream":
            self._stream(event["name"], event["text"], silent)
        elif kind == "result" and not silent:
            self.send_response(
                self.iopub_socket, "execute_result", {"execution_count": count, "data": event["data"], "metadata": {}}
            )
        elif kind == "error":
            error = {"ename": event["ename"], "evalue": event["evalue"], "traceback": event["traceback"]}
            if not silent:
                self.send_response(self.iopub_socket, "error", error)
            return error
        return None

    def _replace_node(self, why: str, silent: bool) -> dict:
        """Node exited, or ignored an interrupt: a new one (the context's state is lost)."""
        try:
            # Its events pipe closed: it has exited, or is about to.
            code = self._node.proc.wait(timeout=5) if why == "exited" else None
        except subprocess.TimeoutExpired:
            code = None
        self._node.close()
        self._start_node()
        if why == "stuck":
            value = "the cell did not stop when interrupted (code that never yields); the JavaScript runtime was restarted and its state is lost"
        else:
            value = f"the JavaScript runtime (node) exited with code {code}; it was restarted and its state is lost"
        error = {"ename": "KernelRestarted", "evalue": value, "traceback": [f"KernelRestarted: {value}"]}
        if not silent:
            self.send_response(self.iopub_socket, "error", error)
        return error

    def do_shutdown(self, restart):
        if self._node:
            self._node.close()
        return {"status": "ok", "restart": restart}


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=JavaScriptKernel)
