"""One POST /execute: waits its turn on the context, sets the request's env
vars, runs the code, puts the env back, and hands its output lines over a queue.

It runs on its own task, apart from the HTTP handler: when the client goes
away (its timeoutMs passed, it was killed, the connection broke) the handler
only calls abandon(); the execution then interrupts the kernel, waits for it
to be idle, restores the env and lets the next execution in, so no request
ever starts on a kernel still busy with an abandoned one.
"""

from __future__ import annotations

import asyncio
import logging

from . import outputs
from .contexts import Context

log = logging.getLogger("execution")


class Execution:
    def __init__(self, ctx: Context, code: str, envs: dict[str, str]) -> None:
        self.ctx = ctx
        self.code = code
        self.envs = envs
        # Output lines for the handler; None ends them.
        self.lines: asyncio.Queue = asyncio.Queue()
        self._msg_id: str | None = None
        self._state = "queued"  # queued -> running -> done
        self._abandoned = False
        self.task = asyncio.create_task(self._run())

    def abandon(self) -> None:
        if self._abandoned or self._state == "done":
            return
        self._abandoned = True
        if self._state == "queued":
            self.task.cancel()  # not started: nothing to interrupt
        elif self._msg_id is not None:
            log.info("client went away: interrupting", extra={"context": self.ctx.id})
            self.ctx.session.abandon(self._msg_id)

    async def _run(self) -> None:
        try:
            async with self.ctx.lock:
                self._state = "running"
                await self._run_locked()
        except asyncio.CancelledError:
            pass
        except Exception as err:  # a kernel that could not be restarted, say
            log.exception("execution failed", extra={"context": self.ctx.id})
            self.lines.put_nowait(outputs.error("ExecutionFailed", str(err), ""))
        finally:
            self._state = "done"
            self.lines.put_nowait(outputs.END)
            self.lines.put_nowait(None)

    async def _run_locked(self) -> None:
        session = self.ctx.session
        if session.closed:
            self.lines.put_nowait(outputs.error("ContextRestarted", "the context was removed before this code ran", ""))
            return
        notice = await session.ensure_alive()
        if notice:
            self.lines.put_nowait(notice)
        lang = self.ctx.language
        generation = session.generation
        if self.envs:
            async for _ in session.run(lang.env_set(self.envs), silent=True):
                pass
        try:
            async for line in session.run(self.code, on_start=self._started):
                self.lines.put_nowait(line)
        finally:
            self._msg_id = None
            # A kernel restarted meanwhile has a fresh environment already.
            if self.envs and session.generation == generation and not session.closed:
                async for _ in session.run(lang.env_restore(), silent=True):
                    pass

    def _started(self, msg_id: str) -> None:
        self._msg_id = msg_id
        if self._abandoned:
            self.ctx.session.abandon(msg_id)
