"""Sandbox lifecycle through the control plane: create, get_info, list, set_timeout, pause/connect, kill, auth, isolation."""

import os
import sys
import socket
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from e2b import (
    AuthenticationException,
    CommandExitException,
    Sandbox,
    SandboxInfo,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
)
from e2b.connection_config import ConnectionConfig

from helpers import unique, wait_until


def _close(a: datetime, b: datetime, seconds: float = 15) -> bool:
    """Two server-side times set together (started_at and end_at): no client clock involved."""
    return abs((a - b).total_seconds()) <= seconds


def _between(at: datetime, before: datetime, after: datetime, offset: timedelta = timedelta(0)) -> bool:
    """`at` lies between clock reads taken around the call that set it: true however slow the machine (1 s for rounding)."""
    return before + offset - timedelta(seconds=1) <= at <= after + offset


def test_create_with_metadata_envs_and_timeout(control_plane):
    tag = unique("create")
    before = datetime.now(timezone.utc)
    sbx = Sandbox.create(
        template="base",
        metadata={"suite": "python", "tag": tag},
        envs={"GREETING": "hi there", "EMPTY": ""},
        timeout=123,
    )
    after = datetime.now(timezone.utc)
    try:
        assert sbx.sandbox_id and sbx.sandbox_id.isalnum() and sbx.sandbox_id == sbx.sandbox_id.lower()
        assert sbx.is_running() is True
        assert sbx.commands.run('echo "$GREETING|${EMPTY-unset}|"').stdout == "hi there||\n"

        info = sbx.get_info()
        assert isinstance(info, SandboxInfo)
        assert info.sandbox_id == sbx.sandbox_id
        assert info.template_id  # an id for the "base" template
        assert info.metadata == {"suite": "python", "tag": tag}
        assert info.state == SandboxState.RUNNING
        assert info.started_at.tzinfo is not None and info.end_at.tzinfo is not None
        assert _between(info.started_at, before, after)
        assert _close(info.end_at, info.started_at + timedelta(seconds=123))
        assert info.cpu_count >= 1
        assert info.memory_mb >= 1
        assert info.envd_version
    finally:
        assert sbx.kill() is True


def test_create_defaults(control_plane):
    sbx = Sandbox.create()  # template "base", timeout 300 s
    try:
        info = Sandbox.get_info(sbx.sandbox_id)
        assert info.metadata == {}
        assert _close(info.end_at, info.started_at + timedelta(seconds=300))
    finally:
        sbx.kill()


def test_create_with_unknown_template_fails(control_plane):
    from e2b import SandboxException

    with pytest.raises(SandboxException):
        Sandbox.create(template="no-such-template-xyz")


def test_context_manager_kills(control_plane):
    with Sandbox.create() as sbx:
        sid = sbx.sandbox_id
        assert sbx.commands.run("true").exit_code == 0
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sid)


def test_list_filters_by_metadata_and_state(control_plane):
    tag = unique("list")
    a = Sandbox.create(metadata={"tag": tag, "k y": "v&1=2", "role": "a"})
    b = Sandbox.create(metadata={"tag": tag, "role": "b"})
    other = Sandbox.create(metadata={"tag": unique("other")})
    try:
        def ids(query: SandboxQuery) -> set[str]:
            found: set[str] = set()
            pager = Sandbox.list(query=query)
            while pager.has_next:
                found |= {s.sandbox_id for s in pager.next_items()}
            return found

        assert ids(SandboxQuery(metadata={"tag": tag})) == {a.sandbox_id, b.sandbox_id}
        assert ids(SandboxQuery(metadata={"tag": tag, "role": "b"})) == {b.sandbox_id}
        # Keys and values with spaces, & and = survive the double encoding.
        assert ids(SandboxQuery(metadata={"k y": "v&1=2"})) == {a.sandbox_id}
        assert ids(SandboxQuery(metadata={"tag": tag}, state=[SandboxState.RUNNING])) == {a.sandbox_id, b.sandbox_id}
        assert ids(SandboxQuery(metadata={"tag": tag}, state=[SandboxState.PAUSED])) == set()

        listed = Sandbox.list(query=SandboxQuery(metadata={"role": "a", "tag": tag})).next_items()
        assert len(listed) == 1
        s = listed[0]
        assert s.sandbox_id == a.sandbox_id
        assert s.metadata == {"tag": tag, "k y": "v&1=2", "role": "a"}
        assert s.state == SandboxState.RUNNING
        assert s.template_id and s.started_at and s.end_at and s.envd_version

        # Unfiltered: every sandbox of ours is there (paging through).
        assert {a.sandbox_id, b.sandbox_id, other.sandbox_id} <= ids(SandboxQuery())
    finally:
        for s in (a, b, other):
            s.kill()


