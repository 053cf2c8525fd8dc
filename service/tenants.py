"""Tenants: who may submit runs, with which token, against which repository and credentials.

The tenants file is TOML (``[[tenant]]`` tables) or JSON (``{"tenant": [...]}`` or a list)::

    [[tenant]]
    name = "acme"
    token_sha256 = "9f86d081…"              # sha256 hex of the bearer token (python -m service hash-token)
    repo = "/srv/repos/acme"                 # the team's git repository on this machine
    credentials = "/etc/flower/acme.env"     # ANTHROPIC_* values; mounted into each run, never logged
    quota = 2                                # runs of this tenant executing at once
    max_queued = 500                         # optional: runs waiting to start (default: max_queued_per_tenant)
    requests_per_s = 50.0                    # optional: API requests a second per replica (default: the config's)
    request_burst = 500                      # optional: requests at once before the rate paces them
    park_after_s = 600                       # optional: a run waiting this long for an answer gives its sandbox back
    allowed_options = ["rounds", "max_asks", "timeout_s"]
    egress = "package-registries"            # optional: what the run may reach on the network (below)
    verify = "pytest -q"                     # optional: the team's check, run before each verdict (see below)
    verify_timeout_s = 600                   # optional: the check is stopped after this long (and fails)
    budget_usd = { run = 5.0, day = 50.0 }   # optional: measured by the model gateway, either may be left out
    server_tools = ["web_search"]            # optional: tools the provider runs itself, open egress only
    webhook_url = "https://ci.acme.example/flower"      # optional: signed webhooks (service.results.webhooks)
    webhook_secret_file = "/etc/flower/acme.hook"       # the HMAC secret, alone in a file beside the credentials
    push_url = "https://git.acme.example/acme.git"      # optional: a succeeded run's branch is pushed there
    push_credentials_file = "/etc/flower/acme.push"     # username=… and token=… lines (service.results.push)
    # or over ssh, with a deploy key the service holds and the server's host key pinned:
    # push_url = "ssh://git@git.acme.example/acme.git"
    # push_ssh_key_file = "/etc/flower/acme.deploy-key"    # private key, 0600
    # push_known_hosts_file = "/etc/flower/acme.known_hosts"
    # optional: the team's own environment (Docker backend; service/README.md, "Your repository's environment")
    image = "node:20-bookworm"               # its base image, on the engine (nothing is pulled)
    setup = ["npm ci"]                       # run once per image + lockfiles, kept as a prepared image
    setup_secrets_file = "/etc/flower/acme.setup.env"   # e.g. NPM_TOKEN=…: seen by setup only, never by a run
    devcontainer = true                      # the repository's .devcontainer/devcontainer.json wins over `image`

``egress`` says what a run may reach besides the model gateway:

* ``"none"`` (the default; ``"closed"`` means the same): nothing — the sandbox has no network and no proxy;
* a preset's name, e.g. ``"package-registries"`` (the public npm, PyPI, Debian, crates, Go proxy and Maven hosts;
  presets are named and edited in the service config's ``[egress_presets]``);
* a list of entries, presets' names among them: ``"host"`` (ports 80 and 443), ``"*.example.com"`` (every name
  under it), ``"host:port"`` (that port only), or ``{host = "registry.example.com", methods = ["GET", "HEAD",
  "OPTIONS"]}`` (only those methods, so never through a CONNECT tunnel: ``service.egress.rules``). The sandbox
  still has no network: its runner leads a loopback port to the socket ``gateway/egress.sock``, and squid on the
  service's side lets through what the list allows, each request audited (``service.egress``);
* ``"open"``: the sandbox gets the backend's network, unfiltered and unaudited.

An entry that cannot be used makes the file invalid, with a sentence naming the entry.

``server_tools`` names the provider's server-side tools a run may ask for (``web_search``, ``web_fetch``,
``code_execution``, ``tool_search_tool_regex``, ``tool_search_tool_bm25``, ``mcp_servers``) and the content it may
have the provider fetch (``url_sources``: a block whose source is a URL; ``file_sources``: an uploaded file): they
reach the network from the provider's side, so unless ``egress = "open"`` none is forwarded whatever the list says,
and by default none is.

``verify`` is a shell command line (``npm test``, ``pytest -q``, ``go test ./...``): after every round of work the
run copies its worktree as it is (untracked files and installed dependencies too) and runs ``sh -c <verify>`` in
the copy; the exit code and the output's tail are the judge's evidence, and a round whose check fails is not
achieved, whatever the judge says. An ask may set its own with the ``verify`` option (it wins; list ``verify`` in
``allowed_options`` to let it). Without one the judge judges alone, and may still answer "cannot verify here".

``webhook_url`` gets a POST on ``run.started``, ``question.asked`` and ``run.ended`` (JSON; header
``X-Flower-Signature-256: sha256=<hex HMAC-SHA256 of the body>`` keyed with the contents of
``webhook_secret_file``), retried with backoff. ``push_url`` gets each succeeded run's ``flower/<run>`` branch,
pushed by the service with the username and token in ``push_credentials_file``. Secrets live only in those
files (a ``webhook_secret`` or ``push_token`` in the tenants file is refused), which are read when used —
never by a run, never logged. Both URLs are http(s) and carry no credentials; a push over plain http is
refused except to a loopback address (its credential would travel in the clear). A ``push_url`` may also be
``ssh://[user@]host[:port]/path``: the service pushes with the deploy key in ``push_ssh_key_file`` and accepts
only the host keys in ``push_known_hosts_file`` (no key is trusted on first sight, no agent, no ssh config read).

The credentials stay with the service: a run gets a token of its own for the model gateway
(``service.gateway``), which swaps the tenant's key in on the way to ``ANTHROPIC_BASE_URL``.

``token = "..."`` (plain text) is accepted for local setups and hashed at once; only the
hash is kept in memory. Tokens are compared in constant time. The file is re-read when it
changes; an edit that does not parse leaves the **last good** file in force — its tenants, tokens and
budgets — and logs why (an emptied tenant list would switch budgets off for live runs, and a typo would
lock every team out). A tenant removed from a file that parses loses its token at once; the scheduler
stops its live runs.

Each tenant's repository is its own: a path that goes through a symlink, or one whose resolved path or git
object store another tenant already names, is refused (a run mounts its tenant's object store).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import msgspec

from flower.core.credentials import TOKEN_KEYS
from sandbox.spec import Egress, SpecError, check_verify

from .egress.rules import DEFAULT_PRESETS, Rule, RuleError, parse_rules
from .errors import TenantError, TenantNotReady
from .operator_files import check_git_repo, operator_file
from .fields import explain
from .gateway.wire import SERVER_TOOLS

__all__ = ["Tenant", "Tenants", "Budget", "TenantError", "TenantNotReady", "hash_token", "not_ready"]

NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,62}$"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Budget(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """USD a tenant may spend, as the gateway measures it: per run, and per UTC day over all its runs."""

    run: Annotated[float, msgspec.Meta(gt=0)] | None = None
    day: Annotated[float, msgspec.Meta(gt=0)] | None = None


class _TenantEntry(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(pattern=NAME_RE)]
    repo: str
    credentials: str
    token_sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")] | None = None
    token: Annotated[str, msgspec.Meta(min_length=16)] | None = None
    quota: Annotated[int, msgspec.Meta(ge=1)] = 1
    max_queued: Annotated[int, msgspec.Meta(ge=1)] | None = None
    requests_per_s: Annotated[float, msgspec.Meta(gt=0)] | None = None
    park_after_s: Annotated[float, msgspec.Meta(ge=0)] | None = None
    request_burst: Annotated[int, msgspec.Meta(ge=1)] | None = None
    schedule_min_interval_s: Annotated[float, msgspec.Meta(ge=1)] | None = None
    allowed_options: list[str] = []
    egress: str | list[object] = "none"  # each entry checked by service.egress.rules, which names a bad one
    verify: str | None = None
    verify_timeout_s: Annotated[float, msgspec.Meta(ge=1, le=7 * 24 * 3600)] = 600.0
    budget_usd: Budget = Budget()
    server_tools: list[str] = []
    webhook_url: str | None = None
    webhook_secret_file: str | None = None
    push_url: str | None = None
    push_credentials_file: str | None = None
    push_ssh_key_file: str | None = None
    push_known_hosts_file: str | None = None
    image: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    setup: str | list[Annotated[str, msgspec.Meta(min_length=1)]] = []
    setup_secrets_file: str | None = None
    devcontainer: bool = True


class Webhook(msgspec.Struct, frozen=True):
    """Where a tenant's webhooks go, and the file holding the secret they are signed with."""
    url: str
    secret_file: str


