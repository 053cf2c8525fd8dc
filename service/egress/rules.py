"""A tenant's egress allow-list: what its entries mean, checked once when the tenants file is read.

An entry is a string or a table::

    "registry.npmjs.org"                              # that host, http on port 80 and https (CONNECT) on 443
    "*.example.com"                                   # every name under example.com (not example.com itself)
    "registry.example.com:8443"                       # that host on that port only (plain http or CONNECT)
    { host = "api.example.com", methods = ["GET", "HEAD", "OPTIONS"] }   # only these methods (see below)

A host is a DNS name, never an address: the run never resolves anything, the proxy does, and an IP literal in a
request is refused whatever the list says. A ``methods`` rule can only be enforced where the proxy sees the
method — plain ``http://`` requests, and ``https://`` URLs sent to the proxy as such (it then makes the TLS
connection itself); a CONNECT tunnel hides the method, so a host with a ``methods`` rule is never reached by
CONNECT.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import msgspec

__all__ = ["Rule", "RuleError", "parse_rules", "PACKAGE_REGISTRIES", "DEFAULT_PRESETS", "METHODS", "key_of"]

METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE")
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")

PACKAGE_REGISTRIES = (
    "registry.npmjs.org", "registry.yarnpkg.com",                      # npm
    "pypi.org", "files.pythonhosted.org",                              # PyPI
    "deb.debian.org", "security.debian.org",                           # Debian
    "crates.io", "index.crates.io", "static.crates.io",                # crates
    "proxy.golang.org", "sum.golang.org",                              # the Go module proxy
    "repo.maven.apache.org", "repo1.maven.org",                        # Maven Central
)
DEFAULT_PRESETS: dict[str, tuple[str, ...]] = {"package-registries": PACKAGE_REGISTRIES}


class RuleError(ValueError):
    """An allow-list entry that cannot be used; the message names it."""


class Rule(msgspec.Struct, frozen=True, order=True):
    """One allow-list entry, checked: ``host`` lower-case (``*.`` in front for a wildcard), ``port`` None for 80
    and 443, ``methods`` empty for any."""

    host: str
    port: int | None = None
    methods: tuple[str, ...] = ()

    @property
    def wildcard(self) -> bool:
        return self.host.startswith("*.")

    def __str__(self) -> str:
        where = self.host + (f":{self.port}" if self.port is not None else "")
        return where + (f" ({', '.join(self.methods)} only)" if self.methods else "")


def _host(text: str, entry: object) -> str:
    host = text.strip().lower().rstrip(".")
    name = host[2:] if host.startswith("*.") else host
    if not name or len(name) > 253 or "*" in name:
        raise RuleError(f"egress entry {entry!r} is not a host name: write \"host\", \"*.example.com\" or "
                        "\"host:port\"")
    labels = name.split(".")
    if all(label.isdigit() for label in labels) or ":" in name or "[" in name:
        raise RuleError(f"egress entry {entry!r} is an address: name a host (the proxy resolves it; an IP literal "
                        "is always refused)")
    bad = next((label for label in labels if not _LABEL.fullmatch(label)), None)
    if bad is not None:
        raise RuleError(f"egress entry {entry!r} is not a host name ({bad!r} is not a DNS label)")
    if host.startswith("*.") and len(labels) < 2:
        raise RuleError(f"egress entry {entry!r} is too wide: a wildcard needs a domain of two labels or more "
                        "(\"*.example.com\")")
    return host


def _rule(entry: object) -> Rule:
    methods: tuple[str, ...] = ()
    if isinstance(entry, Mapping):
        unknown = sorted(set(entry) - {"host", "methods"})
        if unknown or not isinstance(entry.get("host"), str):
            raise RuleError(f"egress entry {dict(entry)!r} must be {{host = \"…\", methods = [\"GET\", …]}}"
                            + (f" (unknown key {unknown[0]!r})" if unknown else ""))
        raw = entry.get("methods", [])
        if not isinstance(raw, list) or not raw or not all(isinstance(m, str) for m in raw):
            raise RuleError(f"egress entry {dict(entry)!r}: `methods` must be a non-empty list such as "
                            "[\"GET\", \"HEAD\", \"OPTIONS\"]")
        wrong = sorted({m.upper() for m in raw} - set(METHODS))
        if wrong:
            raise RuleError(f"egress entry {dict(entry)!r} names method {wrong[0]!r}; use only "
                            f"{', '.join(METHODS)} (CONNECT follows from the ports)")
        methods = tuple(sorted({m.upper() for m in raw}))
        text = str(entry["host"])
    elif isinstance(entry, str):
        text = entry
    else:
        raise RuleError(f"egress entry {entry!r} must be a host name (a string) or a table "
                        "{host = \"…\", methods = [\"GET\", …]}")
    name, sep, port_text = text.strip().rpartition(":") if ":" in text else (text, "", "")
    port: int | None = None
    if sep:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise RuleError(f"egress entry {entry!r} has a port that is not a number from 1 to 65535")
        port = int(port_text)
    return Rule(_host(name, entry), port, methods)


def parse_rules(value: str | Sequence[object], presets: Mapping[str, Sequence[object]] | None = None,
                ) -> tuple[Rule, ...]:
    """A tenant's ``egress`` as rules: a preset's name, or a list of entries (a preset's name may be one of them).
    RuleError names the first entry that cannot be used."""
    presets = DEFAULT_PRESETS if presets is None else presets
    entries: Sequence[object] = [value] if isinstance(value, str) else value
    out: set[Rule] = set()
    for entry in entries:
        if isinstance(entry, str) and entry in presets:
            out.update(_rule(e) for e in presets[entry])
        else:
            out.add(_rule(entry))
    if not out:
        raise RuleError("the egress allow-list is empty: write `egress = \"none\"` for no network at all")
    return tuple(sorted(out))


def key_of(rules: Sequence[Rule]) -> str:
    """A short name for a set of rules (the proxy keeps one listening port per set)."""
    import hashlib

    return hashlib.sha256(msgspec.json.encode(sorted(rules))).hexdigest()[:12]
