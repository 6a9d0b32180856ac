"""The real PyPI `e2b` SDK against a real locale2b control plane.

One control plane per session: a child process on a free port of 127.0.0.1,
with a temporary data dir and a fresh `e2b_<40 hex>` key. The SDK is pointed at
it exactly as a user would, through the environment only:

    E2B_API_URL = E2B_SANDBOX_URL = http://127.0.0.1:<port>,  E2B_API_KEY = <key>

Needs dist/ (`npm run build`; `npm test` builds before it runs this suite).
Set LOCALE2B_PY_KEEP_LOG=1 to keep the server log (its path is printed).

With LOCALE2B_PY_SERVER_URL (and LOCALE2B_PY_API_KEY, LOCALE2B_PY_DOMAIN: the
sandboxes' `domain`, default `localhost:<port>`) the tests run against that
server instead of one of their own (test/k8s/fleet.test.ts points it at the
fleet's Kubernetes Service). The server is someone else's: nothing is started,
and at the end nothing is killed but what the fixtures made.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "dist" / "control-plane" / "cli" / "main.js"

START_TIMEOUT_S = 60

# Variables that would change where or how the SDK connects.
_SDK_ENV = (
    "E2B_API_URL",
    "E2B_SANDBOX_URL",
    "E2B_VOLUME_API_URL",
    "E2B_API_KEY",
    "E2B_DEBUG",
    "E2B_DOMAIN",
    "E2B_ACCESS_TOKEN",
)


@dataclass
class ControlPlane:
    url: str
    api_key: str
    data_dir: Path | None
    log_path: Path | None
    # What the sandboxes' `domain` is (get_host builds `<port>-<id>.<domain>` from it).
    domain: str

    def api(self, api_key: str | None = None) -> httpx.Client:
        """A plain REST client with the API key (the SDK is not involved)."""
        return httpx.Client(
            base_url=self.url,
            headers={"X-API-KEY": api_key or self.api_key},
            timeout=30,
        )

    def log_tail(self, lines: int = 60) -> str:
        if self.log_path is None:
            return "(the server is not this suite's: no log)"
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_command(port: int, data_dir: Path) -> list[str]:
    return ["node", str(CLI), "serve", "--port", str(port), "--host", "127.0.0.1", "--data-dir", str(data_dir)]


def _kill_all_sandboxes(cp: ControlPlane) -> list[str]:
    """Kills every sandbox the control plane still has, via the REST API."""
    killed: list[str] = []
    with cp.api() as api:
        token = None
        ids: list[str] = []
        for _ in range(100):
            params = {"state": "running,paused", "limit": 100}
            if token:
                params["nextToken"] = token
            r = api.get("/v2/sandboxes", params=params)
            if r.status_code != 200:
                break
            ids += [s["sandboxID"] for s in r.json()]
            token = r.headers.get("x-next-token")
            if not token:
                break
        for sid in ids:
            try:
                if api.delete(f"/sandboxes/{sid}").status_code == 204:
                    killed.append(sid)
            except httpx.HTTPError:
                pass
    return killed


def _destroy_all_volumes(cp: ControlPlane) -> None:
    """Destroys every volume (after the sandboxes: a mounted one is refused), so its loop mount goes before the data dir."""
    with cp.api() as api:
        r = api.get("/volumes")
        if r.status_code != 200:
            return
        for v in r.json():
            api.delete(f"/volumes/{v['volumeID']}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def _sdk_env(url: str, api_key: str) -> Iterator[None]:
    """The SDK pointed at `url` through the environment only, as a user would; restored after."""
    saved = {k: os.environ.get(k) for k in _SDK_ENV}
    for k in _SDK_ENV:
        os.environ.pop(k, None)
    os.environ["E2B_API_URL"] = url
    os.environ["E2B_SANDBOX_URL"] = url
    os.environ["E2B_VOLUME_API_URL"] = url
    os.environ["E2B_API_KEY"] = api_key
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _external_server(url: str) -> ControlPlane:
    key = os.environ.get("LOCALE2B_PY_API_KEY")
    if not key:
        pytest.exit("LOCALE2B_PY_SERVER_URL is set but LOCALE2B_PY_API_KEY is not: give the server's API key", returncode=1)
    try:
        status = httpx.get(f"{url}/health", timeout=10).status_code
    except httpx.HTTPError as e:
        pytest.exit(f"LOCALE2B_PY_SERVER_URL={url}: GET /health failed: {e}", returncode=1)
    if status != 200:
        pytest.exit(f"LOCALE2B_PY_SERVER_URL={url}: GET /health answered {status}", returncode=1)
    domain = os.environ.get("LOCALE2B_PY_DOMAIN") or f"localhost:{httpx.URL(url).port}"
    return ControlPlane(url=url, api_key=key, data_dir=None, log_path=None, domain=domain)


@pytest.fixture(scope="session", autouse=True)
def control_plane() -> Iterator[ControlPlane]:
    external = os.environ.get("LOCALE2B_PY_SERVER_URL")
    if external:
        cp = _external_server(external.rstrip("/"))
        with _sdk_env(cp.url, cp.api_key):
            yield cp
        return
    if not CLI.exists():
        pytest.exit(f"{CLI} is missing: run `npm run build` first", returncode=1)

    tmp = Path(tempfile.mkdtemp(prefix="locale2b-pytest-"))
    data_dir = tmp / "data"
    data_dir.mkdir()
    log_path = tmp / "control-plane.log"
    api_key = "e2b_" + secrets.token_hex(20)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cp = ControlPlane(url=url, api_key=api_key, data_dir=data_dir, log_path=log_path, domain=f"localhost:{port}")

    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env["LOCALE2B_API_KEY"] = api_key
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        _server_command(port, data_dir),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the control plane exited with {proc.returncode} before it was ready:\n{cp.log_tail()}"
                )
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"GET {url}/health did not answer 200 within {START_TIMEOUT_S}s:\n{cp.log_tail()}"
                )
            time.sleep(0.1)

        with _sdk_env(url, api_key):
            try:
                yield cp
            finally:
                try:
                    _kill_all_sandboxes(cp)
                    _destroy_all_volumes(cp)
                except httpx.HTTPError as e:
                    print(f"\nconftest: could not list/kill leftover sandboxes or volumes: {e}", file=sys.stderr)
    finally:
        _stop(proc)
        log.close()
        if os.environ.get("LOCALE2B_PY_KEEP_LOG") == "1":
            print(f"\nconftest: control-plane log kept at {log_path}", file=sys.stderr)
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def pytest_runtest_makereport(item, call):  # pragma: no cover - reporting only
    """On a failure, attach the end of the control-plane log to the report."""
    if call.when == "call" and call.excinfo is not None:
        cp = item.funcargs.get("control_plane")
        if isinstance(cp, ControlPlane):
            item.add_report_section("call", "control-plane log (tail)", cp.log_tail(40))


# --- sandboxes ---------------------------------------------------------------


@pytest.fixture
def sandbox(control_plane):
    """A fresh sandbox for one test, killed afterwards."""
    from e2b import Sandbox

    sbx = Sandbox.create(template="base", timeout=300, metadata={"suite": "python", "fixture": "sandbox"})
    try:
        yield sbx
    finally:
        try:
            sbx.kill()
        except Exception:
            pass


@pytest.fixture(scope="module")
def shared_sandbox(control_plane):
    """One sandbox for a whole module (tests in it must not depend on each other's leftovers)."""
    from e2b import Sandbox

    sbx = Sandbox.create(template="base", timeout=900, metadata={"suite": "python", "fixture": "shared"})
    try:
        yield sbx
    finally:
        try:
            sbx.kill()
        except Exception:
            pass
