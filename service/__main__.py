"""``python -m service``: serve the API under uvicorn; ``python -m service hash-token`` for the tenants file.

    python -m service [--config FILE] [--host HOST] [--port PORT]   # options before or after a subcommand
    python -m service --version
    python -m service hash-token [TOKEN]     # prints the sha256 to put in token_sha256 (TOKEN or stdin)
    python -m service backup FILE            # a consistent copy of the registry (SQLite online backup), live
    python -m service restore FILE           # with the service stopped (refused while anything has the registry
                                             # open): that copy back, the old file kept beside it
    python -m service migrate                # the registry's schema brought to this version (the service does it
                                             # at start too); SQLite file or database_url
    python -m service gateway                # the model gateway alone (``service.gateway.daemon``): the service starts
                                             # it beside itself (``--config -``: its config as JSON on stdin)

Config comes from ``--config`` or ``$FLOWER_SERVICE_CONFIG``, then ``FLOWER_SERVICE_*`` variables,
then the flags. ``--port 0`` picks a free port; the log line ``service.listening`` names it.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from pathlib import Path

from flower import __version__

from .config import CONFIG_ENV, ENV_PREFIX, ServiceConfig, ServiceConfigError, config_of_json, load_config
from .tenants import TenantError, hash_token

MAX_HEAD = 32 * 1024  # bytes of request line + headers
KEEP_ALIVE_S = 65  # an idle connection's life: longer than a client's (httpx 5 s) or a load balancer's (often 60 s)
SUBCOMMANDS = {  # name → (arguments, what it does): `--help` lists every one
    "hash-token": ("[TOKEN]", "print the sha256 of a tenant token, for token_sha256 in the tenants file "
                              "(TOKEN, or a line on stdin)"),
    "backup": ("FILE", "a consistent copy of the live registry (SQLite online backup), checked, mode 0600"),
    "restore": ("FILE", "with the service and its gateway stopped (refused, naming them, while they run): put that "
                        "copy back; the old registry is kept beside it"),
    "migrate": ("", "bring the registry's schema (the SQLite file, or database_url's PostgreSQL) to this version"),
    "gateway": ("", "serve the model gateway alone: the runs' model calls, from the grants in the registry (the "
                    "service starts one beside itself unless gateway_process says otherwise)"),
}


def _options(p: argparse.ArgumentParser, *, sub: bool) -> None:
    """The service's options, before or after a subcommand: on a subcommand they default to SUPPRESS, so either
    position sets them."""
    default = argparse.SUPPRESS if sub else None
    p.add_argument("--config", default=default, metavar="FILE", help=f"TOML/JSON config file (default: ${CONFIG_ENV})")
    p.add_argument("--host", default=default, help="address to listen on (default from config: 127.0.0.1)")
    p.add_argument("--port", default=default, type=int, help="port to listen on; 0 picks a free one")
    p.add_argument("--log-format", default=default, choices=["json", "console", "auto"],
                   help="auto (default): key=value on a terminal, JSON lines otherwise")


def _parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  python -m service {name} {args}\n      {what}"
                        for name, (args, what) in SUBCOMMANDS.items())
    p = argparse.ArgumentParser(prog="python -m service", formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="flower service: runs asks in sandboxes. Without a subcommand it "
                                            "serves the API. Options go before or after a subcommand.",
                                epilog=f"subcommands:\n{listing}")
    p.add_argument("--version", action="version", version=f"flower service {__version__}")
    _options(p, sub=False)
    verbs = p.add_subparsers(dest="command", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, (usage, what) in SUBCOMMANDS.items():
        v = verbs.add_parser(name, help=what, description=what)
        if name == "hash-token":
            v.add_argument("token", nargs="?", metavar="TOKEN", help="the token (else a line on stdin)")
        elif name == "gateway":
            v.add_argument("--parent", type=int, default=None, metavar="PID",
                           help="end once process PID is gone and no run is active (the service passes its own)")
        elif name != "migrate":
            v.add_argument("file", metavar="FILE", help="the backup file to write" if name == "backup"
                           else "the backup file to restore")
        _options(v, sub=True)
    return p


def _raw_token(argv: list[str]) -> list[str]:
    """``hash-token -x…``: a token may start with a dash; it is the token, not a flag."""
    if "hash-token" in argv:
        i = argv.index("hash-token") + 1
        if i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-h", "--help", "--"):
            return [*argv[:i], "--", *argv[i:]]
    return argv


def _config(args: argparse.Namespace) -> ServiceConfig:
    """The config as the service finds it: ``--config`` (either side of the verb), else ``$FLOWER_SERVICE_CONFIG``,
    then the ``FLOWER_SERVICE_*`` variables and the flags; none of these at all is said in one sentence."""
    if args.config is None and not os.environ.get(CONFIG_ENV) and not os.environ.get(ENV_PREFIX + "DATA_DIR"):
        raise ServiceConfigError(f"no service config: give --config FILE (before or after the subcommand) or set "
                                 f"{CONFIG_ENV}=FILE")
    return load_config(args.config, host=args.host, port=args.port, log_format=args.log_format)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(_raw_token(argv))
    if args.command == "hash-token":
        token = args.token if args.token is not None else sys.stdin.readline().strip()
        if not token:
            print("flower-service: give the token as an argument or on stdin", file=sys.stderr)
            return 2
        print(hash_token(token))
        return 0
    if args.command in ("backup", "restore"):
        return _backup_or_restore(args)
    if args.command == "migrate":
        return _migrate(args)
    if args.command == "gateway":
        return _gateway(args)
    try:
        config = _config(args)
    except ServiceConfigError as e:
        print(f"flower-service: {e}", file=sys.stderr)
        return 2

    import uvicorn

    from .app import create_app
    from .logging import configure_logging, get_logger

    configure_logging(config.log_format, level=config.log_level)
    taken = _cannot_listen(config.host, config.port)
    if taken is not None:
        get_logger("flower.service").error("service.cannot_start", error=taken)
        print(f"flower-service: {taken}", file=sys.stderr)
        return 2
    _raise_nofile()
    try:
        app = create_app(config)
        os.umask(0o077)  # after the image build (its context must stay readable): what the service creates is its own
        # its name before it serves or starts anything: a live process holding it refuses this one (service.leases)
        app.state.service.leases.claim()
    except (TenantError, ValueError, RuntimeError, OSError) as e:
        get_logger("flower.service").error("service.cannot_start", error=str(e))
        print(f"flower-service: {e}", file=sys.stderr)
        return 2

    # h11 with a cap on an incomplete request head: a 10 MB header is refused (431/400), never read whole. With
    # uvicorn's 5 s keep-alive (httpx's too) the server closed an idle connection just as a client sent on it, and
    # the client got "Server disconnected without sending a response".
    server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_config=None,
                                           access_log=False, timeout_graceful_shutdown=3, lifespan="on",
                                           http="h11", h11_max_incomplete_event_size=MAX_HEAD,
                                           timeout_keep_alive=KEEP_ALIVE_S))
    original = server.startup

    async def startup(sockets: list[socket.socket] | None = None) -> None:
        await original(sockets)
        for srv in getattr(server, "servers", []) or []:
            for sock in srv.sockets:
                host, port = sock.getsockname()[:2]
                get_logger("flower.service").info("service.listening", host=host, port=port,
                                                  url=f"http://{host}:{port}")

    server.startup = startup  # type: ignore[method-assign]
    server.run()
    return 0 if server.started else 1


def _cannot_listen(host: str, port: int) -> str | None:
    """Why the API could not listen on ``host:port`` (a port in use, one that needs root), in one sentence; None
    when it can. Tried before anything starts, so the person reads this, not the server's log line."""
    if port == 0:
        return None
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"cannot listen on {host}: {e.strerror}; give an address of this machine with --host"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no owner
            try:
                probe.bind(address)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return (f"port {port} on {host} is in use by another process: stop it, or give another with "
                            f"--port (0 picks a free one)")
                return f"cannot listen on {host}:{port} ({e.strerror}): give another --host or --port"
    return None