def test_list_pagination(control_plane):
    tag = unique("page")
    boxes = [Sandbox.create(metadata={"tag": tag}) for _ in range(3)]
    try:
        pager = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=2)
        first = pager.next_items()
        assert len(first) == 2
        assert pager.has_next and pager.next_token
        second = pager.next_items()
        assert len(second) == 1
        assert not pager.has_next
        assert {s.sandbox_id for s in first + second} == {b.sandbox_id for b in boxes}
    finally:
        for b in boxes:
            b.kill()


def test_set_timeout_extends_and_shortens(sandbox: Sandbox):
    before = datetime.now(timezone.utc)
    sandbox.set_timeout(1200)
    assert _between(sandbox.get_info().end_at, before, datetime.now(timezone.utc), timedelta(seconds=1200))
    before = datetime.now(timezone.utc)
    Sandbox.set_timeout(sandbox.sandbox_id, 90)
    assert _between(sandbox.get_info().end_at, before, datetime.now(timezone.utc), timedelta(seconds=90))


def test_set_timeout_zero_runs_the_timeout_action_now(control_plane):
    # POST /timeout takes 0 (the spec's minimum): the sandbox's end is now.
    paused = Sandbox.create(timeout=600, lifecycle={"on_timeout": {"action": "pause"}})
    killed = Sandbox.create(timeout=600)
    try:
        paused.files.write("/home/user/kept.txt", "kept")
        paused.set_timeout(0)
        Sandbox.set_timeout(killed.sandbox_id, 0)
        wait_until(lambda: not paused.is_running(), "the sandbox to pause on its timeout", timeout=30, interval=0.2)
        assert Sandbox.get_info(paused.sandbox_id).state.value == "paused"

        def gone():
            try:
                Sandbox.get_info(killed.sandbox_id)
                return False
            except SandboxNotFoundException:
                return True

        wait_until(gone, "the sandbox to be killed on its timeout", timeout=30, interval=0.2)
        resumed = paused.connect()
        assert resumed.files.read("/home/user/kept.txt") == "kept"
        # A negative timeout is still refused.
        with pytest.raises(Exception, match="timeout"):
            resumed.set_timeout(-1)
    finally:
        paused.kill()
        killed.kill()


def test_timeout_kills_the_sandbox(control_plane):
    sbx = Sandbox.create(timeout=2)
    sid = sbx.sandbox_id

    def gone():
        try:
            Sandbox.get_info(sid)
            return False
        except SandboxNotFoundException:
            return True

    wait_until(gone, "the sandbox to be killed by its timeout", timeout=30, interval=0.5)
    assert sbx.is_running() is False


def test_get_info_of_unknown_sandbox(control_plane):
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info("doesnotexist0000000000")


def test_kill(control_plane):
    sbx = Sandbox.create()
    sid = sbx.sandbox_id
    assert sbx.kill() is True
    assert sbx.is_running() is False
    assert Sandbox.kill(sid) is False  # already gone: 404 → False
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sid)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sid)
    assert sid not in {s.sandbox_id for s in Sandbox.list().next_items()}


def test_connect_to_running_sandbox(sandbox: Sandbox):
    sandbox.files.write("/home/user/from-first.txt", "first handle")
    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.sandbox_id == sandbox.sandbox_id
    assert again.files.read("/home/user/from-first.txt") == "first handle"
    assert again.commands.run("echo via-connect").stdout == "via-connect\n"


def test_pause_and_connect_resumes_with_files_and_processes(sandbox: Sandbox):
    sid = sandbox.sandbox_id
    sandbox.files.write("/home/user/before-pause.txt", "kept across pause")
    sleeper = sandbox.commands.run("sleep 600", background=True, timeout=0)
    counter = sandbox.commands.run(
        "i=0; while true; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.2; done", background=True, timeout=0
    )
    sleeper.disconnect()
    counter.disconnect()
    wait_until(lambda: sandbox.files.exists("/tmp/counter"), "the counter to start")

    assert sandbox.pause() is True
    info = Sandbox.get_info(sid)
    assert info.state == SandboxState.PAUSED
    paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
    assert sid in {s.sandbox_id for s in paused}
    assert Sandbox.pause(sid) is False  # already paused: 409 → False

    resumed = Sandbox.connect(sid)
    assert resumed.sandbox_id == sid
    assert Sandbox.get_info(sid).state == SandboxState.RUNNING
    assert resumed.files.read("/home/user/before-pause.txt") == "kept across pause"
    procs = resumed.commands.list()
    pids = {p.pid for p in procs}
    assert sleeper.pid in pids, procs
    assert counter.pid in pids, procs
    assert any(p.args == ["-l", "-c", "sleep 600"] for p in procs)
    # The loop still runs after the resume.
    n = int(resumed.files.read("/tmp/counter").strip())
    wait_until(lambda: int(resumed.files.read("/tmp/counter").strip() or 0) > n, "the counter to advance", timeout=10)
    assert resumed.commands.kill(sleeper.pid) is True
    assert resumed.commands.kill(counter.pid) is True


