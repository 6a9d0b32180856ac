"""One Jupyter kernel of one context: start, run code, interrupt, restart.

jupyter_client's AsyncKernelManager starts the kernel (IPC sockets in the
server's private runtime directory, not TCP ports) and an AsyncKernelClient
talks to it. Two reader tasks route every iopub and shell message to the run
that sent the request (by the parent's msg_id); messages of runs nobody waits
for any more are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import AsyncIterator

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from . import outputs
from .errors import HttpError
from .languages import Language

log = logging.getLogger("kernel")

START_TIMEOUT_S = 60
# How often a run that sees no message checks that the kernel still lives.
ALIVE_POLL_S = 1.0
# How long an interrupted run may take to stop before its kernel is restarted.
INTERRUPT_GRACE_S = 10.0
# How long a kernel asked to shut down may take before it is killed. A kernel
# that shuts down itself also reaps its children (the JavaScript kernel's Node):
# killed, they would be left as zombies for init to collect.
SHUTDOWN_WAIT_S = 3.0

_ABANDON = ("abandon", None)
_RESTARTED = ("restarted", None)


class KernelSession:
    def __init__(self, language: Language, cwd: str, specs: KernelSpecManager, runtime_dir: str, ident: str) -> None:
        self.language = language
        self.cwd = cwd
        self._specs = specs
        self._runtime_dir = runtime_dir
        self._ident = ident
        self.km: AsyncKernelManager | None = None
        self.kc = None
        self._readers: list[asyncio.Task] = []
        self._routes: dict[str, asyncio.Queue] = {}
        # Bumped by every (re)start: a run's env restore is skipped on a fresh kernel.
        self.generation = 0
        self.closed = False
        # Restarts and the shutdown, one at a time; a run starts only between them.
        self._life = asyncio.Lock()

    # --- life cycle -------------------------------------------------------

    async def start(self) -> None:
        self.km = AsyncKernelManager(
            kernel_name=self.language.kernel,
            kernel_spec_manager=self._specs,
            transport="ipc",
            # ipc "addresses" are socket paths: <ip>-<port>.
            ip=os.path.join(self._runtime_dir, f"k-{self._ident[:8]}"),
            connection_file=os.path.join(self._runtime_dir, f"k-{self._ident[:8]}.json"),
            shutdown_wait_time=SHUTDOWN_WAIT_S,
        )
        log.info("starting kernel", extra={"language": self.language.name, "cwd": self.cwd})
        try:
            await self.km.start_kernel(cwd=self.cwd)
            await self._connect()
        except Exception as err:
            await self._kill()
            log.error("kernel did not start", extra={"language": self.language.name, "err": str(err)})
            raise HttpError(500, f"the {self.language.name} kernel did not start: {err}") from err
        self.generation += 1
        log.info("kernel started", extra={"language": self.language.name, "cwd": self.cwd, "pid": self._pid()})

    async def _connect(self) -> None:
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=START_TIMEOUT_S)
        self._readers = [
            asyncio.create_task(self._read("iopub", self.kc.get_iopub_msg)),
            asyncio.create_task(self._read("shell", self.kc.get_shell_msg)),
        ]

    async def _disconnect(self) -> None:
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        self._readers = []
        if self.kc is not None:
            self.kc.stop_channels()
            self.kc = None

    async def restart(self, now: bool = False) -> None:
        """A fresh kernel in the same cwd; a run in progress ends with an error saying so.

        `now`: kill the old kernel rather than ask it to shut down (it is dead or stuck).
        """
        async with self._life:
            await self._restart(now)

    async def _restart(self, now: bool) -> None:
        if self.closed:
            raise HttpError(404, "the context was removed")
        busy = bool(self._routes)
        for route in self._routes.values():
            route.put_nowait(_RESTARTED)
        await self._disconnect()
        if busy and not now:
            # A kernel busy with code shuts down only after that code stops.
            await self.interrupt()
        try:
            await self.km.restart_kernel(now=now)
            await self._connect()
        except Exception as err:
            raise HttpError(500, f"the {self.language.name} kernel did not restart: {err}") from err
        self.generation += 1
        log.info("kernel restarted", extra={"language": self.language.name, "pid": self._pid()})

    async def shutdown(self) -> None:
        self.closed = True
        busy = bool(self._routes)
        for route in self._routes.values():
            route.put_nowait(_RESTARTED)
        if busy:
            await self.interrupt()
        async with self._life:
            await self._kill()

    async def _kill(self) -> None:
        await self._disconnect()
        if self.km is None:
            return
        if self.km.has_kernel:
            try:
                # Also removes the connection file and the IPC sockets.
                await self.km.shutdown_kernel(now=False)
            except Exception as err:  # already gone
                log.debug("kernel shutdown", extra={"err": str(err)})
        else:
            await self.km.cleanup_resources()

    async def is_alive(self) -> bool:
        return self.km is not None and await self.km.is_alive()

    async def interrupt(self) -> None:
        try:
            await self.km.interrupt_kernel()
        except Exception as err:
            log.warning("interrupt failed", extra={"language": self.language.name, "err": str(err)})

    def _pid(self) -> int | None:
        proc = getattr(self.km.provisioner, "process", None) if self.km and self.km.provisioner else None
        return getattr(proc, "pid", None)

    def _exit_code(self) -> int | None:
        proc = getattr(self.km.provisioner, "process", None) if self.km and self.km.provisioner else None
        return proc.poll() if proc is not None else None

    async def _read(self, channel: str, get) -> None:
        while True:
            try:
                msg = await get()
            except Exception as err:  # a message that does not parse: drop it, keep reading
                log.warning("bad kernel message", extra={"channel": channel, "err": str(err)})
                continue
            route = self._routes.get(msg.get("parent_header", {}).get("msg_id"))
            if route is not None:
                route.put_nowait((channel, msg))

    # --- running code -----------------------------------------------------

    def abandon(self, msg_id: str) -> None:
        """The client of run `msg_id` went away: interrupt it (see run)."""
        route = self._routes.get(msg_id)
        if route is not None:
            route.put_nowait(_ABANDON)

    async def run(self, code: str, silent: bool = False, on_start=None) -> AsyncIterator[dict]:
        """Runs `code`; yields output lines (outputs.py) until the kernel is idle again.

        `on_start(msg_id)` is called once the request is sent (abandon() needs the id).
        A kernel that dies meanwhile ends the run with an error line and is restarted.
        """
        msg_id = self.kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False, stop_on_error=False)
        route: asyncio.Queue = asyncio.Queue()
        self._routes[msg_id] = route
        if on_start:
            on_start(msg_id)
        loop = asyncio.get_running_loop()
        idle = False
        reply = None
        saw_error = False
        deadline = None  # set once interrupted
        try:
            while not (idle and reply is not None):
                wait = ALIVE_POLL_S if deadline is None else min(ALIVE_POLL_S, max(0.0, deadline - loop.time()))
                try:
                    channel, msg = await asyncio.wait_for(route.get(), wait)
                except asyncio.TimeoutError:
                    if deadline is not None and loop.time() >= deadline:
                        log.warning("interrupted code did not stop: restarting", extra={"language": self.language.name})
                        await self.restart(now=True)
                        return
                    if not await self.is_alive():
                        yield await self._died()
                        return
                    continue
                if channel == "abandon":
                    if deadline is None:
                        deadline = loop.time() + INTERRUPT_GRACE_S
                        await self.interrupt()
                elif channel == "restarted":
                    why = "removed" if self.closed else "restarted"
                    yield outputs.error("ContextRestarted", f"the context was {why} while this code ran", "")
                    return
                elif channel == "shell":
                    if msg["msg_type"] == "execute_reply":
                        reply = msg["content"]
                elif msg["msg_type"] == "status":
                    idle = msg["content"].get("execution_state") == "idle"
                elif not silent and (line := _output(msg["msg_type"], msg["content"])) is not None:
                    saw_error = saw_error or line["type"] == "error"
                    yield line
            for line in self._finish(reply, saw_error, silent):
                yield line
        finally:
            self._routes.pop(msg_id, None)

    def _finish(self, reply: dict, saw_error: bool, silent: bool) -> list[dict]:
        """The lines the execute_reply adds: its error if iopub carried none, and the execution count."""
        if silent:
            if reply.get("status") == "error":
                extra = {"language": self.language.name, "ename": reply.get("ename"), "evalue": reply.get("evalue")}
                log.warning("silent code failed", extra=extra)
            return []
        lines = []
        if reply.get("status") == "error" and not saw_error:
            lines.append(
                outputs.error(reply.get("ename", "Error"), reply.get("evalue", ""), reply.get("traceback", []))
            )
        if reply.get("execution_count") is not None:
            lines.append(outputs.execution_count(reply["execution_count"]))
        return lines

    async def _died(self) -> dict:
        code = self._exit_code()
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        hint = " (signal 9 is often the out-of-memory killer)" if code == -9 else ""
        log.warning("kernel died", extra={"language": self.language.name, "exitCode": code})
        await self.restart(now=True)
        return outputs.error(
            "DeadKernelError",
            f"the {self.language.name} kernel {how}{hint} while running this code; "
            "it was restarted: variables, imports and definitions of this context are lost",
            "",
        )

    async def ensure_alive(self) -> dict | None:
        """Before a run: waits for a restart in progress; a kernel that died while idle
        is restarted, and a stderr line says so."""
        async with self._life:
            if await self.is_alive():
                return None
            code = self._exit_code()
            await self._restart(now=True)
        return outputs.stream(
            "stderr",
            f"[the {self.language.name} kernel of this context had exited (code {code}) and was restarted: its earlier state is lost]\n",
        )


def _output(kind: str, content: dict) -> dict | None:
    """The line for an iopub output message (None for the kinds the SDKs have no use for)."""
    if kind == "stream":
        return outputs.stream(content.get("name", "stdout"), content.get("text", ""))
    if kind == "execute_result":
        return outputs.result(content.get("data", {}), True)
    if kind in ("display_data", "update_display_data"):
        return outputs.result(content.get("data", {}), False)
    if kind == "error":
        return outputs.error(content.get("ename", "Error"), content.get("evalue", ""), content.get("traceback", []))
    return None
