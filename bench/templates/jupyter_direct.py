"""The baseline of `npm run bench -- templates` part 3: code sent straight to a
local Jupyter kernel with jupyter_client, no server in between.

Starts the python3 kernel of this interpreter's environment (the host venv of
scripts/setup-code-interpreter-venv.sh), over IPC sockets in a private
directory as locale2b_ci does, then reads one JSON string of code per line on
stdin and answers each with one JSON line: {"ms": round trip, "text": the
execute_result's text/plain}. A round trip is what locale2b_ci waits for
before it ends an execution: the kernel's execute_reply and its return to idle.
"""

import json
import shutil
import sys
import tempfile
import time

from jupyter_client.manager import KernelManager


def run(kc, code: str) -> dict:
    t0 = time.perf_counter()
    msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    text = None
    idle = False
    while not idle:
        msg = kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if kind == "execute_result":
            text = msg["content"]["data"].get("text/plain")
        elif kind == "status" and msg["content"]["execution_state"] == "idle":
            idle = True
    while True:
        reply = kc.get_shell_msg(timeout=30)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    return {"ms": (time.perf_counter() - t0) * 1000, "text": text}


def main() -> None:
    runtime = tempfile.mkdtemp(prefix="locale2b-bench-kernel-")
    km = KernelManager(kernel_name="python3", transport="ipc", ip=f"{runtime}/k", connection_file=f"{runtime}/k.json")
    try:
        km.start_kernel(cwd=runtime)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            if line.strip():
                print(json.dumps(run(kc, json.loads(line))), flush=True)
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=True)
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    main()
