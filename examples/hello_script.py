"""The whole starter flow, scripted — question → brief → goal → dispatch → the worker writes → verdict.

    python -m flower.testing examples/hello_script.py -- flower -w ~/flower-try "make a hello.py"

Edit RULES like any list: change the files, the verdict (``NOT_ACHIEVED`` sends it round again),
or add your own ``Rule(say(...), role=JUDGE)`` in front.
"""
from flower.testing import ACHIEVED, starter_script

RULES = starter_script(
    "make a hello.py",
    question="Which language?",
    files={"hello.py": "print('hello')\n"},
    verdict=ACHIEVED,
)
