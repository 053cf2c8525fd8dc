"""The `flower` command."""

from __future__ import annotations

import argparse
import sys

from . import __version__


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flower", description="Run long-horizon coding agents on claude-agent-sdk.")
    p.add_argument("--version", action="version", version=f"flower {__version__}")
    sub = p.add_subparsers(dest="command")
    sub.add_parser("check", help="check that credentials can be found (no network)")
    sub.add_parser("demo", help="run a session through the real CLI against the offline scripted model")
    return p


async def _demo() -> int:
    """One real-CLI session, offline: the scripted model asks for a Write, the file appears."""
    import tempfile
    from pathlib import Path

    from .core.agent import AgentSpec, build_options
    from .testing import Rule, ScriptedModel, say, tool

    with tempfile.TemporaryDirectory(prefix="flower-demo-") as tmp:
        target = Path(tmp) / "hello.txt"
        rules = [Rule(tool("Write", {"file_path": str(target), "content": "hello from flower\n"}), prompt="hello"),
                 Rule(say(f"I wrote {target.name}."), result=target.name)]
        spec = AgentSpec("demo", "", allowed_tools=["Write"], permission_mode="acceptEdits")
        with ScriptedModel(rules) as model:
            print(f"flower demo: scripted model on {model.url}, workspace {tmp}")
            for msg in await model.collect("hello: write hello.txt", build_options(spec, cwd=tmp)):
                kind = type(msg).__name__
                if kind == "AssistantMessage":
                    for block in msg.content:
                        print(f"  model: {getattr(block, 'text', None) or f'{block.name} {block.input}'}")
                elif kind == "ResultMessage":
                    print(f"  result: {msg.subtype}, {msg.num_turns} turns, session {msg.session_id}")
        ok = target.is_file()
        print(f"flower demo: {target.name} {'written: ' + target.read_text().strip() if ok else 'MISSING'}")
        return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check":
        from .core.credentials import check_credentials, load_dotenv

        load_dotenv()
        try:
            key = check_credentials()
        except RuntimeError as e:
            print(f"flower: {e}", file=sys.stderr)
            return 2
        print(f"flower: credentials found ({key})")
        return 0
    if args.command == "demo":
        import asyncio

        return asyncio.run(_demo())
    _parser().print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
