"""Snapshots and fork with the real Python SDK: filesystem-only snapshots on the process runtime (needs root)."""

import os

import pytest
from e2b import Sandbox, SandboxNotFoundException

from helpers import unique

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="snapshots need the control plane to run as root (sandbox mode)")


def _ids(paginator) -> list[str]:
    out = []
    while paginator.has_next:
        out.extend(s.snapshot_id for s in paginator.next_items())
    return out


def test_snapshot_create_list_page_use_delete(control_plane):
    src = Sandbox.create(template="base", timeout=600, metadata={"role": "src"})
    try:
        src.files.write("/home/user/py/data.txt", "from python")
        src.commands.run("sleep 600", background=True, timeout=0)
        first = src.create_snapshot(mode="filesystem")
        second = Sandbox.create_snapshot(src.sandbox_id)
        assert first.snapshot_id.endswith(":default") and first.names == []
        # Newest first, one per page through next_token.
        assert _ids(Sandbox.list_snapshots(sandbox_id=src.sandbox_id, limit=1)) == [second.snapshot_id, first.snapshot_id]
        assert _ids(src.list_snapshots()) == [second.snapshot_id, first.snapshot_id]

        child = Sandbox.create(template=first.snapshot_id, timeout=600, envs={"WHO": "child"}, metadata={"role": "child"})
        try:
            assert child.sandbox_id != src.sandbox_id
            assert child.files.read("/home/user/py/data.txt") == "from python"
            out = child.commands.run("echo $WHO; hostname; pgrep -x sleep || echo none").stdout
            assert out == f"child\n{child.sandbox_id}\nnone\n"
            assert child.get_info().metadata == {"role": "child"}
            # Deleting the snapshot leaves the sandbox made from it working.
            assert Sandbox.delete_snapshot(first.snapshot_id) is True
            assert Sandbox.delete_snapshot(first.snapshot_id) is False
            assert child.commands.run("cat /home/user/py/data.txt").stdout == "from python"
        finally:
            child.kill()
        assert Sandbox.delete_snapshot(second.snapshot_id) is True
        assert _ids(Sandbox.list_snapshots(sandbox_id=src.sandbox_id)) == []
    finally:
        src.kill()


def test_named_snapshot_and_fork(control_plane):
    parent = Sandbox.create(template="base", timeout=600, envs={"FROM": "parent"})
    forks = []
    try:
        parent.files.write("/home/user/f.txt", "fork me")
        name = unique("py-snap")
        info = parent.create_snapshot(name=name)
        assert info.snapshot_id == f"local/{name}:default"
        assert info.names == [f"local/{name}:default"]
        made = Sandbox.create(template=name, timeout=600)
        forks.append(made)
        assert made.files.read("/home/user/f.txt") == "fork me"

        results = parent.fork(count=3, timeout=300)
        assert len(results) == 3
        for r in results:
            assert isinstance(r, Sandbox), r
            forks.append(r)
        assert len({parent.sandbox_id, *(f.sandbox_id for f in forks[1:])}) == 4
        for f in forks[1:]:
            assert f.files.read("/home/user/f.txt") == "fork me"
            assert f.commands.run("echo $FROM; hostname").stdout == f"parent\n{f.sandbox_id}\n"
        assert Sandbox.delete_snapshot(name) is True
    finally:
        for f in forks:
            f.kill()
        parent.kill()


def test_snapshot_bad_input(control_plane):
    with pytest.raises(SandboxNotFoundException):
        Sandbox.create_snapshot("nosuchsandbox")
    with pytest.raises(SandboxNotFoundException):
        Sandbox.fork("nosuchsandbox")
    assert Sandbox.delete_snapshot("nosuchsnapshot") is False
    sbx = Sandbox.create(template="base", timeout=120)
    try:
        with control_plane.api() as api:
            # The process runtime takes filesystem-only snapshots: a memory one is refused, never downgraded.
            r = api.post(f"/sandboxes/{sbx.sandbox_id}/snapshots", json={"memory": True})
            assert r.status_code == 400 and "filesystem" in r.json()["message"]
            assert api.post(f"/sandboxes/{sbx.sandbox_id}/fork", json={"count": 0}).status_code == 400
            assert api.post(f"/sandboxes/{sbx.sandbox_id}/fork", content=b"{oops", headers={"content-type": "application/json"}).status_code == 400
            assert api.post("/v2/sandboxes", json={"templateID": "nosuchsnapshot:v9"}).status_code == 404
        assert _ids(Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id)) == []
    finally:
        sbx.kill()


def test_filesystem_only_pause_and_reboot(control_plane):
    sbx = Sandbox.create(template="base", timeout=600, envs={"KEEP": "yes"})
    try:
        boot_id = "/proc/sys/kernel/random/boot_id"
        sbx.files.write("/home/user/keep.txt", "kept")
        sbx.commands.run("sleep 600", background=True, timeout=0)
        first_boot = sbx.files.read(boot_id)
        assert sbx.pause(mode="filesystem") is True
        assert sbx.get_info().state.value == "paused"
        back = Sandbox.connect(sbx.sandbox_id)
        assert back.files.read("/home/user/keep.txt") == "kept"
        assert back.commands.run("echo $KEEP; pgrep -x sleep || echo none").stdout == "yes\nnone\n"
        # Booted anew, as a VM cold-booted from its disk: a new boot id.
        second_boot = back.files.read(boot_id)
        assert second_boot != first_boot

        back.commands.run("sleep 601", background=True, timeout=0)
        back.pause()
        rebooted = Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
        assert rebooted.commands.run("pgrep -fx 'sleep 601' || echo none").stdout == "none\n"
        assert rebooted.files.read("/home/user/keep.txt") == "kept"
        assert rebooted.files.read(boot_id) not in (first_boot, second_boot)
    finally:
        sbx.kill()
