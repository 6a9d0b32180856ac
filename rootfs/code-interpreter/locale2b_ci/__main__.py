"""Runs the Code Interpreter server: `python3 -m locale2b_ci [--port 49999] ...`.

In a `code-interpreter-v1` sandbox it runs as `user` on 0.0.0.0:49999 (see
start-server.sh); the sandbox's network is reached only through locale2b's
proxy (docs/code-interpreter.md, Security).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import tempfile

from aiohttp import web

from . import app, kernelspecs, languages, log
from .contexts import Contexts

logger = logging.getLogger("server")

# Started with the server, so the first runCode of each finds its kernel up.
PREWARMED = ("python", "javascript")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m locale2b_ci", description="locale2b's Code Interpreter server")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument(
        "--port",
        type=int,
        default=49999,
        help="port to listen on (default 49999, where the SDKs look; 0: any free port, logged)",
    )
    home = os.path.expanduser("~")
    p.add_argument("--cwd", default=home, help=f"working directory of contexts that name none (default {home})")
    p.add_argument(
        "--node",
        default=os.environ.get("LOCALE2B_NODE") or shutil.which("node"),
        help="the node binary of the JavaScript kernel",
    )
    p.add_argument("--log-level", default=os.environ.get("LOCALE2B_CI_LOG_LEVEL", "info"))
    return p.parse_args(argv)


async def prewarm(contexts: Contexts, ready: asyncio.Event) -> None:
    async def start(name: str) -> None:
        try:
            await contexts.default(languages.find(name))
        except Exception as err:
            # The others still work; a request for this language tries again.
            logger.error("default context did not start", extra={"language": name, "err": str(err)})

    await asyncio.gather(*(start(name) for name in PREWARMED))
    ready.set()
    logger.info("ready", extra={"contexts": len(contexts.list())})


async def serve(args: argparse.Namespace) -> None:
    # Connection files and IPC sockets: private to this user (mkdtemp makes it 0700).
    runtime_dir = tempfile.mkdtemp(prefix="locale2b-ci-")
    specs_dir = os.path.join(runtime_dir, "kernels")
    kernelspecs.write(specs_dir, args.node)
    contexts = Contexts(specs_dir, runtime_dir, os.path.abspath(args.cwd))
    ready = asyncio.Event()
    # handler_cancellation: a client that goes away cancels its handler, which interrupts its execution.
    runner = web.AppRunner(
        app.build(contexts, ready),
        handler_cancellation=True,
        access_log=None,
        # At exit, how long requests still in flight may take (aiohttp's default: 60 s).
        shutdown_timeout=5.0,
    )
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await web.TCPSite(runner, args.host, args.port).start()
        port = runner.addresses[0][1]
        logger.info(
            "listening", extra={"host": args.host, "port": port, "cwd": contexts.default_cwd, "runtimeDir": runtime_dir}
        )
        warm = asyncio.create_task(prewarm(contexts, ready))
        await stop.wait()
        warm.cancel()
        logger.info("stopping")
    finally:
        # Kernels first: that ends running executions (with an error line), so
        # their streaming responses finish and the HTTP shutdown need not wait.
        await contexts.close()
        await runner.cleanup()
        shutil.rmtree(runtime_dir, ignore_errors=True)


def main() -> None:
    args = parse_args()
    log.setup(args.log_level)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
