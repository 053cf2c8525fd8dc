"""A msgspec error about settings or a request body, said as one sentence with the way out.

msgspec says what it found (``Object contains unknown field `max_runing```, ``Invalid enum value 'dockr' - at
`$.backend```); a person needs what to write instead: the setting they meant ("did you mean `max_running`?"), the
values a field takes, the fields that are required. Used for the service's config, the tenants file and the API's
bodies, each handing in the struct it decoded into.
"""

from __future__ import annotations

import difflib
import re
import typing

import msgspec

__all__ = ["explain"]

_UNKNOWN = re.compile(r"Object contains unknown field `(?P<key>[^`]*)`(?: - at `\$(?P<at>[^`]*)`)?$")
_ENUM = re.compile(r"Invalid enum value (?P<value>.+) - at `\$(?P<at>[^`]*)`$")
_AT = re.compile(r"(?P<what>.*) - at `\$(?P<at>[^`]*)`$")


def explain(error: msgspec.ValidationError | str, struct: type[msgspec.Struct], *, noun: str = "setting") -> str:
    """``error`` (from decoding into ``struct``) as a sentence: which key or value, and what to write instead."""
    text = str(error)
    unknown = _UNKNOWN.match(text)
    if unknown:
        at = _path(unknown["at"])
        fields = _fields(_struct_at(struct, at))
        key = unknown["key"]
        where = f"`{at + '.' if at else ''}{key}`"
        close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
        required = [f for f in fields if f in _required(_struct_at(struct, at))]
        if close:
            need = f" (`{close[0]}` is required)" if close[0] in required else ""
            return f"unknown {noun} {where}: did you mean `{close[0]}`?{need}"
        need = (f" ({', '.join(f'`{f}`' for f in required)} {'is' if len(required) == 1 else 'are'} required)"
                if required else "")
        return f"unknown {noun} {where}: the {noun}s here are {', '.join(fields)}{need}"
    enum = _ENUM.match(text)
    if enum:
        at = _path(enum["at"])
        allowed = _literal(struct, at)
        if allowed:
            return f"`{at}` is {enum['value']}: it must be one of {', '.join(allowed)}"
    missing = re.match(r"Object missing required field `(?P<key>[^`]*)`(?: - at `\$(?P<at>[^`]*)`)?$", text)
    if missing:
        at = _path(missing["at"] or "")
        return f"`{at + '.' if at else ''}{missing['key']}` is required"
    located = _AT.match(text)
    if located:
        return f"`{_path(located['at'])}`: {located['what'][:1].lower()}{located['what'][1:]}"
    return text


def _path(at: str | None) -> str:
    """``$.a.b`` → ``a.b`` (``$`` and ``$[0]`` as they come)."""
    return (at or "").lstrip(".")


def _fields(struct: type[msgspec.Struct] | None) -> list[str]:
    return list(struct.__struct_fields__) if struct is not None else []


def _required(struct: type[msgspec.Struct] | None) -> set[str]:
    if struct is None:
        return set()
    n = len(struct.__struct_fields__) - len(struct.__struct_defaults__)
    return set(struct.__struct_fields__[:n])


def _hint(struct: type[msgspec.Struct], name: str) -> object:
    try:
        return typing.get_type_hints(struct).get(name)
    except (NameError, TypeError):
        return None


def _struct_at(struct: type[msgspec.Struct], at: str) -> type[msgspec.Struct] | None:
    """The struct a dotted path leads to (a field's own struct, or one inside ``X | None``); None if none."""
    current: object = struct
    for part in [p for p in at.split(".") if p]:
        if not (isinstance(current, type) and issubclass(current, msgspec.Struct)):
            return None
        current = _hint(current, part)
        options = [a for a in typing.get_args(current) if isinstance(a, type) and issubclass(a, msgspec.Struct)]
        current = options[0] if options else current
    return current if isinstance(current, type) and issubclass(current, msgspec.Struct) else None


def _literal(struct: type[msgspec.Struct], at: str) -> list[str]:
    """The values a Literal field at ``at`` takes (empty when it is no Literal)."""
    head, _, name = at.rpartition(".")
    owner = _struct_at(struct, head) if head else struct
    hint = _hint(owner, name) if owner is not None else None
    for option in (hint, *typing.get_args(hint)):
        if typing.get_origin(option) is typing.Literal:
            return [str(v) for v in typing.get_args(option)]
    return []
