"""sandbox.files: read/write, list, make_dir, rename, remove, exists, get_info, big files, signed URLs, watch_dir."""

import hashlib
import io
import os
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import httpx
import pytest
from e2b import (
    EntryInfo,
    FileNotFoundException,
    FilesystemEventType,
    FileType,
    Sandbox,
    SandboxException,
    WriteInfo,
)

from helpers import unique, wait_until


def test_write_and_read_text(shared_sandbox: Sandbox):
    path = f"/home/user/{unique('text')}.txt"
    info = shared_sandbox.files.write(path, "héllo\nworld ✓\n")
    assert isinstance(info, WriteInfo)
    assert info.path == path
    assert info.name == path.rsplit("/", 1)[1]
    assert info.type == FileType.FILE
    assert shared_sandbox.files.read(path) == "héllo\nworld ✓\n"
    # The same bytes as seen from inside the sandbox.
    assert shared_sandbox.commands.run(f"cat {path}").stdout == "héllo\nworld ✓\n"


def test_write_and_read_bytes(shared_sandbox: Sandbox):
    path = f"/tmp/{unique('bytes')}.bin"
    data = bytes(range(256)) * 16
    shared_sandbox.files.write(path, data)
    got = shared_sandbox.files.read(path, format="bytes")
    assert isinstance(got, bytearray)
    assert bytes(got) == data
    stream = shared_sandbox.files.read(path, format="stream")
    assert b"".join(stream) == data


def test_write_file_like_and_overwrite(shared_sandbox: Sandbox):
    path = f"/home/user/{unique('io')}.txt"
    shared_sandbox.files.write(path, io.BytesIO(b"first version, long"))
    shared_sandbox.files.write(path, "second")
    assert shared_sandbox.files.read(path) == "second"


def test_empty_file(shared_sandbox: Sandbox):
    path = f"/home/user/{unique('empty')}"
    shared_sandbox.files.write(path, b"")
    assert shared_sandbox.files.read(path) == ""
    assert shared_sandbox.files.get_info(path).size == 0


def test_relative_paths_resolve_against_home(shared_sandbox: Sandbox):
    name = unique("rel") + ".txt"
    shared_sandbox.files.write(name, "relative")
    assert shared_sandbox.files.read(f"/home/user/{name}") == "relative"
    assert shared_sandbox.files.exists(name)


def test_write_creates_parent_directories(shared_sandbox: Sandbox):
    base = f"/home/user/{unique('deep')}"
    shared_sandbox.files.write(f"{base}/a/b/c.txt", "deep")
    assert shared_sandbox.files.get_info(f"{base}/a/b").type == FileType.DIR
    assert shared_sandbox.files.read(f"{base}/a/b/c.txt") == "deep"


def test_write_files_many(shared_sandbox: Sandbox):
    base = f"/home/user/{unique('many')}"
    infos = shared_sandbox.files.write_files(
        [{"path": f"{base}/one.txt", "data": "1"}, {"path": f"{base}/sub/two.txt", "data": b"2"}]
    )
    assert sorted(i.path for i in infos) == [f"{base}/one.txt", f"{base}/sub/two.txt"]
    assert shared_sandbox.files.read(f"{base}/sub/two.txt") == "2"


def test_read_missing_file_raises_file_not_found(shared_sandbox: Sandbox):
    with pytest.raises(FileNotFoundException):
        shared_sandbox.files.read("/home/user/does/not/exist.txt")


def test_list_make_dir_and_depth(shared_sandbox: Sandbox):
    base = f"/home/user/{unique('ls')}"
    assert shared_sandbox.files.make_dir(f"{base}/sub/inner") is True
    assert shared_sandbox.files.make_dir(f"{base}/sub") is False  # already exists
    shared_sandbox.files.write(f"{base}/a.txt", "aaa")
    shared_sandbox.files.write(f"{base}/sub/b.txt", "b")

    entries = shared_sandbox.files.list(base)
    assert all(isinstance(e, EntryInfo) for e in entries)
    by_name = {e.name: e for e in entries}
    assert set(by_name) == {"a.txt", "sub"}
    assert by_name["a.txt"].type == FileType.FILE
    assert by_name["a.txt"].path == f"{base}/a.txt"
    assert by_name["a.txt"].size == 3
    assert by_name["sub"].type == FileType.DIR

    deep = {e.path for e in shared_sandbox.files.list(base, depth=2)}
    assert deep == {f"{base}/a.txt", f"{base}/sub", f"{base}/sub/inner", f"{base}/sub/b.txt"}


