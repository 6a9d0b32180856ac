"""The kernelspecs this server starts, written to its own directory at start.

Our own names (`locale2b-*`), so nothing installed elsewhere (a user's
`jupyter kernelspec install`, ipykernel's built-in `python3`) is picked up
instead, and each runs with the interpreter this server runs with.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_STARTUP = os.path.join(HERE, "kernel_startup", "python_startup.py")
JS_KERNEL = os.path.join(HERE, "jskernel", "jskernel.py")


def specs(node: str | None) -> dict[str, dict]:
    python = sys.executable
    return {
        "locale2b-python": {
            "argv": [
                python,
                "-m",
                "ipykernel_launcher",
                "-f",
                "{connection_file}",
                f"--IPKernelApp.exec_files={PYTHON_STARTUP}",
                # No history database in the user's home: cells are not kept across restarts anyway.
                "--HistoryManager.enabled=False",
            ],
            "display_name": "Python 3",
            "language": "python",
            "interrupt_mode": "signal",
        },
        "locale2b-javascript": {
            "argv": [python, JS_KERNEL, "-f", "{connection_file}"],
            "display_name": "JavaScript (Node)",
            "language": "javascript",
            "interrupt_mode": "signal",
            **({"env": {"LOCALE2B_NODE": node}} if node else {}),
        },
        "locale2b-bash": {
            "argv": [python, "-m", "bash_kernel", "-f", "{connection_file}"],
            "display_name": "Bash",
            "language": "bash",
            "interrupt_mode": "signal",
        },
    }


def write(directory: str, node: str | None) -> None:
    for name, spec in specs(node).items():
        os.makedirs(os.path.join(directory, name), exist_ok=True)
        with open(os.path.join(directory, name, "kernel.json"), "w") as f:
            json.dump(spec, f, indent=1)
