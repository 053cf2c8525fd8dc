"""`python -m flower.testing SCRIPT.py [-- COMMAND …]`: serve a script, for a demo or a manual run.

SCRIPT.py defines `RULES` (a list of flower.testing.Rule). With a COMMAND after `--`, the command
runs against the scripted model (its environment set) and its exit code is returned; without one,
the environment a CLI needs is printed and the model serves until interrupted. SIGTERM stops it
like Ctrl-C: the model's temporary config folder is removed either way.
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import subprocess
import sys
import time
from types import FrameType

from .server import ScriptedModel


def _stop_on_sigterm() -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(prog="python -m flower.testing", description=(__doc__ or "").splitlines()[0])
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
    _stop_on_sigterm()
    with ScriptedModel(rules) as model:
        if command:
            try:
                return subprocess.run(command, env={**os.environ, **model.env}).returncode
            except FileNotFoundError:
                print(f"error: no such command: {command[0]}", file=sys.stderr)
                return 127
            except KeyboardInterrupt:
                return 130
            finally:
                if model.unmatched:
                    print(f"# {len(model.unmatched)} requests no rule answered", file=sys.stderr)
        try:
            for key, value in model.env.items():
                print(f"export {key}={value}")
            print(f"# serving {len(rules)} rules on {model.url}; Ctrl-C to stop", flush=True)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print(f"# {len(model.conversation)} requests, {len(model.unmatched)} unmatched", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