def test_list_shows_names_that_are_not_utf8(shared_sandbox: Sandbox):
    # A name with a byte no UTF-8 text has is listed (with U+FFFD), as by E2B's envd: nothing hides.
    base = f"/home/user/{unique('raw')}"
    shared_sandbox.commands.run(f"mkdir -p {base} && printf x > {base}/$(printf 'bad-\\377')")
    entries = shared_sandbox.files.list(base)
    assert [(e.name, e.path, e.type) for e in entries] == [("bad-\ufffd", f"{base}/bad-\ufffd", FileType.FILE)]


def test_list_missing_dir_raises(shared_sandbox: Sandbox):
    with pytest.raises(FileNotFoundException):
        shared_sandbox.files.list("/home/user/no-such-dir-here")


def test_rename(shared_sandbox: Sandbox):
    base = f"/home/user/{unique('mv')}"
    shared_sandbox.files.write(f"{base}/old.txt", "moving")
    info = shared_sandbox.files.rename(f"{base}/old.txt", f"{base}/new.txt")
    assert info.path == f"{base}/new.txt"
    assert info.name == "new.txt"
    assert not shared_sandbox.files.exists(f"{base}/old.txt")
    assert shared_sandbox.files.read(f"{base}/new.txt") == "moving"


def test_remove_file_and_directory(shared_sandbox: Sandbox):
    base = f"/home/user/{unique('rm')}"
    shared_sandbox.files.write(f"{base}/dir/f.txt", "x")
    shared_sandbox.files.write(f"{base}/g.txt", "y")
    assert shared_sandbox.files.exists(f"{base}/g.txt")
    shared_sandbox.files.remove(f"{base}/g.txt")
    assert not shared_sandbox.files.exists(f"{base}/g.txt")
    shared_sandbox.files.remove(f"{base}/dir")  # recursive
    assert not shared_sandbox.files.exists(f"{base}/dir")
    assert shared_sandbox.files.exists(base)


def test_get_info(shared_sandbox: Sandbox):
    path = f"/home/user/{unique('info')}.txt"
    before = datetime.now(timezone.utc)
    shared_sandbox.files.write(path, "12345")
    after = datetime.now(timezone.utc)
    info = shared_sandbox.files.get_info(path)
    assert info.name == path.rsplit("/", 1)[1]
    assert info.path == path
    assert info.type == FileType.FILE
    assert info.size == 5
    assert info.owner == "user"
    assert info.group == "user"
    assert info.permissions == "-rw-r--r--"
    assert info.mode == 0o644
    assert info.symlink_target is None
    # Written between the two clock reads (1 s for the filesystem's coarse clock), however slow the machine.
    # (the mtime is the sandbox's clock: a VM under emulation may run a few seconds behind or ahead of the host's)
    assert before - timedelta(seconds=15) <= info.modified_time <= after + timedelta(seconds=15)

    d = shared_sandbox.files.get_info("/home/user")
    assert d.type == FileType.DIR
    assert d.permissions.startswith("d")

    with pytest.raises(FileNotFoundException):
        shared_sandbox.files.get_info("/home/user/nope-nope")


def test_symlink_info(shared_sandbox: Sandbox):
    base = f"/home/user/{unique('ln')}"
    shared_sandbox.files.write(f"{base}/target.txt", "t")
    shared_sandbox.commands.run(f"ln -s {base}/target.txt {base}/link")
    info = shared_sandbox.files.get_info(f"{base}/link")
    assert info.symlink_target == f"{base}/target.txt"


def test_write_as_root(shared_sandbox: Sandbox):
    path = f"/tmp/{unique('root')}.txt"
    shared_sandbox.files.write(path, "r", user="root")
    assert shared_sandbox.files.get_info(path).owner == "root"
    assert shared_sandbox.files.read(path, user="root") == "r"