def _gateway(args: argparse.Namespace) -> int:
    """``gateway``: serve the model gateway until SIGTERM; 0 also when another gateway serves the data dir."""
    import asyncio

    from .errors import RegistryDamaged, RegistryLocked, RegistryNewer, RegistryUnreachable
    from .gateway.daemon import serve_gateway
    from .logging import configure_logging, get_logger

    try:
        config = config_of_json(sys.stdin.buffer.read()) if args.config == "-" else _config(args)
    except ServiceConfigError as e:
        print(f"flower-service: {e}", file=sys.stderr)
        return 2
    configure_logging(config.log_format, level=config.log_level)
    _raise_nofile()
    os.umask(0o077)
    try:
        return asyncio.run(serve_gateway(config, parent=args.parent))
    except (TenantError, RegistryDamaged, RegistryNewer, RegistryUnreachable, RegistryLocked, OSError) as e:
        get_logger("flower.service").error("gateway.cannot_start", error=str(e))
        print(f"flower-service: {e}", file=sys.stderr)
        return 2


def _raise_nofile() -> None:
    """Every connection is an fd: the soft limit (often 1024) goes up to the hard one, so that the gateway's
    per-run bounds, not the process's limit, decide when a connection is turned away."""
    import resource

    from .logging import get_logger

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new = soft if hard == resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ValueError, OSError) as e:
        get_logger("flower.service").warning("service.nofile_unchanged", soft=soft, hard=hard, error=str(e))
        return
    get_logger("flower.service").info("service.nofile", old=soft, new=new)


