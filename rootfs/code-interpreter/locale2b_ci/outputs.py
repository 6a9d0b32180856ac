"""Jupyter messages -> the JSON lines of POST /execute's body.

What the SDKs' parsers read (`parseOutput` in @e2b/code-interpreter,
`_parse_output` in e2b-code-interpreter), one JSON object per line:

  {"type": "stdout", "text": "...", "timestamp": <ns>}     -> logs.stdout (onStdout)
  {"type": "stderr", "text": "...", "timestamp": <ns>}     -> logs.stderr (onStderr)
  {"type": "result", "is_main_result": true|false,
   "text", "html", "markdown", "svg", "png", "jpeg", "pdf",
   "latex", "json", "javascript", "chart", "extra"}       -> results[] (onResult)
  {"type": "error", "name", "value", "traceback"}           -> error (onError)
  {"type": "number_of_executions", "execution_count": N}    -> executionCount

Both SDKs skip types they do not know; the body ends with
{"type": "end_of_execution"} so a raw client can tell a finished execution
from a cut connection. A result carries only the formats the kernel gave.
MIME types without a field of their own go under `extra` (what the Python
SDK's Result reads) and also at the top level, by their MIME type (what the
JS SDK's Result gathers into its `extra`: it skips a key named `extra`).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

CHART_MIME = "application/vnd.locale2b.chart+json"  # kernel_startup/python_startup.py

# MIME type -> result field, as the SDKs' Result classes name them.
RESULT_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "text/javascript": "javascript",
    CHART_MIME: "chart",
}


def stream(name: str, text: str) -> dict:
    return {"type": "stderr" if name == "stderr" else "stdout", "text": text, "timestamp": time.time_ns()}


def result(data: dict, is_main: bool) -> dict:
    line: dict[str, Any] = {"type": "result", "is_main_result": is_main}
    extra = {}
    for mime, value in data.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = "".join(value)  # nbformat's multi-line strings
        field = RESULT_FIELDS.get(mime)
        if field and field not in line:
            line[field] = value
        elif not field:
            extra[mime] = value
    if extra:
        line["extra"] = extra
        line.update(extra)
    return line


def error(name: str, value: str, traceback: list[str] | str) -> dict:
    # bash_kernel names no error (ename ''), only the exit code as its value.
    name = name or "Error"
    if isinstance(traceback, list):
        traceback = "\n".join(traceback)
    return {"type": "error", "name": name, "value": value, "traceback": traceback}


def execution_count(count: int) -> dict:
    return {"type": "number_of_executions", "execution_count": count}


END = {"type": "end_of_execution"}


def dumps(line: dict) -> bytes:
    """One line of strict JSON: the JS SDK's JSON.parse refuses NaN and Infinity."""
    try:
        text = json.dumps(line, allow_nan=False, separators=(",", ":"))
    except ValueError:
        text = json.dumps(_finite(line), allow_nan=False, separators=(",", ":"))
    return text.encode() + b"\n"


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v