def test_64_mib_round_trip_with_sha256(shared_sandbox: Sandbox):
    size = 64 * 1024 * 1024
    data = os.urandom(size)
    digest = hashlib.sha256(data).hexdigest()
    path = f"/home/user/{unique('big')}.bin"

    start = time.monotonic()
    shared_sandbox.files.write(path, data, request_timeout=300)
    up = time.monotonic() - start
    inside = shared_sandbox.commands.run(f"sha256sum {path} && stat -c %s {path}", timeout=120).stdout.split()
    assert inside[0] == digest
    assert int(inside[2]) == size

    start = time.monotonic()
    got = shared_sandbox.files.read(path, format="bytes", request_timeout=300)
    down = time.monotonic() - start
    assert len(got) == size
    assert hashlib.sha256(got).hexdigest() == digest

    # Streamed both ways too (octet-stream upload, chunked download).
    path2 = path + ".stream"
    shared_sandbox.files.write(path2, io.BytesIO(data), request_timeout=300)
    h = hashlib.sha256()
    n = 0
    for chunk in shared_sandbox.files.read(path2, format="stream"):
        h.update(chunk)
        n += len(chunk)
    assert n == size
    assert h.hexdigest() == digest
    print(f"64 MiB: upload {up:.2f}s, download {down:.2f}s")
    shared_sandbox.files.remove(path)
    shared_sandbox.files.remove(path2)


# --- signed upload/download URLs ---------------------------------------------


def test_signed_urls_work_without_sandbox_headers(shared_sandbox: Sandbox, control_plane):
    path = f"/home/user/{unique('signed')}.txt"
    up = shared_sandbox.upload_url(path)
    down = shared_sandbox.download_url(path)
    # The URLs are on E2B_SANDBOX_URL and carry a v1 signature.
    for url in (up, down):
        assert url.startswith(control_plane.url + "/files?")
        q = parse_qs(urlparse(url).query)
        assert q["path"] == [path]
        assert q["signature"][0].startswith("v1_")

    # A plain client: no X-Access-Token, no E2b-Sandbox-Id, no API key.
    r = httpx.post(up, files={"file": ("ignored-name.txt", b"uploaded through a signed URL")}, timeout=30)
    assert r.status_code == 200, r.text
    entries = r.json()
    assert entries[0]["path"] == path
    assert entries[0]["type"] == "file"
    assert shared_sandbox.files.read(path) == "uploaded through a signed URL"

    with urllib.request.urlopen(down, timeout=30) as resp:
        assert resp.status == 200
        assert resp.read() == b"uploaded through a signed URL"


