"""Volumes through the Python SDK: Volume.create/list/get_info/destroy, the file API, volume_mounts at create."""

import os

import pytest
from e2b import Sandbox, SandboxException, Volume, VolumeException, VolumePathNotFoundException

from helpers import unique

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="volumes need root (loop-mounted ext4 images)")


def test_volume_api_and_mounts():
    vol = Volume.create(unique("py-vol").replace(".", "-"))
    sandboxes = []
    try:
        assert vol.volume_id.startswith("vol_")
        assert vol.name in [v.name for v in Volume.list()]
        vol.write_file("/from-python.txt", "written by the python SDK")
        vol.make_dir("/nested/dir", force=True)
        assert [e.name for e in vol.list("/")] == ["from-python.txt", "nested"]
        assert vol.get_info("/from-python.txt").size == len("written by the python SDK")
        assert vol.exists("/nested/dir") and not vol.exists("/nope")
        with pytest.raises(VolumePathNotFoundException):
            vol.read_file("/nope")

        # Two sandboxes mount it at once: a write in one is read in the other, and by the API.
        a = Sandbox.create(volume_mounts={"/mnt/v": vol})
        sandboxes.append(a)
        b = Sandbox.create(volume_mounts={"/data": vol.name})
        sandboxes.append(b)
        assert a.commands.run("cat /mnt/v/from-python.txt").stdout == "written by the python SDK"
        a.commands.run("echo from a > /mnt/v/a.txt")
        assert b.commands.run("cat /data/a.txt").stdout == "from a\n"
        assert vol.read_file("/a.txt") == "from a\n"

        # Destroying it while mounted is refused; after the kills it goes.
        with pytest.raises(VolumeException, match="is mounted by"):
            Volume.destroy(vol.volume_id)
    finally:
        for s in sandboxes:
            s.kill()
    assert Volume.destroy(vol.volume_id) is True
    assert Volume.destroy(vol.volume_id) is False


def test_bad_names_and_paths():
    with pytest.raises(VolumeException, match="invalid volume name"):
        Volume.create("no spaces please")
    vol = Volume.create(unique("py-bad").replace(".", "-"))
    try:
        with pytest.raises(VolumeException, match=r"'\.\.'"):
            vol.read_file("/../../etc/passwd")
        with pytest.raises(SandboxException, match="no volume named .no-such-volume.: create it first"):
            Sandbox.create(volume_mounts={"/mnt/x": "no-such-volume"})
    finally:
        Volume.destroy(vol.volume_id)
