"""The real PyPI `e2b-code-interpreter` SDK through a real sandbox, as its README uses it.

`Sandbox.create()` makes a code-interpreter-v1 sandbox on the control plane (its start command runs
locale2b's Code Interpreter server) and run_code goes through the proxy to port 49999. Needs root and the
code-interpreter-v1 image in the image cache (npm test builds it).
"""

import os
import subprocess
from pathlib import Path

import pytest
from e2b_code_interpreter import AsyncSandbox, Sandbox

ROOT = Path(__file__).resolve().parents[2]


def _image_built() -> bool:
    layout = ROOT / "dist" / "control-plane" / "images" / "layout.js"
    r = subprocess.run(
        ["node", "--input-type=module", "-e", f"import {{ findTemplateImage }} from '{layout}'; process.exit(findTemplateImage('code-interpreter-v1') ? 0 : 1)"],
        capture_output=True,
    )
    return r.returncode == 0


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="code-interpreter-v1 sandboxes need the control plane to run as root (sandbox mode)"),
    pytest.mark.skipif(not _image_built(), reason="the code-interpreter-v1 template is not built (locale2b template build code-interpreter-v1)"),
]


def test_readme_example(control_plane):
    with Sandbox.create(timeout=600, envs={"FROM_CREATE": "yes"}) as sbx:
        sbx.run_code("x = 1")
        execution = sbx.run_code("x+=1; x")
        assert execution.text == "2"
        lines = []
        out = sbx.run_code("print('hello'); import os; print(os.environ['FROM_CREATE'])", on_stdout=lambda m: lines.append(m.line))
        # Output arrives as the kernel flushes it: one message or several.
        assert "".join(out.logs.stdout) == "hello\nyes\n" and "".join(lines) == "hello\nyes\n"
        err = sbx.run_code("raise ValueError('bad value')")
        assert err.error.name == "ValueError" and err.error.value == "bad value" and "ValueError" in err.error.traceback
        plot = sbx.run_code("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [1, 2])\nplt.show()")
        assert any(r.png for r in plot.results)
        df = sbx.run_code("import pandas as pd\npd.DataFrame({'n': [1, 2]})")
        assert "<table" in df.results[0].html
        assert sbx.run_code("[1, 2].map(x => x * 21)[1]", language="js").text == "42"


@pytest.mark.asyncio
async def test_async_contexts(control_plane):
    sbx = await AsyncSandbox.create(timeout=600)
    try:
        ctx = await sbx.create_code_context()
        await sbx.run_code("kept = 7", context=ctx)
        assert (await sbx.run_code("kept * 6", context=ctx)).text == "42"
        assert (await sbx.run_code("'kept' in globals()")).text == "False"
    finally:
        await sbx.kill()