def test_signed_upload_url_takes_a_file_part_without_a_filename(shared_sandbox: Sandbox):
    # files={"file": (None, …)} sends a part with no filename, as `form.append("file", "text")` does.
    path = f"/home/user/{unique('field')}.txt"
    r = httpx.post(shared_sandbox.upload_url(path), files={"file": (None, "text")}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()[0]["path"] == path
    assert shared_sandbox.files.read(path) == "text"


def test_signed_urls_with_expiration_and_user(shared_sandbox: Sandbox):
    path = f"/tmp/{unique('signed-exp')}.bin"
    up = shared_sandbox.upload_url(path, user="root", use_signature_expiration=120)
    q = parse_qs(urlparse(up).query)
    assert q["username"] == ["root"]
    assert int(q["signature_expiration"][0]) > time.time()
    r = httpx.post(up, files={"file": ("x", b"\x00\x01binary")}, timeout=30)
    assert r.status_code == 200, r.text
    assert shared_sandbox.files.get_info(path).owner == "root"

    down = shared_sandbox.download_url(path, user="root", use_signature_expiration=120)
    r = httpx.get(down, timeout=30)
    assert r.status_code == 200
    assert r.content == b"\x00\x01binary"


def _with_query(url: str, **changes: str) -> str:
    parts = urlparse(url)
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    q.update(changes)
    return urlunparse(parts._replace(query=urlencode(q)))


def test_signed_urls_reject_a_wrong_or_expired_signature(shared_sandbox: Sandbox):
    path = f"/home/user/{unique('guard')}.txt"
    shared_sandbox.files.write(path, "secret")
    down = shared_sandbox.download_url(path)

    # Signed for another path.
    other = _with_query(down, path="/etc/passwd")
    assert httpx.get(other, timeout=30).status_code == 401
    # Tampered signature.
    sig = parse_qs(urlparse(down).query)["signature"][0]
    bad = _with_query(down, signature=sig[:-2] + ("AA" if not sig.endswith("AA") else "BB"))
    assert httpx.get(bad, timeout=30).status_code == 401
    # Expired.
    expired = shared_sandbox.download_url(path, use_signature_expiration=-60)
    try:
        with urllib.request.urlopen(expired, timeout=30):
            raise AssertionError("an expired signature was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 401
    # A download signature does not authorize an upload.
    r = httpx.post(down, files={"file": ("x", b"overwrite")}, timeout=30)
    assert r.status_code == 401
    assert shared_sandbox.files.read(path) == "secret"


# --- watch_dir (sync: CreateWatcher + GetWatcherEvents polling) ---------------


def _collect(handle, seen: list, pred, what: str, timeout: float = 20):
    """Polls get_new_events() into `seen` until pred(pairs) holds."""

    def done():
        seen.extend(handle.get_new_events())
        return pred({(e.name, e.type) for e in seen})

    try:
        wait_until(done, what, timeout=timeout, interval=0.2)
    except AssertionError as e:
        raise AssertionError(f"{e}; events seen: {[(x.name, x.type.name) for x in seen]}") from None


def test_watch_dir_polling(shared_sandbox: Sandbox):
    base = f"/home/user/{unique('watch')}"
    shared_sandbox.files.make_dir(base)
    handle = shared_sandbox.files.watch_dir(base)
    try:
        shared_sandbox.files.write(f"{base}/created.txt", "hello")
        shared_sandbox.files.make_dir(f"{base}/newdir")
        seen: list = []
        _collect(
            handle,
            seen,
            lambda pairs: {("created.txt", FilesystemEventType.CREATE), ("newdir", FilesystemEventType.CREATE)} <= pairs,
            "CREATE events for created.txt and newdir",
        )
        shared_sandbox.commands.run(f"echo more >> {base}/created.txt")
        _collect(handle, seen, lambda pairs: ("created.txt", FilesystemEventType.WRITE) in pairs, "a WRITE event")
        shared_sandbox.commands.run(f"chmod 600 {base}/created.txt")
        _collect(handle, seen, lambda pairs: ("created.txt", FilesystemEventType.CHMOD) in pairs, "a CHMOD event")
        shared_sandbox.files.remove(f"{base}/created.txt")
        _collect(handle, seen, lambda pairs: ("created.txt", FilesystemEventType.REMOVE) in pairs, "a REMOVE event")
        # Names are relative to the watched directory.
        assert all("/" not in e.name for e in seen), seen
        # Once read, events are not returned again.
        assert handle.get_new_events() == []
    finally:
        handle.stop()
    with pytest.raises(SandboxException):
        handle.get_new_events()


def test_watch_dir_sees_an_upload_as_create_and_write_of_that_file(shared_sandbox: Sandbox):
    # Real envd writes uploads in place (open O_CREATE|O_TRUNC, copy): a
    # watcher sees CREATE then WRITE for the file's own name, nothing else.
    base = f"/home/user/{unique('watch-up')}"
    shared_sandbox.files.make_dir(base)
    handle = shared_sandbox.files.watch_dir(base)
    try:
        shared_sandbox.files.write(f"{base}/up.txt", "uploaded")
        seen: list = []
        _collect(
            handle,
            seen,
            lambda pairs: {("up.txt", FilesystemEventType.CREATE), ("up.txt", FilesystemEventType.WRITE)} <= pairs,
            "CREATE and WRITE for up.txt",
            timeout=10,
        )
        # Overwriting is a WRITE of the same file (truncate + write in place).
        after: list = []
        shared_sandbox.files.write(f"{base}/up.txt", "overwritten")
        _collect(handle, after, lambda pairs: ("up.txt", FilesystemEventType.WRITE) in pairs, "WRITE for up.txt", timeout=10)
        time.sleep(0.5)
        after.extend(handle.get_new_events())
        names = {e.name for e in seen + after}
        assert names == {"up.txt"}, [(e.name, e.type.name) for e in seen + after]
    finally:
        handle.stop()


def test_watch_dir_events_are_there_right_after_the_write(shared_sandbox: Sandbox):
    # E2B's envd reads inotify as events come, so a poll right after files.write() returns already has
    # them (E2B's own SDK tests poll once, at once). An upload of a new file is CREATE, CHMOD (envd gives
    # it to the user), WRITE, as there; a file written before its new directory was watched still has its WRITE.
    base = f"/home/user/{unique('watch-now')}"
    shared_sandbox.files.make_dir(base)
    handle = shared_sandbox.files.watch_dir(base, recursive=True)
    try:
        for i in range(5):
            shared_sandbox.files.write(f"{base}/f{i}.txt", "content")
            events = [(e.name, e.type) for e in handle.get_new_events()]
            assert events == [
                (f"f{i}.txt", FilesystemEventType.CREATE),
                (f"f{i}.txt", FilesystemEventType.CHMOD),
                (f"f{i}.txt", FilesystemEventType.WRITE),
            ], events
        shared_sandbox.files.write(f"{base}/f0.txt", "changed")
        assert (f"f0.txt", FilesystemEventType.WRITE) in [(e.name, e.type) for e in handle.get_new_events()]

        shared_sandbox.files.make_dir(f"{base}/nested")
        shared_sandbox.files.write(f"{base}/nested/inner.txt", "content")
        pairs = {(e.name, e.type) for e in handle.get_new_events()}
        assert ("nested", FilesystemEventType.CREATE) in pairs, pairs
        assert ("nested/inner.txt", FilesystemEventType.WRITE) in pairs, pairs
    finally:
        handle.stop()


def test_watch_dir_reports_rename(shared_sandbox: Sandbox):
    # fsnotify semantics: RENAME for the old name, CREATE for the new one.
    base = f"/home/user/{unique('watch-mv')}"
    shared_sandbox.files.make_dir(base)
    shared_sandbox.files.write(f"{base}/old.txt", "x")
    handle = shared_sandbox.files.watch_dir(base)
    try:
        for i in range(5):
            src, dst = (f"old.txt", f"new.txt") if i % 2 == 0 else ("new.txt", "old.txt")
            shared_sandbox.files.rename(f"{base}/{src}", f"{base}/{dst}")
            seen: list = []
            _collect(
                handle,
                seen,
                lambda pairs: {(src, FilesystemEventType.RENAME), (dst, FilesystemEventType.CREATE)} <= pairs,
                f"rename {i}: RENAME {src} and CREATE {dst}",
                timeout=10,
            )
            assert (src, FilesystemEventType.REMOVE) not in {(e.name, e.type) for e in seen}
    finally:
        handle.stop()


def test_watch_dir_reports_every_step_of_a_quick_sequence(shared_sandbox: Sandbox):
    # inotify queues every step, however fast: write, rename away, then remove
    # the new name within a millisecond still give WRITE and RENAME for the
    # old name and CREATE and REMOVE for the new one (real envd: fsnotify).
    base = f"/home/user/{unique('watch-burst')}"
    shared_sandbox.files.make_dir(base)
    shared_sandbox.files.write(f"{base}/f.txt", "x")
    handle = shared_sandbox.files.watch_dir(base)
    try:
        shared_sandbox.commands.run(f"cd {base} && echo more >> f.txt && mv f.txt g.txt && rm g.txt")
        want = {
            ("f.txt", FilesystemEventType.WRITE),
            ("f.txt", FilesystemEventType.RENAME),
            ("g.txt", FilesystemEventType.CREATE),
            ("g.txt", FilesystemEventType.REMOVE),
        }
        seen: list = []
        _collect(handle, seen, lambda pairs: want <= pairs, "WRITE+RENAME f.txt, CREATE+REMOVE g.txt", timeout=10)
    finally:
        handle.stop()


def test_watch_dir_recursive(shared_sandbox: Sandbox):
    base = f"/home/user/{unique('watch-rec')}"
    shared_sandbox.files.make_dir(f"{base}/sub")
    handle = shared_sandbox.files.watch_dir(base, recursive=True)
    try:
        shared_sandbox.files.write(f"{base}/sub/deep.txt", "d")
        seen: list = []

        def got():
            seen.extend(handle.get_new_events())
            return any(e.name == "sub/deep.txt" and e.type == FilesystemEventType.CREATE for e in seen)

        wait_until(got, "a CREATE event for sub/deep.txt", timeout=20, interval=0.2)
    finally:
        handle.stop()


def test_watch_missing_dir_raises(shared_sandbox: Sandbox):
    with pytest.raises(FileNotFoundException):
        shared_sandbox.files.watch_dir("/home/user/not-a-dir-to-watch")
