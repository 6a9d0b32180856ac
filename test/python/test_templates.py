"""E2B's Template SDK with the real Python SDK (sync and async): builds in real sandboxes (needs root)."""

import os
from pathlib import Path

import pytest
from e2b import AsyncSandbox, AsyncTemplate, Sandbox, Template, wait_for_port

from helpers import unique

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="template builds need the control plane to run as root (sandbox mode)")


def _context(tmp_path: Path) -> Path:
    (tmp_path / "app" / "pkg").mkdir(parents=True)
    (tmp_path / "app" / "main.py").write_text("print('hello from python')\n")
    (tmp_path / "app" / "pkg" / "mod.py").write_text("X = 42\n")
    (tmp_path / "requirements.txt").write_text("\n")
    return tmp_path


def test_build_with_every_step_then_create(control_plane, tmp_path):
    ctx = _context(tmp_path)
    name = unique("py-tpl")
    logs = []
    template = (
        Template(file_context_path=str(ctx))
        .from_template("base")
        # The step cache is the host's: a value of this run's own before the COPY, so its step runs (not CACHED).
        .set_envs({"APP_ENV": "test", "APP_PATH": "$APP_ENV/path", "BUILD_RUN": name})
        .set_workdir("/home/user/svc")
        .copy("app/", "app/")
        .copy("requirements.txt", "/home/user/svc/requirements.txt")
        .run_cmd("python3 app/main.py > /home/user/svc/ran.txt && echo $APP_ENV >> /home/user/svc/ran.txt")
        .run_cmd("echo root-step > /etc/py-template-marker", user="root")
        .skip_cache()
        .run_cmd("date +%s%N > /home/user/svc/built-at")
    )
    info = Template.build(template, name, on_build_logs=lambda entry: logs.append(entry.message))
    assert info.template_id and info.build_id
    assert any(m.startswith("COPY app/ app/") for m in logs)
    sbx = Sandbox.create(template=name, timeout=600)
    try:
        out = sbx.commands.run("pwd; whoami; cat ran.txt /etc/py-template-marker; echo $APP_PATH; python3 -c 'import sys; sys.path.insert(0, \"app\"); import pkg.mod as m; print(m.X)'").stdout
        assert out == "/home/user/svc\nuser\nhello from python\ntest\nroot-step\ntest/path\n42\n"
        assert sbx.files.read("/home/user/svc/app/main.py") == "print('hello from python')\n"
    finally:
        sbx.kill()
    assert Template.exists(name) is True
    assert Template.exists(unique("py-absent")) is False


def test_failed_build_raises_with_the_output(control_plane):
    template = Template().from_template("base").run_cmd("echo python-side-failure >&2; exit 7")
    with pytest.raises(Exception) as err:
        Template.build(template, unique("py-fail"))
    assert "exited with 7" in str(err.value)
    assert "python-side-failure" in str(err.value)


def test_build_in_background_and_status(control_plane):
    name = unique("py-bg")
    info = Template.build_in_background(Template().from_template("base").run_cmd("echo bg > /tmp/bg"), name)
    import time

    for _ in range(600):
        status = Template.get_build_status(info)
        if status.status.value in ("ready", "error"):
            break
        time.sleep(0.3)
    assert status.status.value == "ready", status
    sbx = Sandbox.create(template=name, timeout=600)
    try:
        assert sbx.commands.run("cat /tmp/bg").stdout == "bg\n"
    finally:
        sbx.kill()


@pytest.mark.asyncio
async def test_async_build_with_a_start_command(control_plane):
    name = unique("py-async")
    template = (
        AsyncTemplate()
        .from_template("base")
        .run_cmd("mkdir -p /home/user/site && echo async-served > /home/user/site/index.html")
        .set_start_cmd("cd /home/user/site && python3 -m http.server 8081", wait_for_port(8081))
    )
    await AsyncTemplate.build(template, name)
    sbx = await AsyncSandbox.create(template=name, timeout=600)
    try:
        # The start command's server answers as soon as the create returned.
        out = await sbx.commands.run("curl -s http://127.0.0.1:8081/")
        assert out.stdout == "async-served\n"
    finally:
        await sbx.kill()
