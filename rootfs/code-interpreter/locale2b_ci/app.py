"""The HTTP routes, as the Code Interpreter SDKs call them (thin: the work is in contexts.py and execution.py).

  GET    /health                  200 {"status": "ok"} once the default contexts run (503 before)
  POST   /execute                 {code, context_id?, language?, env_vars?} -> 200, JSON lines (outputs.py)
  POST   /contexts                {language?, cwd?} -> 200 {id, language, cwd}
  GET    /contexts                -> 200 [{id, language, cwd}, ...]
  DELETE /contexts/{id}           -> 204
  POST   /contexts/{id}/restart   -> 200 {id, language, cwd}

Errors are plain text with the status: 400 (a bad body), 404 (no such
context, or a language this sandbox has no kernel for), 500 (a kernel that
did not start).
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from . import languages, outputs
from .contexts import Contexts
from .errors import HttpError
from .execution import Execution

log = logging.getLogger("http")

CONTEXTS = web.AppKey("contexts", Contexts)
READY = web.AppKey("ready", asyncio.Event)

# The largest request body (the code of one execution): aiohttp answers 413 past it.
MAX_BODY = 16 * 1024 * 1024


def build(contexts: Contexts, ready: asyncio.Event) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_errors])
    app[CONTEXTS] = contexts
    app[READY] = ready
    app.router.add_get("/health", health)
    app.router.add_post("/execute", execute)
    app.router.add_post("/contexts", create_context)
    app.router.add_get("/contexts", list_contexts)
    app.router.add_delete("/contexts/{id}", remove_context)
    app.router.add_post("/contexts/{id}/restart", restart_context)
    return app


@web.middleware
async def _errors(request: web.Request, handler):
    try:
        return await handler(request)
    except HttpError as err:
        if err.status >= 500:
            log.error("request failed", extra={"path": request.path, "status": err.status, "err": err.message})
        return web.Response(status=err.status, text=err.message + "\n")


async def _json_object(request: web.Request) -> dict:
    """The request's body as a JSON object; an empty body is {}."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise HttpError(400, f"the body is not valid JSON: {err}") from err
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a JSON object")
    return body


async def health(request: web.Request) -> web.Response:
    if not request.app[READY].is_set():
        return web.json_response({"status": "starting"}, status=503)
    return web.json_response({"status": "ok"})


async def execute(request: web.Request) -> web.StreamResponse:
    body = await _json_object(request)
    code = body.get("code")
    if not isinstance(code, str):
        raise HttpError(400, "code is required: the code to run, as a string")
    envs = languages.check_envs(body.get("env_vars"))
    ctx = await request.app[CONTEXTS].for_execute(body.get("context_id"), body.get("language"))

    execution = Execution(ctx, code, envs)
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson", "Cache-Control": "no-store"})
    try:
        # Headers go out now, before the execution's turn comes: the SDKs time the
        # request until they arrive (requestTimeoutMs), then the body (timeoutMs).
        await resp.prepare(request)
        while (line := await execution.lines.get()) is not None:
            await resp.write(outputs.dumps(line))
        await resp.write_eof()
    except (asyncio.CancelledError, ConnectionError) as err:
        # The client went away (aiohttp cancels the handler, or the write fails).
        execution.abandon()
        if isinstance(err, asyncio.CancelledError):
            raise
    return resp


async def create_context(request: web.Request) -> web.Response:
    body = await _json_object(request)
    language = body.get("language")
    if language is not None and not isinstance(language, str):
        raise HttpError(400, "language must be a string")
    ctx = await request.app[CONTEXTS].create(languages.find(language), body.get("cwd"))
    return web.json_response(ctx.to_json())


async def list_contexts(request: web.Request) -> web.Response:
    return web.json_response([ctx.to_json() for ctx in request.app[CONTEXTS].list()])


async def remove_context(request: web.Request) -> web.Response:
    await request.app[CONTEXTS].remove(request.match_info["id"])
    return web.Response(status=204)


async def restart_context(request: web.Request) -> web.Response:
    ctx = await request.app[CONTEXTS].restart(request.match_info["id"])
    return web.json_response(ctx.to_json())
