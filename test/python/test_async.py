"""The async API (AsyncSandbox): the same service through asyncio."""

import asyncio

import pytest
from e2b import AsyncSandbox, CommandExitException, FilesystemEventType, SandboxQuery, SandboxState

from helpers import unique


@pytest.mark.asyncio
async def test_async_lifecycle_commands_and_files(control_plane):
    tag = unique("async")
    sbx = await AsyncSandbox.create(template="base", metadata={"tag": tag}, envs={"ASYNC_ENV": "yes"}, timeout=120)
    try:
        assert await sbx.is_running()
        out: list[str] = []

        async def on_stdout(s: str):
            out.append(s)

        r = await sbx.commands.run('echo "$ASYNC_ENV"; echo two', on_stdout=on_stdout)
        assert r.stdout == "yes\ntwo\n"
        assert "".join(out) == r.stdout

        with pytest.raises(CommandExitException) as info:
            await sbx.commands.run("echo e >&2; exit 5")
        assert info.value.exit_code == 5 and info.value.stderr == "e\n"

        h = await sbx.commands.run("cat", background=True, stdin=True)
        await h.send_stdin("async stdin\n")
        await h.close_stdin()
        assert (await h.wait()).stdout == "async stdin\n"

        await sbx.files.write("/home/user/async.txt", "async file")
        assert await sbx.files.read("/home/user/async.txt") == "async file"
        assert [e.name for e in await sbx.files.list("/home/user") if e.name == "async.txt"] == ["async.txt"]

        info = await sbx.get_info()
        assert info.metadata == {"tag": tag}
        assert info.state == SandboxState.RUNNING
        paginator = AsyncSandbox.list(query=SandboxQuery(metadata={"tag": tag}))
        assert [s.sandbox_id for s in await paginator.next_items()] == [sbx.sandbox_id]

        # Many commands at once on one event loop: each checks in and waits for all ten, so each can
        # end only if all ran side by side (all started before any ended), however slow the machine.
        barrier = f"/tmp/{unique('barrier')}"
        await sbx.files.make_dir(barrier)
        wait_all = f"while [ $(ls {barrier} | wc -l) -lt 10 ]; do sleep 0.05; done"
        results = await asyncio.gather(*(sbx.commands.run(f"touch {barrier}/{i}; {wait_all}; echo {i}", timeout=120) for i in range(10)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(10)]
    finally:
        assert await sbx.kill() is True


@pytest.mark.asyncio
async def test_async_watch_dir_streams_events(control_plane):
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.make_dir("/home/user/watched")
        events = []
        got = asyncio.Event()

        def on_event(e):
            events.append(e)
            if any(x.name == "hello.txt" and x.type == FilesystemEventType.CREATE for x in events):
                got.set()

        handle = await sbx.files.watch_dir("/home/user/watched", on_event=on_event)
        await sbx.files.write("/home/user/watched/hello.txt", "hi")
        await asyncio.wait_for(got.wait(), timeout=20)
        await handle.stop()
    finally:
        await sbx.kill()


@pytest.mark.asyncio
async def test_async_kill_during_a_command_says_the_sandbox_was_killed(control_plane):
    # The SDK reads a command's stream in the background; when envd dies under the kill, it asks the proxy
    # whether the sandbox is still there. That answer must be E2B's "not found" (the SDK then says the
    # sandbox was killed), not "unreachable", even while the kill is still under way.
    from e2b import TimeoutException

    sbx = await AsyncSandbox.create(timeout=120)
    cmd = await sbx.commands.run("sleep 60", background=True)
    assert await sbx.kill() is True
    with pytest.raises(TimeoutException) as info:
        await cmd.wait()
    assert "sandbox was killed or reached its end of life" in str(info.value)
