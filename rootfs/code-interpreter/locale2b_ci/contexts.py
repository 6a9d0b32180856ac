"""Contexts: a kernel each, by id; and the default context of each language.

A request without `context_id` runs in its language's default context (made
on first use; Python's and JavaScript's at server start). Contexts share
nothing but the filesystem: each is its own kernel process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from dataclasses import dataclass, field

from jupyter_client.kernelspec import KernelSpecManager

from . import languages
from .errors import HttpError
from .kernel import KernelSession
from .languages import Language

log = logging.getLogger("contexts")


@dataclass
class Context:
    id: str
    language: Language
    cwd: str
    session: KernelSession
    # Executions on one context run one at a time, in the order they came (asyncio.Lock is FIFO).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def to_json(self) -> dict:
        return {"id": self.id, "language": self.language.name, "cwd": self.cwd}


class Contexts:
    def __init__(self, specs_dir: str, runtime_dir: str, default_cwd: str) -> None:
        # Only ours: no kernelspec installed elsewhere, nor ipykernel's own `python3`.
        self._specs = KernelSpecManager(kernel_dirs=[specs_dir], ensure_native_kernel=False)
        self._runtime_dir = runtime_dir
        self.default_cwd = default_cwd
        self._by_id: dict[str, Context] = {}
        self._defaults: dict[str, str] = {}  # language name -> context id
        self._default_starts: dict[str, asyncio.Future] = {}  # language name -> its default being made

    def list(self) -> list[Context]:
        return list(self._by_id.values())

    def get(self, context_id: str) -> Context:
        ctx = self._by_id.get(context_id)
        if ctx is None:
            raise HttpError(
                404,
                f"context {context_id!r} not found: it was removed, or never created here (GET /contexts lists them)",
            )
        return ctx

    async def create(self, language: Language, cwd: str | None) -> Context:
        cwd = self._check_cwd(cwd)
        # Shielded: a client that goes away mid-start must not cancel a kernel
        # half-way (it would run on, known to no context); the context is made
        # and listed all the same.
        return await asyncio.shield(_task(self._start(language, cwd)))

    async def _start(self, language: Language, cwd: str) -> Context:
        ident = str(uuid.uuid4())
        session = KernelSession(language, cwd, self._specs, self._runtime_dir, ident)
        await session.start()
        ctx = Context(ident, language, cwd, session)
        self._by_id[ident] = ctx
        log.info("context created", extra={"context": ident, "language": language.name, "cwd": cwd})
        return ctx

    def _check_cwd(self, cwd: str | None) -> str:
        if cwd is None or cwd == "":
            return self.default_cwd
        if not isinstance(cwd, str) or "\0" in cwd:
            raise HttpError(400, "cwd must be a path (a string)")
        if not os.path.isabs(cwd):
            raise HttpError(400, f"cwd {cwd!r} must be an absolute path, such as /home/user")
        if not os.path.isdir(cwd):
            raise HttpError(400, f"cwd {cwd!r} is not a directory in this sandbox: create it first (files.makeDir)")
        return os.path.normpath(cwd)

    async def default(self, language: Language) -> Context:
        ctx = self._by_id.get(self._defaults.get(language.name, ""))
        if ctx is not None:
            return ctx
        # One start at a time per language, whoever asks (and shielded, as in create).
        start = self._default_starts.get(language.name)
        if start is None or start.done():
            start = _task(self._start_default(language))
            self._default_starts[language.name] = start
        return await asyncio.shield(start)

    async def _start_default(self, language: Language) -> Context:
        ctx = await self._start(language, self.default_cwd)
        self._defaults[language.name] = ctx.id
        return ctx

    async def for_execute(self, context_id: object, language: object) -> Context:
        if context_id not in (None, ""):
            if not isinstance(context_id, str):
                raise HttpError(400, "context_id must be a string (a context's id)")
            ctx = self.get(context_id)
            if language not in (None, "") and languages.find(_text(language, "language")) is not ctx.language:
                raise HttpError(
                    400,
                    f"context {context_id} runs {ctx.language.name}, not {language}: give the context or the language, not both",
                )
            return ctx
        return await self.default(languages.find(_text(language, "language")))

    async def remove(self, context_id: str) -> None:
        ctx = self.get(context_id)
        del self._by_id[context_id]
        await ctx.session.shutdown()
        log.info("context removed", extra={"context": context_id})

    async def restart(self, context_id: str) -> Context:
        ctx = self.get(context_id)
        await ctx.session.restart()
        return ctx

    async def close(self) -> None:
        contexts, self._by_id = list(self._by_id.values()), {}
        await asyncio.gather(*(ctx.session.shutdown() for ctx in contexts), return_exceptions=True)


def _task(coro) -> asyncio.Future:
    """A task whose failure counts as seen even if the one waiting for it went away (it is logged where it happens)."""
    task = asyncio.ensure_future(coro)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task


def _text(value: object, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise HttpError(400, f"{name} must be a string")
