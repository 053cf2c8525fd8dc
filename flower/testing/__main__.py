"""`python -m flower.testing SCRIPT.py`: serve a script for a demo or a manual run.

SCRIPT.py defines `RULES` (a list of flower.testing.Rule). The command prints the
environment a CLI needs, then serves until interrupted.
"""

from __future__ import annotations

import argparse
import runpy
import sys
import time

from .server import ScriptedModel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flower.testing", description=__doc__.splitlines()[0])
    parser.add_argument("script", help="a Python file that defines RULES")
    args = parser.parse_args(argv)
    try:
        rules = runpy.run_path(args.script)["RULES"]
    except FileNotFoundError:
        print(f"error: no such script: {args.script}", file=sys.stderr)
        return 2
    except KeyError:
        print(f"error: {args.script} does not define RULES (a list of flower.testing.Rule)", file=sys.stderr)
        return 2
    with ScriptedModel(rules) as model:
        for key, value in model.env.items():
            print(f"export {key}={value}")
        print(f"# serving {len(rules)} rules on {model.url}; Ctrl-C to stop", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print(f"# {len(model.conversation)} requests, {len(model.unmatched)} unmatched", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