class PushTarget(msgspec.Struct, frozen=True):
    """The git remote a tenant's succeeded runs are pushed to: over https the file holding its username and token;
    over ssh the deploy key's file and the known_hosts file that pins the server's host key."""
    url: str
    credentials_file: str = ""
    ssh_key_file: str = ""
    known_hosts_file: str = ""


class Tenant(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    token_hash: str
    repo: str
    credentials: str
    quota: int
    allowed_options: frozenset[str]
    max_queued: int | None = None
    """Runs of this tenant waiting to start at most; None: the service's ``max_queued_per_tenant``."""
    requests_per_s: float | None = None
    """API requests a second to one replica; None: the service's ``requests_per_s``."""
    request_burst: int | None = None
    """API requests at once before ``requests_per_s`` paces them; None: the service's ``request_burst``."""
    park_after_s: float | None = None
    """A run of this tenant that has waited this long for an answer gives its sandbox back (``parked``: no process,
    no slot, no token) until the answer comes; None: never parked."""
    schedule_min_interval_s: float | None = None
    """The shortest time between two ticks of its schedules; None: the service's ``schedule_min_interval_s``."""
    egress: Egress = "closed"
    """The sandbox's network: "closed" (none, the egress "none"), "proxied" (none but the allow-list's socket),
    "open"."""
    egress_allow: tuple[Rule, ...] = ()
    """The allow-list squid enforces when ``egress`` is "proxied"."""
    verify: str | None = None
    """The team's check, run before each verdict in a copy of the run's worktree (``sandbox.verify``); None: none."""
    verify_timeout_s: float = 600.0
    budget_usd: Budget = Budget()
    server_tools: frozenset[str] = frozenset()
    webhook: Webhook | None = None
    push: PushTarget | None = None
    image: str | None = None
    """The base image of its runs (on the engine; nothing is pulled); None: flower's own, unless the repository
    has a devcontainer.json."""
    setup: tuple[str, ...] = ()
    """Shell lines run in order before the agent phase, after the devcontainer's own; their result is kept."""
    setup_secrets_file: str | None = None
    """KEY=value lines given to the setup commands alone (a private registry's token): never to a run."""
    devcontainer: bool = True
    """Honour the repository's ``.devcontainer/devcontainer.json`` (it wins over ``image``)."""

    def __repr__(self) -> str:  # the hash is not secret, but keep reprs short and boring
        return f"Tenant({self.name!r}, repo={self.repo!r}, quota={self.quota})"

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise TenantNotReady naming every option this tenant may not set."""
        bad = sorted(set(options) - self.allowed_options)
        if bad:
            allowed = ", ".join(sorted(self.allowed_options)) or "none"
            raise TenantNotReady(f"option(s) {', '.join(bad)} are not allowed for tenant {self.name} "
                                 f"(allowed: {allowed})")

    def check_ready(self) -> dict[str, str]:
        """The repository is a git repository with a commit and the credentials file reads: return its values."""
        cred = Path(self.credentials)
        values = operator_file(cred, f"the credentials file of tenant {self.name}", TenantNotReady)
        keys = TOKEN_KEYS[:3]  # what the model gateway can swap in (Bedrock and Vertex are not forwarded)
        if not any(values.get(k) for k in keys):
            raise TenantNotReady(f"the credentials file of tenant {self.name} ({cred}) has none of "
                                 f"{', '.join(keys)}: add one", public=f"tenant {self.name} has no model "
                                 "credentials on this service")
        check_git_repo(self.repo, self.name)
        return values


def not_ready(tenants: list[Tenant]) -> list[tuple[str, str]]:
    """The tenants that cannot run here now, each with the operator's sentence (what is wrong, where, the fix)."""
    found = []
    for tenant in tenants:
        try:
            tenant.check_ready()
        except TenantNotReady as e:
            found.append((tenant.name, str(e)))
    return found


def _egress(entry: _TenantEntry, path: Path, presets: Mapping[str, Sequence[object]]) -> tuple[Egress,
                                                                                               tuple[Rule, ...]]:
    """The sandbox's network and the allow-list, from the tenant's ``egress``."""
    value = entry.egress
    if value in ("none", "closed"):
        return "closed", ()
    if value == "open":
        return "open", ()
    if isinstance(value, str) and value not in presets:
        raise TenantError(f"tenant {entry.name} in {path} has egress = {value!r}: write \"none\", \"open\", a "
                          f"preset's name ({', '.join(sorted(presets)) or 'none configured'}) or a list of hosts")
    try:
        return "proxied", parse_rules(value, presets)
    except RuleError as e:
        raise TenantError(f"tenant {entry.name} in {path}: {e}") from None


def _parse(path: Path, presets: Mapping[str, Sequence[object]] | None = None) -> list[Tenant]:
    presets = DEFAULT_PRESETS if presets is None else presets
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TenantError(f"cannot read tenants file {path}: {e.strerror or e}") from None
    try:
        data: Any = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise TenantError(f"tenants file {path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {e}")
    entries = data.get("tenant", data.get("tenants")) if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise TenantError(f"tenants file {path} must hold a list of tenants ([[tenant]] tables in TOML)")
    out: list[Tenant] = []
    names: set[str] = set()
    hashes: set[str] = set()
    repos: dict[str, str] = {}  # resolved repository and object store -> the tenant that named it
    for i, item in enumerate(entries, 1):
        secret = sorted(k for k in (item if isinstance(item, dict) else {}) if k in _SECRET_KEYS)
        if secret:
            raise TenantError(f"tenant #{i} in {path} has `{secret[0]}`: a secret never goes in the tenants file; put "
                              "it alone in a file beside the credentials and name that file in "
                              f"`{_SECRET_KEYS[secret[0]]}`")
        try:
            entry = msgspec.convert(item, _TenantEntry)
        except msgspec.ValidationError as err:
            raise TenantError(f"tenant #{i} in {path} is invalid: {explain(err, _TenantEntry)}") from None
        if (entry.token is None) == (entry.token_sha256 is None):
            raise TenantError(f"tenant {entry.name} in {path} needs exactly one of `token_sha256` or `token`")
        digest = entry.token_sha256 or hash_token(entry.token or "")
        if entry.name in names:
            raise TenantError(f"tenant {entry.name} appears twice in {path}")
        if digest in hashes:
            raise TenantError(f"tenant {entry.name} in {path} shares its token with another tenant; give each its own")
        unknown = sorted(set(entry.server_tools) - set(SERVER_TOOLS))
        if unknown:
            raise TenantError(f"tenant {entry.name} in {path} lists unknown server tool(s) {', '.join(unknown)} in "
                              f"`server_tools`; use only {', '.join(SERVER_TOOLS)}")
        if entry.verify is not None:
            try:
                check_verify(entry.verify)
            except SpecError as e:
                raise TenantError(f"`verify` of tenant {entry.name} in {path}: {e}") from None
        egress, allow = _egress(entry, path, presets)
        names.add(entry.name)
        hashes.add(digest)
        base = path.parent
        repo = _own_repo(base / Path(entry.repo).expanduser(), entry.name, path, repos)
        cred = str((base / Path(entry.credentials).expanduser()).resolve())
        webhook = push = None
        hook_file, push_file = entry.webhook_secret_file, entry.push_credentials_file
        if _paired(entry.name, path, "webhook_url", entry.webhook_url, "webhook_secret_file", hook_file):
            assert entry.webhook_url is not None and hook_file is not None
            _check_url(entry.name, path, "webhook_url", entry.webhook_url, plain_http=True)
            webhook = Webhook(entry.webhook_url, str((base / Path(hook_file).expanduser()).resolve()))
        if entry.push_url is not None and entry.push_url.startswith("ssh://"):
            push = _ssh_push(entry, path)
        elif _paired(entry.name, path, "push_url", entry.push_url, "push_credentials_file", push_file):
            assert entry.push_url is not None and push_file is not None
            _check_url(entry.name, path, "push_url", entry.push_url, plain_http=False)
            push = PushTarget(entry.push_url, str((base / Path(push_file).expanduser()).resolve()))
        if push is None and (entry.push_ssh_key_file or entry.push_known_hosts_file):
            raise TenantError(f"tenant {entry.name} in {path} sets `push_ssh_key_file`/`push_known_hosts_file` "
                              "without an ssh:// `push_url`; set the URL or leave them out")
        out.append(Tenant(name=entry.name, token_hash=digest, repo=repo, credentials=cred, quota=entry.quota,
                          allowed_options=frozenset(entry.allowed_options), max_queued=entry.max_queued,
                          requests_per_s=entry.requests_per_s, request_burst=entry.request_burst,
                          park_after_s=entry.park_after_s, egress=egress, egress_allow=allow,
                          verify=entry.verify, verify_timeout_s=entry.verify_timeout_s,
                          schedule_min_interval_s=entry.schedule_min_interval_s,
                          budget_usd=entry.budget_usd, server_tools=frozenset(entry.server_tools),
                          webhook=webhook, push=push, image=entry.image,
                          setup=(entry.setup,) if isinstance(entry.setup, str) else tuple(entry.setup),
                          setup_secrets_file=str((base / Path(entry.setup_secrets_file).expanduser()).resolve())
                          if entry.setup_secrets_file else None, devcontainer=entry.devcontainer))
    return out


# secrets people may be tempted to write into the tenants file → the setting that names their file instead
_SECRET_KEYS = {"webhook_secret": "webhook_secret_file", "push_token": "push_credentials_file",
                "push_password": "push_credentials_file"}
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _ssh_push(entry: _TenantEntry, path: Path) -> PushTarget:
    """An ssh:// push_url with its deploy key and pinned host keys (both required: the server's key is never taken
    on first sight); a user in the URL is fine (``git@``), a password never."""
    assert entry.push_url is not None
    where = f"`push_url` of tenant {entry.name} in {path}"
    url = entry.push_url
    if len(url) > 2000 or any(c.isspace() or ord(c) < 32 for c in url):
        raise TenantError(f"{where} is not a URL (too long, or it holds spaces or control characters)")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as e:
        raise TenantError(f"{where} is not a valid URL ({e})") from None
    if not parts.hostname or not parts.path.strip("/") or parts.password is not None or parts.hostname[0] == "-":
        raise TenantError(f"{where} must be ssh://[user@]host[:port]/path with no password, not {url[:100]!r}")
    if entry.push_credentials_file is not None:
        raise TenantError(f"tenant {entry.name} in {path} sets `push_credentials_file` for an ssh push_url; an ssh "
                          "push uses `push_ssh_key_file` and `push_known_hosts_file` instead")
    missing = [k for k in ("push_ssh_key_file", "push_known_hosts_file") if getattr(entry, k) is None]
    if missing:
        raise TenantError(f"tenant {entry.name} in {path} has an ssh push_url without `{missing[0]}`: the deploy "
                          "key's file and a known_hosts file holding the server's host key (`ssh-keyscan` it once, "
                          "check it) are both needed")
    assert entry.push_ssh_key_file is not None and entry.push_known_hosts_file is not None
    base = path.parent
    return PushTarget(url, ssh_key_file=str((base / Path(entry.push_ssh_key_file).expanduser()).resolve()),
                      known_hosts_file=str((base / Path(entry.push_known_hosts_file).expanduser()).resolve()))


def _paired(tenant: str, path: Path, url_key: str, url: str | None, file_key: str, file: str | None) -> bool:
    """Both settings of a pair, or neither; TenantError naming the missing one."""
    if (url is None) != (file is None):
        have, missing = (url_key, file_key) if file is None else (file_key, url_key)
        raise TenantError(f"tenant {tenant} in {path} sets `{have}` without `{missing}`; set both or neither")
    return url is not None


def _check_url(tenant: str, path: Path, key: str, url: str, *, plain_http: bool) -> None:
    """An http(s) URL with a host and no credentials in it (plain http for a push only to a loopback host)."""
    where = f"`{key}` of tenant {tenant} in {path}"
    if len(url) > 2000 or any(c.isspace() or ord(c) < 32 for c in url):
        raise TenantError(f"{where} is not a URL (too long, or it holds spaces or control characters)")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as e:
        raise TenantError(f"{where} is not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise TenantError(f"{where} must be an http:// or https:// URL with a host, not {url[:100]!r}")
    if parts.username is not None or parts.password is not None:
        secret = "webhook_secret_file" if key == "webhook_url" else "push_credentials_file"
        raise TenantError(f"{where} holds a user name or password; take it out of the URL and put the secret in "
                          f"`{secret}`")
    if parts.scheme == "http" and not plain_http and host not in _LOOPBACK:
        raise TenantError(f"{where} is plain http to {host}, where the push credential would travel in the clear; "
                          "use https")


def _own_repo(given: Path, tenant: str, path: Path, seen: dict[str, str]) -> str:
    """The tenant's repository, resolved; TenantError when it is reached through a symlink or is (or shares the
    object store of) another tenant's. A repository that is not there yet is checked when a run needs it."""
    absolute = Path(os.path.abspath(given))
    repo = absolute.resolve()
    if repo != absolute:
        raise TenantError(f"the repository of tenant {tenant} in {path} ({given}) goes through a symlink (to "
                          f"{repo}); name the repository's real path")
    keys = [str(repo)]
    if (repo / ".git").exists():
        from sandbox.worktree import objects_dir

        try:
            keys.append(str(objects_dir(repo)))
        except Exception:  # noqa: BLE001 - not a usable repository yet: a run's start says so
            pass
    for key in keys:
        other = seen.get(key)
        if other is not None:
            what = "repository" if key == str(repo) else f"git object store ({key})"
            raise TenantError(f"tenants {other} and {tenant} in {path} share a {what}; each tenant needs a "
                              "repository of its own")
        seen[key] = tenant
    return str(repo)


class Tenants:
    """The tenants file, re-read when its modification time changes."""

    def __init__(self, path: str | Path, *, on_reload_error: Callable[[str], None] | None = None,
                 on_reload: Callable[[list[Tenant]], None] | None = None,
                 presets: Mapping[str, Sequence[object]] | None = None) -> None:
        self.path = Path(path)
        self.presets = presets  # the egress presets a tenant may name (``ServiceConfig.presets``)
        self._lock = threading.Lock()
        self._on_error = on_reload_error
        self._on_reload = on_reload  # told the tenants after each good read: the operator hears of a broken one
        self._stamp = self._mtime()
        self._tenants = _parse(self.path, presets)

    def _mtime(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _fresh(self) -> list[Tenant]:
        stamp = self._mtime()
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    try:
                        self._tenants = _parse(self.path, self.presets)
                    except TenantError as e:
                        if self._on_error is not None:
                            self._on_error(f"{e}; the last good tenants file stays in force (tenants, tokens and "
                                           "budgets) until this one is fixed")
                    else:
                        if self._on_reload is not None:
                            self._on_reload(list(self._tenants))
                    self._stamp = stamp
        return self._tenants

    def all(self) -> list[Tenant]:
        return list(self._fresh())

    def get(self, name: str) -> Tenant | None:
        return next((t for t in self._fresh() if t.name == name), None)

    def authenticate(self, token: str) -> Tenant | None:
        """The tenant whose token this is; every tenant is compared, in constant time each."""
        digest = hash_token(token)
        found = None
        for t in self._fresh():
            if hmac.compare_digest(t.token_hash, digest):
                found = t
        return found