def _backup_or_restore(args: argparse.Namespace) -> int:
    """``backup FILE``: a consistent copy of the live registry. ``restore FILE``: that copy back in place (service
    stopped), the damaged registry moved aside, never deleted."""
    from .registry.backup import RegistryDamaged, RegistryInUse, backup, restore

    try:
        config = _config(args)
        if config.database_url:
            print(f"flower-service: the registry is in PostgreSQL (database_url): `{args.command}` copies a SQLite "
                  f"registry only; use pg_dump to back it up and pg_restore (or psql) to restore it", file=sys.stderr)
            return 2
        if args.command == "backup":
            size = backup(config.db_path, Path(args.file))
            print(f"backed up {config.db_path} to {Path(args.file).resolve()} ({size} bytes)")
        else:
            done = restore(config.db_path, Path(args.file))
            aside = ("" if done.kept is None else f"; the damaged registry was moved to {done.kept}" if done.damaged
                     else f"; the registry it replaced was sound and is kept as {done.kept}")
            print(f"restored {config.db_path} from {Path(args.file).resolve()}{aside}")
    except (ServiceConfigError, RegistryDamaged, RegistryInUse, OSError) as e:
        print(f"flower-service: {e}", file=sys.stderr)
        return 2
    return 0


def _migrate(args: argparse.Namespace) -> int:
    """``migrate``: open the registry the config names, which migrates it (once, under the lock on PostgreSQL)."""
    from .errors import RegistryDamaged, RegistryLocked, RegistryNewer, RegistryUnreachable
    from .registry import open_registry

    try:
        registry = open_registry(_config(args))
    except (ServiceConfigError, RegistryDamaged, RegistryNewer, RegistryUnreachable, RegistryLocked, OSError) as e:
        print(f"flower-service: {e}", file=sys.stderr)
        return 2
    if registry.migrated_from is None:
        print(f"the registry {registry.where} is at revision {registry.revision} already")
    else:
        print(f"migrated the registry {registry.where} from {registry.migrated_from} to {registry.revision}")
    registry.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
