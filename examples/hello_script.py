"""A tiny script for `python -m flower.testing examples/hello_script.py`."""
from flower.testing import Rule, say, tool

RULES = [
    Rule(tool("Write", {"file_path": "hello.txt", "content": "hello from the scripted model\n"}), prompt="hello"),
    Rule(say("I wrote hello.txt."), result="hello.txt"),
]
