"""Render the chart in ``helm/`` without helm: exactly the subset of Go templating its templates use.

No helm binary can be had here, so the tests render with this and validate every document with
``kubernetes-validate``. Supported, with helm's meaning:

* ``{{ .Values.a.b }}``, ``{{ .Release.Name }}``, ``{{ .Release.Namespace }}``, ``{{ .Chart.Name }}``,
  ``{{ .Chart.Version }}``, ``{{ .Chart.AppVersion }}``;
* pipelines ``{{ X | quote }}``, ``{{ toYaml X | nindent N }}``, ``{{ X | nindent N }}``;
* ``{{- if X }}`` / ``{{- else }}`` / ``{{- end }}`` (Go truthiness: false, 0, nil, "" and empty collections
  are false; a missing value is nil), with ``{{-`` / ``-}}`` whitespace trimming.

``toYaml`` of a missing or null value is ``null``, as in helm. Anything else — ``range``, ``with``, ``include``, ``define``, ``default``, comparisons, any other function —
raises ``RenderError``, and so does printing a missing value or a map/list without ``toYaml`` (helm would print
``<no value>`` or ``map[...]``) or a number helm would print in exponent form (≥ 1e6).
Values are merged like helm's ``-f``: maps deep-merged, a ``null`` deletes the key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

__all__ = ["RenderError", "render_chart", "render_text", "merge_values"]

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
_MISSING = object()


class RenderError(ValueError):
    pass


def merge_values(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge_values(base.get(k), v)
        return out
    return override


def _lookup(ref: str, ctx: dict[str, Any]) -> Any:
    if not re.fullmatch(r"(\.[A-Za-z_][A-Za-z0-9_]*)+", ref):
        raise RenderError(f"unsupported term {ref!r}: only .Values.x, .Release.x and .Chart.x references")
    parts = ref[1:].split(".")
    if parts[0] not in ("Values", "Release", "Chart"):
        raise RenderError(f"unsupported reference {ref!r}")
    cur: Any = ctx
    for p in parts:
        if not isinstance(cur, dict) or p not in cur:
            return _MISSING
        cur = cur[p]
    return cur


def _truthy(v: Any) -> bool:
    return not (v is _MISSING or v is None or v is False or v == 0 and not isinstance(v, bool) or v in ("", {}, []))


def _scalar(v: Any, ref: str) -> str:
    """What Go's text/template prints for a helm value (helm numbers are float64)."""
    if v is _MISSING or v is None:
        raise RenderError(f"{ref} has no value (helm would print '<no value>' or an empty string)")
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        if abs(v) >= 1e6 or (v and abs(v) < 1e-4):
            raise RenderError(f"{ref}={v!r}: helm prints such a number in exponent form; quote it in values")
        return str(int(v)) if float(v).is_integer() else repr(float(v))
    if isinstance(v, str):
        return v
    raise RenderError(f"{ref} is a {type(v).__name__}: print it with toYaml, not directly")


def _to_yaml(v: Any, ref: str) -> str:
    if v is _MISSING or v is None:
        return "null"  # what helm's toYaml gives for a missing or null value
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=True, allow_unicode=True).rstrip("\n")


def _quote(s: str) -> str:
    if any(ord(c) < 32 or ord(c) == 127 for c in s):
        raise RenderError(f"quote of a string with control characters ({s!r}) is not supported")
    return json.dumps(s, ensure_ascii=False)


def _eval(expr: str, ctx: dict[str, Any], *, dry: bool = False) -> str:
    """The expression's output; with ``dry`` only its form is checked (a branch not taken still must parse)."""
    stages = [s.strip() for s in expr.split("|")]
    head = stages[0].split()
    if len(head) == 1:
        ref, value = head[0], _lookup(head[0], ctx)
        out: str | None = None
    elif len(head) == 2 and head[0] == "toYaml":
        ref, value = head[1], _lookup(head[1], ctx)
        out = None if dry else _to_yaml(value, ref)
    else:
        raise RenderError(f"unsupported expression {{{{ {expr} }}}}")
    for stage in stages[1:]:
        words = stage.split()
        if dry:
            if words != ["quote"] and not (len(words) == 2 and words[0] == "nindent" and words[1].isdigit()):
                raise RenderError(f"unsupported function {stage!r} in {{{{ {expr} }}}}")
        elif words == ["quote"]:
            out = _quote(out if out is not None else _scalar(value, ref))
        elif len(words) == 2 and words[0] == "nindent" and words[1].isdigit():
            text = out if out is not None else _scalar(value, ref)
            pad = " " * int(words[1])
            out = "\n" + "\n".join(pad + line if line else line for line in text.split("\n"))
        else:
            raise RenderError(f"unsupported function {stage!r} in {{{{ {expr} }}}}")
    if dry:
        return ""
    return out if out is not None else _scalar(value, ref)


def render_text(text: str, ctx: dict[str, Any], *, name: str = "<template>") -> str:
    """One template's text, rendered."""
    pieces: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch emits, the enclosing block emits)
    pos = 0
    emitting = True
    for m in _ACTION.finditer(text):
        literal = text[pos:m.start()]
        if m.group(1):
            literal = literal.rstrip(" \t\r\n")
        if emitting:
            pieces.append(literal)
        pos = m.end()
        if m.group(3):
            rest = text[pos:]
            pos += len(rest) - len(rest.lstrip(" \t\r\n"))
        expr = m.group(2)
        word = expr.split()[0] if expr.split() else ""
        try:
            if word == "if":
                cond = expr[2:].strip()
                if not cond or " " in cond:
                    raise RenderError(f"unsupported condition {cond!r}: only `if .Values.x`")
                branch = emitting and _truthy(_lookup(cond, ctx))
                stack.append((branch, emitting))
                emitting = branch
            elif expr == "else":
                if not stack:
                    raise RenderError("else without if")
                branch, outer = stack[-1]
                stack[-1] = (outer and not branch, outer)
                emitting = outer and not branch
            elif expr == "end":
                if not stack:
                    raise RenderError("end without if")
                emitting = stack.pop()[1]
            elif expr.startswith("/*"):
                continue
            else:
                out = _eval(expr, ctx, dry=not emitting)
                if emitting:
                    pieces.append(out)
        except RenderError as e:
            line = text.count("\n", 0, m.start()) + 1
            raise RenderError(f"{name}:{line}: {e}") from None
    if stack:
        raise RenderError(f"{name}: {len(stack)} `if` without `end`")
    if emitting:
        pieces.append(text[pos:])
    out = "".join(pieces)
    if "{{" in out or "}}" in out:
        raise RenderError(f"{name}: a template action was left unrendered")
    return out


def render_chart(chart_dir: str | Path, values: dict[str, Any] | None = None, *, release: str = "flower",
                 namespace: str = "flower") -> list[dict[str, Any]]:
    """Every Kubernetes document the chart renders to, with ``values`` merged over values.yaml."""
    chart_dir = Path(chart_dir)
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text(encoding="utf-8"))
    defaults = yaml.safe_load((chart_dir / "values.yaml").read_text(encoding="utf-8")) or {}
    ctx = {"Values": merge_values(defaults, values or {}),
           "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
           "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart.get("appVersion")}}
    docs: list[dict[str, Any]] = []
    for path in sorted((chart_dir / "templates").glob("*.yaml")):
        if path.name.startswith("_"):
            continue
        text = render_text(path.read_text(encoding="utf-8"), ctx, name=path.name)
        for doc in yaml.safe_load_all(text):
            if doc is not None:
                docs.append(doc)
    return docs
