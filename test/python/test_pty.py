"""sandbox.pty: create, send_stdin, resize, kill, exit, connect."""

import threading

import pytest
from e2b import CommandExitException, CommandResult, PtySize, Sandbox

from helpers import wait_until


class Terminal:
    """Drains a PTY handle on a thread; .text is everything it printed so far."""

    def __init__(self, handle):
        self.handle = handle
        self._buf = bytearray()
        self._lock = threading.Lock()
        self.result: CommandResult | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            self.result = self.handle.wait(on_pty=self._on_pty)
        except BaseException as e:  # noqa: BLE001 - inspected by the tests
            self.error = e

    def _on_pty(self, data: bytes):
        with self._lock:
            self._buf += data

    @property
    def text(self) -> str:
        with self._lock:
            return self._buf.decode("utf-8", errors="replace")

    def wait_for(self, needle: str, timeout: float = 20):
        wait_until(lambda: needle in self.text, f"{needle!r} on the terminal (got {self.text[-300:]!r})", timeout)

    def join(self, timeout: float = 20):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the PTY stream did not end"


def _running(sandbox: Sandbox, cmdline: str) -> bool:
    try:
        sandbox.commands.run(f"pgrep -fx '{cmdline}'")
        return True
    except CommandExitException:
        return False


def test_pty_input_resize_and_kill(shared_sandbox: Sandbox):
    h = shared_sandbox.pty.create(PtySize(rows=24, cols=80))
    assert h.pid > 0
    term = Terminal(h)

    shared_sandbox.pty.send_stdin(h.pid, b"echo pty-$((40+2))\n")
    term.wait_for("pty-42")

    # A real terminal: tty names a pts device, TERM is set, size is what we asked.
    shared_sandbox.pty.send_stdin(h.pid, b"tty; echo TERM=$TERM; stty size\n")
    term.wait_for("/dev/pts/")
    term.wait_for("TERM=xterm-256color")
    term.wait_for("24 80")

    shared_sandbox.pty.resize(h.pid, PtySize(rows=50, cols=132))
    shared_sandbox.pty.send_stdin(h.pid, b"stty size\n")
    term.wait_for("50 132")

    # Control characters reach the foreground job: Ctrl-C interrupts a sleep.
    # Wait until the sleep runs, as a person at the keyboard would: a ^C typed
    # while bash is still starting the job goes to bash instead, and bash (not
    # locale2b: raw node-pty shows the same under load) may drop the next line.
    shared_sandbox.pty.send_stdin(h.pid, b"sleep 4242\n")
    wait_until(lambda: _running(shared_sandbox, "sleep 4242"), "the sleep to start under the PTY's bash")
    shared_sandbox.pty.send_stdin(h.pid, b"\x03")
    shared_sandbox.pty.send_stdin(h.pid, b"echo after-$((1+1))-interrupt\n")
    term.wait_for("after-2-interrupt", timeout=10)
    assert not _running(shared_sandbox, "sleep 4242"), "Ctrl-C did not stop the foreground sleep"

    assert any(p.pid == h.pid for p in shared_sandbox.commands.list())
    assert shared_sandbox.pty.kill(h.pid) is True
    term.join()
    assert isinstance(term.error, CommandExitException)
    assert shared_sandbox.pty.kill(h.pid) is False


def test_pty_exit_ends_the_stream_with_the_exit_code(shared_sandbox: Sandbox):
    h = shared_sandbox.pty.create(PtySize(rows=10, cols=40))
    term = Terminal(h)
    shared_sandbox.pty.send_stdin(h.pid, b"exit 0\n")
    term.join()
    assert term.error is None, term.error
    assert term.result is not None and term.result.exit_code == 0

    h = shared_sandbox.pty.create(PtySize(rows=10, cols=40))
    term = Terminal(h)
    shared_sandbox.pty.send_stdin(h.pid, b"exit 7\n")
    term.join()
    assert isinstance(term.error, CommandExitException)
    assert term.error.exit_code == 7


def test_pty_user_cwd_and_envs(shared_sandbox: Sandbox):
    h = shared_sandbox.pty.create(PtySize(rows=24, cols=80), user="root", cwd="/tmp", envs={"PTY_VAR": "here"})
    term = Terminal(h)
    shared_sandbox.pty.send_stdin(h.pid, b"echo \"$(whoami):$(pwd):$PTY_VAR:\"\n")
    term.wait_for("root:/tmp:here:")
    shared_sandbox.pty.kill(h.pid)
    term.join()


def test_pty_connect_after_disconnect(shared_sandbox: Sandbox):
    h = shared_sandbox.pty.create(PtySize(rows=24, cols=80))
    h.disconnect()
    again = shared_sandbox.pty.connect(h.pid)
    term = Terminal(again)
    shared_sandbox.pty.send_stdin(h.pid, b"echo reconnected-$((6*7))\n")
    term.wait_for("reconnected-42")
    shared_sandbox.pty.kill(h.pid)
    term.join()


def test_pty_send_to_unknown_pid_fails(shared_sandbox: Sandbox):
    from e2b import NotFoundException

    with pytest.raises(NotFoundException):
        shared_sandbox.pty.send_stdin(999_999, b"x")
