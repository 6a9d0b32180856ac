"""sandbox.commands: run, streaming, exit codes, background, stdin, connect, kill, list, user, cwd."""

import threading

import pytest
from e2b import CommandExitException, CommandHandle, Sandbox, TimeoutException

from helpers import unique, wait_until


def test_run_returns_stdout_stderr_and_exit_code(shared_sandbox: Sandbox):
    r = shared_sandbox.commands.run("echo hello; echo oops >&2")
    assert r.exit_code == 0
    assert r.stdout == "hello\n"
    assert r.stderr == "oops\n"
    assert r.error is None


def test_on_stdout_and_on_stderr_stream_while_the_command_runs(shared_sandbox: Sandbox):
    # The command prints, then waits for a marker file that only on_stdout creates, once it has seen
    # out3: the command can end only if its first lines reached the client while it still ran (proved
    # by the order of events, not a stopwatch; output held back until the end fails at the timeout).
    marker = f"/tmp/{unique('streamed')}"
    out: list[str] = []
    err: list[str] = []

    def on_stdout(s: str):
        out.append(s)
        if "out3" in "".join(out) and "last" not in "".join(out):
            shared_sandbox.files.write(marker, "seen")

    r = shared_sandbox.commands.run(
        f"for i in 1 2 3; do echo out$i; echo err$i >&2; done; while [ ! -e {marker} ]; do sleep 0.05; done; echo last",
        on_stdout=on_stdout,
        on_stderr=err.append,
        timeout=120,
    )
    assert "".join(out) == r.stdout == "out1\nout2\nout3\nlast\n"
    assert "".join(err) == r.stderr == "err1\nerr2\nerr3\n"
    assert out[0].startswith("out1")


def test_non_zero_exit_raises_command_exit_exception(shared_sandbox: Sandbox):
    with pytest.raises(CommandExitException) as info:
        shared_sandbox.commands.run("echo partial; echo broken >&2; exit 3")
    e = info.value
    assert e.exit_code == 3
    assert e.stdout == "partial\n"
    assert e.stderr == "broken\n"


def test_exit_code_of_a_missing_command(shared_sandbox: Sandbox):
    with pytest.raises(CommandExitException) as info:
        shared_sandbox.commands.run("definitely-not-a-command-xyz")
    assert info.value.exit_code == 127
    assert "not found" in info.value.stderr


def test_envs_per_command_and_from_create(control_plane):
    sbx = Sandbox.create(template="base", envs={"FROM_CREATE": "created-value"}, timeout=120)
    try:
        r = sbx.commands.run('echo "$FROM_CREATE|$PER_CMD"', envs={"PER_CMD": "cmd-value"})
        assert r.stdout == "created-value|cmd-value\n"
        # Per-command envs override sandbox envs for that command only.
        r = sbx.commands.run('echo "$FROM_CREATE"', envs={"FROM_CREATE": "override"})
        assert r.stdout == "override\n"
        assert sbx.commands.run('echo "$FROM_CREATE"').stdout == "created-value\n"
    finally:
        sbx.kill()


def test_background_then_wait(shared_sandbox: Sandbox):
    h = shared_sandbox.commands.run("sleep 1; echo done-in-background", background=True)
    assert isinstance(h, CommandHandle)
    assert isinstance(h.pid, int) and h.pid > 0
    r = h.wait()
    assert r.exit_code == 0
    assert r.stdout == "done-in-background\n"


def test_background_iteration_yields_output(shared_sandbox: Sandbox):
    h = shared_sandbox.commands.run("echo a; echo b >&2; echo c", background=True)
    stdout, stderr = "", ""
    for out, err, _pty in h:
        stdout += out or ""
        stderr += err or ""
    assert stdout == "a\nc\n"
    assert stderr == "b\n"


def test_stdin_send_and_close(shared_sandbox: Sandbox):
    h = shared_sandbox.commands.run("cat", background=True, stdin=True)
    h.send_stdin("hello from stdin\n")
    shared_sandbox.commands.send_stdin(h.pid, b"bytes too\n")
    h.close_stdin()
    r = h.wait()
    assert r.exit_code == 0
    assert r.stdout == "hello from stdin\nbytes too\n"


def test_close_stdin_through_commands(shared_sandbox: Sandbox):
    h = shared_sandbox.commands.run("wc -c", background=True, stdin=True)
    shared_sandbox.commands.send_stdin(h.pid, "12345")
    shared_sandbox.commands.close_stdin(h.pid)
    assert h.wait().stdout.strip() == "5"


def test_stdin_is_closed_by_default(shared_sandbox: Sandbox):
    # Without stdin=True the command sees EOF at once instead of hanging.
    r = shared_sandbox.commands.run("cat; echo eof", timeout=20)
    assert r.stdout == "eof\n"