def test_paused_sandbox_can_be_killed(control_plane):
    sbx = Sandbox.create()
    sid = sbx.sandbox_id
    sbx.pause()
    assert Sandbox.kill(sid) is True
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sid)


def test_wrong_api_key_is_rejected(control_plane):
    wrong = "e2b_" + "0" * 40
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key=wrong)
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key=wrong).next_items()
    with pytest.raises(AuthenticationException):
        Sandbox.get_info("whatever", api_key=wrong)
    # And on the wire: 401 with a JSON error whose code is 401.
    with control_plane.api(api_key=wrong) as api:
        r = api.get("/v2/sandboxes")
        assert r.status_code == 401
        assert r.json()["code"] == 401
        assert r.json()["message"]
    r = httpx.get(f"{control_plane.url}/v2/sandboxes", timeout=10)  # no key at all
    assert r.status_code == 401


def test_wrong_envd_access_token_is_rejected(sandbox: Sandbox, control_plane):
    sid = sandbox.sandbox_id
    # An SDK object for the same sandbox whose envd access token is wrong.
    bad = Sandbox(
        sandbox_id=sid,
        sandbox_domain=None,
        envd_version=sandbox._envd_version,
        envd_access_token="wrong-token",
        connection_config=ConnectionConfig(
            extra_sandbox_headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": "wrong-token"}
        ),
    )
    with pytest.raises(AuthenticationException):
        bad.commands.run("echo should-not-run")
    with pytest.raises(AuthenticationException):
        bad.files.read("/etc/hostname")
    with pytest.raises(AuthenticationException):
        bad.files.write("/home/user/nope.txt", "x")
    with pytest.raises(AuthenticationException):
        bad.files.list("/home/user")
    assert not sandbox.files.exists("/home/user/nope.txt")

    # The same with plain HTTP: Connect RPC and /files with a wrong token → 401.
    token = sandbox._envd_access_token
    assert token, "create must return an envdAccessToken"
    rpc = f"{control_plane.url}/process.Process/List"
    base = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "Connect-Protocol-Version": "1"}
    ok = httpx.post(rpc, json={}, headers={**base, "X-Access-Token": token}, timeout=10)
    assert ok.status_code == 200, ok.text
    assert "processes" in ok.json() or ok.json() == {}
    for headers in ({**base, "X-Access-Token": "wrong"}, base):
        r = httpx.post(rpc, json={}, headers=headers, timeout=10)
        assert r.status_code == 401, (headers, r.status_code, r.text)
        r = httpx.get(f"{control_plane.url}/files", params={"path": "/etc/hostname"}, headers=headers, timeout=10)
        assert r.status_code == 401, (headers, r.status_code, r.text)
    # /health needs no token.
    r = httpx.get(f"{control_plane.url}/health", headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983"}, timeout=10)
    assert r.status_code == 204


def test_another_sandboxs_token_does_not_work(control_plane):
    a = Sandbox.create()
    b = Sandbox.create()
    try:
        r = httpx.post(
            f"{control_plane.url}/process.Process/List",
            json={},
            headers={
                "E2b-Sandbox-Id": a.sandbox_id,
                "E2b-Sandbox-Port": "49983",
                "Connect-Protocol-Version": "1",
                "X-Access-Token": b._envd_access_token,
            },
            timeout=10,
        )
        assert r.status_code == 401
    finally:
        a.kill()
        b.kill()


def test_eight_sandboxes_in_parallel_are_isolated(control_plane):
    n = 8
    tag = unique("par")

    def create(i: int) -> Sandbox:
        sbx = Sandbox.create(metadata={"tag": tag, "i": str(i)}, timeout=300)
        sbx.files.write(f"/home/user/mine-{i}.txt", f"sandbox {i}")
        sbx.commands.run(f"echo {i} > /tmp/mine-{i}.txt")
        return sbx

    with ThreadPoolExecutor(max_workers=n) as pool:
        boxes = list(pool.map(create, range(n)))
    try:
        assert len({b.sandbox_id for b in boxes}) == n

        def check(i: int):
            sbx = boxes[i]
            home = sbx.commands.run("ls /home/user").stdout.split()
            tmp = sbx.commands.run("ls /tmp").stdout.split()
            assert [f for f in home if f.startswith("mine-")] == [f"mine-{i}.txt"], home
            assert [f for f in tmp if f.startswith("mine-")] == [f"mine-{i}.txt"], tmp
            assert [e.name for e in sbx.files.list("/home/user") if e.name.startswith("mine-")] == [f"mine-{i}.txt"]
            assert sbx.files.read(f"/home/user/mine-{i}.txt") == f"sandbox {i}"
            for j in range(n):
                if j != i:
                    assert not sbx.files.exists(f"/home/user/mine-{j}.txt")
                    with pytest.raises(CommandExitException):
                        sbx.commands.run(f"cat /tmp/mine-{j}.txt")
            return True

        with ThreadPoolExecutor(max_workers=n) as pool:
            assert all(pool.map(check, range(n)))

        listed = Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
        assert {s.sandbox_id for s in listed} == {b.sandbox_id for b in boxes}
    finally:
        with ThreadPoolExecutor(max_workers=n) as pool:
            assert all(pool.map(lambda b: b.kill(), boxes))


def test_processes_of_one_sandbox_are_invisible_to_another(control_plane):
    a = Sandbox.create()
    b = Sandbox.create()
    try:
        h = a.commands.run("sleep 600", background=True)
        assert all(p.pid != h.pid or p.args != ["-l", "-c", "sleep 600"] for p in b.commands.list())
        out = b.commands.run("ps -eo args 2>/dev/null || ls /proc").stdout
        assert "sleep 600" not in out
        h.kill()
    finally:
        a.kill()
        b.kill()


def test_metrics(sandbox: Sandbox):
    sandbox.commands.run("true")

    def have():
        return sandbox.get_metrics()

    metrics = wait_until(have, "at least one metrics sample", timeout=30, interval=1)
    m = metrics[-1]
    assert m.cpu_count >= 1
    assert m.mem_total > 0
    assert m.disk_total > 0
    assert isinstance(m.timestamp, datetime)


def test_envd_version_is_usable(sandbox: Sandbox):
    from packaging.version import Version

    v = sandbox._envd_version
    assert isinstance(v, Version)
    assert v >= Version("0.4.0"), "below 0.4.0 the SDK sends user 'user' explicitly"


def test_get_host_reaches_a_server_in_the_sandbox(sandbox: Sandbox, control_plane):
    # A free port: on the process runtime the sandbox shares the host's network.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sandbox.files.write("/home/user/site/index.html", "served from the sandbox")
    server = sandbox.commands.run(
        f"python3 -m http.server {port} --bind 127.0.0.1 --directory /home/user/site", background=True, timeout=0
    )
    host = sandbox.get_host(port)
    assert host == f"{port}-{sandbox.sandbox_id}.{control_plane.domain}"

    def fetch():
        # The Host header routes it, as a wildcard DNS name would in a browser.
        r = httpx.get(f"{control_plane.url}/index.html", headers={"Host": host}, timeout=10)
        return r if r.status_code == 200 else None

    r = wait_until(fetch, f"the sandbox's server on port {port}")
    assert r.text == "served from the sandbox"
    server.kill()
    wait_until(
        lambda: httpx.get(f"{control_plane.url}/", headers={"Host": host}, timeout=10).status_code == 502,
        "502 once the server is gone",
    )


def _uplink_address():
    """The host's first non-loopback IPv4 address (a destination that needs no internet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing address
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith(("127.", "10.201.")) else addr


def test_egress_policy_and_update_network(control_plane):
    """A destination a sandbox may reach: a test host in a network namespace of our own
    (sandboxes never reach the host itself), as test/helpers/peer-host.ts makes one."""
    import secrets
    import shutil
    import subprocess
    import time

    nft_ok = shutil.which("nft") is not None and subprocess.run(["nft", "--version"], capture_output=True).returncode == 0
    if os.geteuid() != 0 or not nft_ok or shutil.which("ip") is None:
        pytest.skip("egress policies need root, nftables and iproute2 (scripts/setup-host)")
    tag = secrets.token_hex(3)
    ns, dev = f"l2btest-{tag}", f"lbt{tag}"
    base = (int(tag[:4], 16) % 8000) * 8
    addr = lambda n: f"198.18.{base >> 8}.{(base & 255) + n}"  # RFC 2544's range: not private space, which no sandbox reaches
    ip = lambda *a: subprocess.run(["ip", *a], check=True, capture_output=True)
    ip("netns", "add", ns)
    server = None
    try:
        ip("link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("addr", "add", f"{addr(1)}/29", "dev", dev)
        ip("link", "set", dev, "up")
        ip("-n", ns, "addr", "add", f"{addr(2)}/29", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "route", "add", "default", "via", addr(1))
        www = f"/tmp/{ns}"
        os.makedirs(www, exist_ok=True)
        with open(f"{www}/index.html", "w") as f:
            f.write("host-ok")
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "http.server", "8080", "--directory", www],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        host, port = addr(2), 8080
        for _ in range(100):
            if subprocess.run(["curl", "-s", "-m", "2", f"http://{host}:{port}/"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        sbx = Sandbox.create(template="base", network={"deny_out": [f"{host}/32"]})
        try:
            reach = f'curl -s -m 10 http://{host}:{port}/ || echo "refused (exit $?)"'
            assert sbx.commands.run(reach).stdout.strip() == "refused (exit 7)"
            sbx.update_network({"allow_out": [host], "deny_out": ["0.0.0.0/0"]})
            assert sbx.commands.run(reach).stdout.strip() == "host-ok"
            assert sbx.get_info().network is not None
        finally:
            sbx.kill()
        # Names and leading wildcards are checked per connection (the egress proxy); a bare '*' and names
        # in deny rules are refused, as E2B's API says.
        with pytest.raises(Exception, match="a bare '\\*' is not allowed"):
            Sandbox.create(template="base", network={"allow_out": ["*"], "deny_out": ["0.0.0.0/0"]})
        with pytest.raises(Exception, match="domain names are not supported in deny rules"):
            Sandbox.create(template="base", network={"deny_out": ["example.com"]})
    finally:
        if server:
            server.kill()
        subprocess.run(["ip", "link", "del", dev], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(f"/tmp/{ns}", ignore_errors=True)


def test_network_rules_shape(control_plane):
    """network.rules as the Python SDK sends them: kept and read back by get_info, replaced by
    update_network, malformed ones refused with a 400 that says what is wrong. (What the egress proxy
    does with them is tested through the JS SDK: test/control-plane/egress-rules.test.ts.)"""
    import shutil
    import subprocess

    from e2b import Secret

    nft_ok = shutil.which("nft") is not None and subprocess.run(["nft", "--version"], capture_output=True).returncode == 0
    if os.geteuid() != 0 or not nft_ok:
        pytest.skip("network rules need a network of the sandbox's own: root and nftables (scripts/setup-host)")
    rules = {"api.example.com": [{"transform": {"headers": {"Authorization": f"Bearer {Secret.fill('py-rules-key')}"}}}]}
    sbx = Sandbox.create(template="base", network={"rules": rules})
    try:
        got = sbx.get_info().network
        got_rules = got.rules if hasattr(got, "rules") else got["rules"]
        as_dicts = {h: [r if isinstance(r, dict) else r.to_dict() for r in rs] for h, rs in got_rules.items()}
        assert as_dicts == rules
        env = sbx.commands.run("echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $GIT_SSL_CAINFO").stdout.split()
        assert env == ["/etc/ssl/certs/ca-certificates.crt"] * 4
        assert "locale2b egress CA" in sbx.commands.run("grep 'locale2b egress CA' /etc/ssl/certs/ca-certificates.crt").stdout
        sbx.update_network({"rules": {"*.example.org": [{"transform": {"headers": {"X-Team": "py"}}}]}})
        got_rules = sbx.get_info().network
        got_rules = got_rules.rules if hasattr(got_rules, "rules") else got_rules["rules"]
        assert list(got_rules.keys()) == ["*.example.org"]
    finally:
        sbx.kill()
    with pytest.raises(Exception, match="a bare '\\*' is not allowed"):
        Sandbox.create(template="base", network={"rules": {"*": []}})
    with pytest.raises(Exception, match="does not let a rule set 'Host'"):
        Sandbox.create(template="base", network={"rules": {"a.example.com": [{"transform": {"headers": {"Host": "x"}}}]}})
