"""The service's URL: checked before any request, shown without credentials, and plain http away from this
machine named for what it is (the tenant token would cross the network readable)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit

from ..core.errors import FlowerError


def shown_url(url: str) -> str:
    """The URL as it may be printed: any ``user:password@`` taken out."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=host)) if "@" in parts.netloc else url
    except ValueError:
        return url.rpartition("@")[2] if "@" in url else url


class BadSetting(FlowerError, ValueError):
    """A setting the client cannot use. ``message`` says it in English; ``key`` and ``fields`` let a front end
    (the ``flower`` command's catalogue) say it in the person's language."""

    def __init__(self, message: str, *, key: str, **fields: str) -> None:
        super().__init__(message)
        self.message, self.key, self.fields = message, key, fields


def check_server(url: str) -> str:
    """The service URL without a trailing slash; ``ValueError`` (one sentence, no secret in it) if it is unusable."""
    try:
        parts = urlsplit(url.strip())
        _ = parts.port  # a bad port raises here
    except ValueError:
        raise BadSetting(f"the service URL {shown_url(url)!r} cannot be read: write it as http(s)://host:port",
                         key="url_unreadable", url=repr(shown_url(url))) from None
    if parts.username is not None or parts.password is not None:
        raise BadSetting("the service URL carries a user name or password (user:pass@): take them out and give "
                         "the tenant token instead (--token, FLOWER_TOKEN or `flower remote login`)",
                         key="url_userinfo")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadSetting(f"the service URL {shown_url(url)!r} is not http(s)://host[:port]: write it that way",
                         key="url_scheme", url=repr(shown_url(url)))
    return url.strip().rstrip("/")


def in_the_clear(url: str) -> bool:
    """Plain http to another machine: the token would travel unencrypted."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        return False
    host = parts.hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True
