"""``flower demo``: one real-CLI session against the offline scripted model — does the machinery work here."""

from __future__ import annotations

from pathlib import Path


async def demo() -> int:
    """One real-CLI session, offline: the scripted model asks for a Write, the file appears."""
    import tempfile

    from ..core.agent import AgentSpec, build_options
    from ..testing import Rule, ScriptedModel, say, tool

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