def test_connect_to_a_running_command_by_pid(shared_sandbox: Sandbox):
    h = shared_sandbox.commands.run("sleep 2; echo after-connect; exit 4", background=True)
    h.disconnect()
    again = shared_sandbox.commands.connect(h.pid)
    assert again.pid == h.pid
    with pytest.raises(CommandExitException) as info:
        again.wait()
    assert info.value.exit_code == 4
    assert "after-connect\n" in info.value.stdout


def test_connect_to_an_unknown_pid_fails(shared_sandbox: Sandbox):
    from e2b import NotFoundException

    with pytest.raises(NotFoundException):
        shared_sandbox.commands.connect(999_999)


def test_kill_a_running_command_then_unknown_pid(shared_sandbox: Sandbox):
    h = shared_sandbox.commands.run("sleep 600", background=True)
    assert shared_sandbox.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as info:
        h.wait()
    assert info.value.exit_code != 0
    # Killed: it is gone from the list and a second kill finds nothing.
    wait_until(
        lambda: all(p.pid != h.pid for p in shared_sandbox.commands.list()),
        "the killed command to leave the list",
    )
    assert shared_sandbox.commands.kill(h.pid) is False
    assert shared_sandbox.commands.kill(999_999) is False


def test_handle_kill(shared_sandbox: Sandbox):
    h = shared_sandbox.commands.run("sleep 600", background=True)
    assert h.kill() is True
    with pytest.raises(CommandExitException):
        h.wait()


def test_list_running_commands(shared_sandbox: Sandbox):
    h = shared_sandbox.commands.run("sleep 600", background=True, envs={"LISTED": "yes"}, cwd="/tmp")
    try:
        procs = shared_sandbox.commands.list()
        mine = [p for p in procs if p.pid == h.pid]
        assert len(mine) == 1, procs
        p = mine[0]
        assert p.cmd == "/bin/bash"
        assert p.args == ["-l", "-c", "sleep 600"]
        assert p.envs.get("LISTED") == "yes"
        assert p.cwd == "/tmp"
    finally:
        h.kill()


def test_default_user_is_user_with_home(shared_sandbox: Sandbox):
    r = shared_sandbox.commands.run("whoami; echo ~; pwd; id -u")
    whoami, home, pwd, uid = r.stdout.split("\n")[:4]
    assert whoami == "user"
    assert home == "/home/user"
    assert pwd == "/home/user"
    assert uid != "0"


def test_user_root(shared_sandbox: Sandbox):
    r = shared_sandbox.commands.run("whoami; id -u; echo $HOME", user="root")
    assert r.stdout.split("\n")[:3] == ["root", "0", "/root"]


def test_files_written_by_a_command_belong_to_its_user(shared_sandbox: Sandbox):
    shared_sandbox.commands.run("touch /tmp/owned-by-user")
    shared_sandbox.commands.run("touch /tmp/owned-by-root", user="root")
    assert shared_sandbox.files.get_info("/tmp/owned-by-user").owner == "user"
    assert shared_sandbox.files.get_info("/tmp/owned-by-root").owner == "root"


def test_cwd(shared_sandbox: Sandbox):
    assert shared_sandbox.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    shared_sandbox.files.make_dir("/home/user/work/dir")
    assert shared_sandbox.commands.run("pwd", cwd="/home/user/work/dir").stdout == "/home/user/work/dir\n"


def test_command_timeout(shared_sandbox: Sandbox):
    token = unique("deadline")
    with pytest.raises(TimeoutException):
        shared_sandbox.commands.run(f"sleep 600 # {token}", timeout=2)
    # The deadline ended the process itself (Connect-Timeout-Ms is its lifetime), not only the wait for it.
    wait_until(
        lambda: not any(token in " ".join(p.args) for p in shared_sandbox.commands.list()),
        "the timed-out command to be gone",
    )


def test_long_output_is_complete(shared_sandbox: Sandbox):
    # ~1.9 MB of output in many chunks, nothing lost or reordered.
    r = shared_sandbox.commands.run("seq 1 250000")
    lines = r.stdout.split("\n")
    assert lines[0] == "1"
    assert lines[-2] == "250000"
    assert len(lines) == 250001


def test_utf8_output(shared_sandbox: Sandbox):
    r = shared_sandbox.commands.run("printf 'h\\xc3\\xa9llo \\xe2\\x9c\\x93\\n'")
    assert r.stdout == "héllo ✓\n"


def test_concurrent_commands_in_threads(shared_sandbox: Sandbox):
    # Each job checks in, then waits until all ten have: a job can only end once every job has
    # started, so they all ran side by side (all started before any ended), however slow the
    # machine. Run one after another, none could end (each would fail at its timeout).
    barrier = f"/tmp/{unique('barrier')}"
    shared_sandbox.files.make_dir(barrier)
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def work(i: int):
        try:
            cmd = f"touch {barrier}/{i}; while [ $(ls {barrier} | wc -l) -lt 10 ]; do sleep 0.05; done; echo job{i}"
            results[i] = shared_sandbox.commands.run(cmd, timeout=120).stdout
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {i: f"job{i}\n" for i in range(10)}
