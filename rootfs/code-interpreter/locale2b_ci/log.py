"""Structured logs: one JSON object per line on stderr (what envd's pino writes)."""

from __future__ import annotations

import json
import logging
import sys

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None)))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": int(record.created * 1000),
            "level": record.levelname.lower(),
            "name": record.name,
            "msg": record.getMessage(),
        }
        # Fields passed as `extra={...}` go in as they are.
        entry.update({k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")})
        if record.exc_info:
            entry["err"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would be one unstructured line per request.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
