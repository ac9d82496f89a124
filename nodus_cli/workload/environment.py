"""Environment templates in ``env`` values: ``${NAME}`` and ``${NAME:-default}``.

A workload file keeps the template; the host's value is taken when a run starts
(:func:`resolve`) and is never stored: records, ``runs --json``, logs and reruns keep what
the user wrote. ``$$`` is a literal ``$``; any other ``$`` is literal too (``"$HOME"``
passes the four characters ``$HOME``), so only ``${`` starts a template.

This module imports nothing heavy: ``nodus validate`` parses every value with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from nodus_cli.errors import InvalidInput
from nodus_cli.structs import struct

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
#: ``$NAME`` after an even run of ``$`` (``$$`` is a literal ``$``).
_BARE = re.compile(r"(?<!\$)(?:\$\$)*\$([A-Za-z_][A-Za-z0-9_]*)")


@struct(frozen=True)
class Template:
    """``${name}`` or ``${name:-default}`` (``default`` None when there is none)."""

    name: str
    default: str | None = None


#: A parsed value: literal text and templates, in order.
Parts = tuple[str | Template, ...]


class TemplateError(ValueError):
    """A value that is not a valid template; the message says what to write instead."""


class MissingVariables(ValueError):
    """Templates whose variable is not set on the host and that have no default.

    ``missing`` lists every ``(env key, variable name)`` pair, in the order of ``env``.
    """

    def __init__(self, missing: list[tuple[str, str]]) -> None:
        self.missing = missing
        super().__init__("; ".join(missing_message(key, name) for key, name in missing))


class MissingEnvironment(InvalidInput):
    """A run cannot start: the host environment lacks variables its workload takes, every
    ``(env key, variable name)`` of ``missing`` named in the message, with how to give
    them. :meth:`recorded` words it for a recorded run (``nodus rerun``), which has no file
    to write a default in."""

    def __init__(self, missing: list[tuple[str, str]], rerun: str | None = None) -> None:
        self.missing = list(dict.fromkeys(missing))
        lines = [missing_message(key, name, editable=rerun is None) for key, name in self.missing]
        if rerun is None:
            hint = "export them before running (they are never stored), or give a default: "
            hint += "${NAME:-default}"
        else:
            hint = (
                f"export them, then `nodus rerun {rerun}` again: a recorded run takes them "
                "from the environment it runs in (their values are never stored)"
            )
        super().__init__(
            "the workload takes values from this environment that are not set:\n  "
            + "\n  ".join(lines),
            hint=hint,
        )

    def recorded(self, run_id: str) -> MissingEnvironment:
        """The same refusal for a run again of recorded run ``run_id``."""
        return MissingEnvironment(self.missing, rerun=run_id)


def missing_message(key: str, name: str, editable: bool = True) -> str:
    text = f"env.{key} takes ${{{name}}} from the environment, which is not set: export {name}"
    return text + (f" before running, or write ${{{name}:-default}}" if editable else "")


def parse(value: str) -> Parts:
    """Split a value into literal text and templates; :class:`TemplateError` when invalid."""
    if "$" not in value:
        return (value,) if value else ()
    parts: list[str | Template] = []
    text: list[str] = []
    i, n = 0, len(value)
    while i < n:
        dollar = value.find("$", i)
        if dollar < 0:
            text.append(value[i:])
            break
        text.append(value[i:dollar])
        following = value[dollar + 1 : dollar + 2]
        if following == "$":
            text.append("$")
            i = dollar + 2
            continue
        if following != "{":
            text.append("$")
            i = dollar + 1
            continue
        end = value.find("}", dollar + 2)
        if end < 0:
            raise TemplateError(
                f'"{_clip(value[dollar:])}" starts a template that never ends: close it with '
                '"}", as in ${NAME}, or write $$ for a literal $'
            )
        template = _template(value[dollar + 2 : end], value, dollar)
        literal = "".join(text)
        if literal:
            parts.append(literal)
        text = []
        parts.append(template)
        i = end + 1
    literal = "".join(text)
    if literal:
        parts.append(literal)
    return tuple(parts)


def _template(inner: str, value: str, start: int) -> Template:
    """The text between ``${`` and ``}``, the first template of ``value[start:]``."""
    name, sep, default = inner.partition(":-")
    if _NAME.fullmatch(name) is None:
        shown = "${" + inner + "}"
        head = _NAME.match(name)
        if head is not None and not sep:
            # ${NAME-x}, ${NAME:=x}, ${NAME:?x}: shell forms nodus does not take
            known = head.group(0)
            raise TemplateError(
                f'"{_clip(shown)}" is not a template nodus understands: write '
                f"${{{known}}} or ${{{known}:-default}}"
            )
        raise TemplateError(
            f'"{_clip(shown)}" does not name a variable: a name has letters, digits and _, '
            "not starting with a digit, as in ${HF_TOKEN} or ${HF_TOKEN:-default}"
        )
    if not sep:
        return Template(name)
    if "${" in default:
        raise TemplateError(
            f'"{_clip(_nested(value, start))}": a default cannot hold another template; '
            "write a literal default, as in ${NAME:-value}"
        )
    return Template(name, default.replace("$$", "$"))


def _nested(value: str, start: int) -> str:
    """The template at ``start`` as written, up to the brace that closes it: the first
    ``}`` closes the innermost one, and quoting only that far would cut what the user
    wrote (``${A:-${B}`` for ``${A:-${B}}``)."""
    depth = 0
    for i in range(start, len(value)):
        if value.startswith("${", i):
            depth += 1
        elif value[i] == "}":
            depth -= 1
            if depth == 0:
                return value[start : i + 1]
    return value[start:]


def bare_references(value: str) -> list[str]:
    """Names written ``$NAME`` (no braces): passed as written, never expanded.

    ``$$NAME`` is a literal ``$`` followed by text, not a reference.
    """
    if "$" not in value:
        return []
    return [m.group(1) for m in _BARE.finditer(value)]


def names(value: str) -> list[str]:
    """The variables a value takes from the host, in order, each once."""
    found: list[str] = []
    for part in parse(value):
        if isinstance(part, Template) and part.name not in found:
            found.append(part.name)
    return found


def is_literal(value: str) -> bool:
    """Whether the value takes nothing from the host."""
    return "${" not in value or not any(isinstance(p, Template) for p in parse(value))


def render(parts: Parts, host: Mapping[str, str]) -> tuple[str, list[str]]:
    """The value with the host's variables in it, and the names that were missing."""
    out: list[str] = []
    missing: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        found = host.get(part.name)
        if part.default is not None and not found:
            out.append(part.default)  # unset or empty: the default, as in the shell
        elif found is not None:
            out.append(found)
        elif part.name not in missing:
            missing.append(part.name)
    return "".join(out), missing


def resolve(env: Mapping[str, str], host: Mapping[str, str]) -> dict[str, str]:
    """``env`` with every template replaced by the host's value (or its default).

    Raises :class:`MissingVariables` naming every variable that is unset and has no
    default (all of them, not only the first), and :class:`TemplateError` for a value
    that is not a valid template.
    """
    resolved: dict[str, str] = {}
    missing: list[tuple[str, str]] = []
    for key, value in env.items():
        text, absent = render(parse(value), host)
        resolved[key] = text
        missing.extend((key, name) for name in absent)
    if missing:
        raise MissingVariables(missing)
    return resolved


def looks_secret(key: str) -> bool:
    """``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*`` (any case)."""
    upper = key.upper()
    return any(word in upper for word in _SECRET_WORDS)


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
