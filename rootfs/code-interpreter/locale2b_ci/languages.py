"""The languages contexts run, the names the SDKs use for them, and how each
sets a cell's environment variables and puts them back.

The SDKs name `python`, `javascript`, `typescript`, `r`, `java` and `bash`
(RunCodeLanguage); this sandbox has kernels for python, javascript (also `js`)
and bash. Any other name is refused with the list of what is here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

from .errors import HttpError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Python: the previous values are kept on the `os` module, out of the user's namespace.
_PY_SET = "import os\nos._locale2b_saved_env = {k: os.environ.get(k) for k in envs}\nos.environ.update(envs)\n"
_PY_RESTORE = (
    "import os\n"
    "for k, v in getattr(os, '_locale2b_saved_env', {}).items():\n"
    "    if v is None:\n"
    "        os.environ.pop(k, None)\n"
    "    else:\n"
    "        os.environ[k] = v\n"
    "os._locale2b_saved_env = {}\n"
)


def _python_set(envs: dict[str, str]) -> str:
    # exec() in a fresh namespace: the cell's own globals stay untouched.
    return f"exec({_PY_SET!r}, {{'envs': {envs!r}}})"


def _python_restore() -> str:
    return f"exec({_PY_RESTORE!r}, {{}})"


_JS_KEY = 'Symbol.for("locale2b.savedEnv")'


def _js_set(envs: dict[str, str]) -> str:
    return (
        f"{{ const saved = (globalThis[{_JS_KEY}] = {{}}); "
        f"for (const [k, v] of Object.entries({json.dumps(envs)})) {{ saved[k] = process.env[k]; process.env[k] = v; }} }}"
    )


def _js_restore() -> str:
    return (
        f"{{ for (const [k, v] of Object.entries(globalThis[{_JS_KEY}] ?? {{}})) {{ "
        f"if (v === undefined) delete process.env[k]; else process.env[k] = v; }} "
        f"delete globalThis[{_JS_KEY}]; }}"
    )


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _bash_set(envs: dict[str, str]) -> str:
    # Names are checked (ENV_NAME) before they get here; values are single-quoted.
    lines = ["__locale2b_env_restore=''"]
    for name, value in envs.items():
        lines.append(
            f'if [[ -v {name} ]]; then __locale2b_env_restore+="export {name}=$(printf %q "${name}");"; '
            f'else __locale2b_env_restore+="unset {name};"; fi'
        )
        lines.append(f"export {name}={_sh_quote(value)}")
    return "\n".join(lines)


def _bash_restore() -> str:
    return 'eval "$__locale2b_env_restore"; unset __locale2b_env_restore'


@dataclass(frozen=True)
class Language:
    name: str  # as contexts report it
    aliases: tuple[str, ...]  # other names a request may use
    kernel: str  # the kernelspec (kernelspecs.py)
    env_set: Callable[[dict[str, str]], str]
    env_restore: Callable[[], str]


LANGUAGES = (
    Language("python", ("python3", "py"), "locale2b-python", _python_set, _python_restore),
    Language("javascript", ("js", "node", "nodejs"), "locale2b-javascript", _js_set, _js_restore),
    Language("bash", ("sh", "shell"), "locale2b-bash", _bash_set, _bash_restore),
)

DEFAULT = LANGUAGES[0]


def find(name: str | None) -> Language:
    """The language a request names (None: Python, as the SDKs document)."""
    if name is None or name == "":
        return DEFAULT
    key = name.strip().lower()
    for lang in LANGUAGES:
        if key == lang.name or key in lang.aliases:
            return lang
    here = ", ".join(f"{lang.name} ({', '.join(lang.aliases[:1])})" for lang in LANGUAGES)
    # 404: the SDKs surface a 404's body to the user as it is (NotFoundError).
    raise HttpError(404, f"no kernel for language {name!r} in this sandbox: the languages here are {here}")


def check_envs(envs: object) -> dict[str, str]:
    """`env_vars` of a request: a mapping of variable names to strings (null: none)."""
    if envs is None:
        return {}
    if not isinstance(envs, dict):
        raise HttpError(400, "env_vars must be an object mapping variable names to string values")
    for name, value in envs.items():
        if not ENV_NAME.match(name):
            raise HttpError(
                400,
                f"env_vars: {name!r} is not a valid environment variable name (letters, digits and _, not starting with a digit)",
            )
        if not isinstance(value, str):
            raise HttpError(400, f"env_vars: the value of {name} must be a string, got {type(value).__name__}")
        if "\0" in value:
            raise HttpError(400, f"env_vars: the value of {name} contains a NUL byte")
    return envs
