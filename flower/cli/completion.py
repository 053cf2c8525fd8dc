"""``flower completion bash``: a bash completion script made from the command's own parser, so it names every
subcommand and flag there is, and none there is not. The words are written into the script: a Tab runs no
Python. (zsh: ``autoload -U bashcompinit && bashcompinit`` first, then the same script.)"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

__all__ = ["bash_script", "SHELLS"]

SHELLS = ("bash",)
_DIRECTORIES = {"PATH", "DIR"}  # metavars of flags that take a folder


def _nodes(p: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                    argparse.ArgumentParser]]:
    yield path, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _nodes(child, (*path, name))


def _children(p: argparse.ArgumentParser) -> list[str]:
    """The words that may follow: its subcommands, or the choices of its first positional."""
    for a in p._actions:
        if not a.option_strings and a.choices:
            return [str(c) for c in a.choices]
    return []


def _words(values: list[str]) -> str:
    return shlex.quote(" ".join(values))


def bash_script(p: argparse.ArgumentParser, version: str) -> str:
    """The script: ``_flower`` finds the subcommand path in the words typed so far, then offers that command's
    subcommands, its flags (after a ``-``), a flag's choices, or folders and files where a value is a path."""
    paths, values = [], []
    for path, node in _nodes(p):
        key = " ".join(path)
        children = _children(node)
        flags = sorted({o for a in node._actions for o in a.option_strings})
        paths.append(f"        {shlex.quote(key)}) kids={_words(children)}; flags={_words(flags)} ;;")
        for action in node._actions:
            if not action.option_strings or action.nargs == 0:
                continue
            if action.choices:
                offer = f"COMPREPLY=($(compgen -W {_words([str(c) for c in action.choices])} -- \"$cur\"))"
            elif action.metavar in _DIRECTORIES:
                offer = 'COMPREPLY=($(compgen -d -- "$cur"))'
            else:
                offer = "COMPREPLY=()"  # a number, a text: nothing to offer
            for option in action.option_strings:
                values.append(f"        {shlex.quote(key + '|' + option)}) {offer}; return ;;")
    return f"""# bash completion for flower {version}: `source <(flower completion bash)`, or save it as
# ~/.local/share/bash-completion/completions/flower
_flower() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" path="" kids flags i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        _flower_node "$path"
        if [[ " $kids " == *" $w "* ]]; then path="${{path:+$path }}$w"; fi
    done
    _flower_node "$path"
    case "$path|$prev" in
{chr(10).join(values)}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ -n "$kids" ]]; then
        COMPREPLY=($(compgen -W "$kids" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
_flower_node() {{
    kids="" flags=""
    case "$1" in
{chr(10).join(paths)}
    esac
}}
complete -F _flower flower
"""
