"""The shell classifier: is a Bash command ephemeral — does its output describe a moment, not a fact?

``is_ephemeral`` is shared by two callers on purpose: ``delegate_guard(allow_glance=True)``
lets the coordinator run exactly these commands itself, and the store's expiry pass expires
exactly their results on resume (``flower.store.ephemeral``). The set allowed must equal the
set that expires: a stale ``git status`` that never expires misleads forever; an ``ls`` that
is not allowed costs a whole subagent.

The check is conservative: anything it cannot prove read-only is *not* ephemeral.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

__all__ = ["is_ephemeral"]


# ---------------------------------------------------------------------------
# Lexing: words and operators, quote-aware, so `grep "a|b"` is one segment.
# ---------------------------------------------------------------------------

_SUBSTITUTION = re.compile(r"\$\(|`|<\(|>\(")
_OPERATORS = (  # longest first
    "&&", "||", "|&", ";;", "&>>", "&>", ">>", ">&", ">|", "<<<", "<<", "<&", "<>",
    "|", "&", ";", ">", "<", "(", ")",
)
_OP_CHARS = frozenset("&|;<>()")
_SEPARATORS = frozenset({"&&", "||", "|&", "|", ";"})
_REDIRECTS = frozenset({"&>>", "&>", ">>", ">&", ">|", "<<<", "<<", "<&", "<>", ">", "<"})


class _Unparsable(Exception):
    """The command is outside the shell subset we can judge (so: not ephemeral)."""


def _lex(cmd: str) -> list[tuple[str, str]]:
    """Split into ("w", word) and ("op", operator) tokens; quotes removed from words.

    A digit-only word glued to a redirection becomes its fd prefix (``2>`` → op ``2>``).
    Newlines are ``;``.
    """
    out: list[tuple[str, str]] = []
    word: list[str] = []
    in_word = False
    quoted = False
    i, n = 0, len(cmd)

    def flush() -> None:
        nonlocal word, in_word, quoted
        if in_word:
            out.append(("w", "".join(word)))
        word, in_word, quoted = [], False, False

    while i < n:
        c = cmd[i]
        if c in " \t":
            flush()
            i += 1
        elif c == "\n":
            flush()
            out.append(("op", ";"))
            i += 1
        elif c == "#" and not in_word:
            while i < n and cmd[i] != "\n":
                i += 1
        elif c == "\\":
            if i + 1 < n and cmd[i + 1] != "\n":
                word.append(cmd[i + 1])
                in_word = True
            i += 2
        elif c == "'":
            end = cmd.find("'", i + 1)
            if end < 0:
                raise _Unparsable("unterminated single quote")
            word.append(cmd[i + 1 : end])
            in_word, quoted = True, True
            i = end + 1
        elif c == '"':
            j = i + 1
            buf: list[str] = []
            while j < n and cmd[j] != '"':
                if cmd[j] == "\\" and j + 1 < n and cmd[j + 1] in '"\\$`\n':
                    buf.append(cmd[j + 1])
                    j += 2
                else:
                    buf.append(cmd[j])
                    j += 1
            if j >= n:
                raise _Unparsable("unterminated double quote")
            word.append("".join(buf))
            in_word, quoted = True, True
            i = j + 1
        else:
            op = next((o for o in _OPERATORS if cmd.startswith(o, i)), None) if c in _OP_CHARS else None
            if op is None:
                word.append(c)
                in_word = True
                i += 1
                continue
            fd = ""
            glued = in_word and not quoted and "".join(word).isdigit()
            if op in _REDIRECTS and glued:
                fd = "".join(word)
                word, in_word = [], False
            flush()
            out.append(("op", fd + op))
            i += len(op)
    flush()
    return out


_DEVNULL = "/dev/null"
_TO_FILE = frozenset({"&>", "&>>", ">&", ">", ">>", "<", ">|"})


def _strip_safe_redirections(tokens: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Drop ``N>&M`` and redirections to/from /dev/null; anything else stays visible."""
    kept: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        base = text.lstrip("0123456789") if kind == "op" else ""
        if kind == "op" and base in _REDIRECTS:
            target = tokens[i + 1] if i + 1 < len(tokens) else None
            if target is not None and target[0] == "w":
                if base in (">&", "<&") and target[1].isdigit():
                    i += 2
                    continue
                if base in _TO_FILE and target[1] == _DEVNULL:
                    i += 2
                    continue
        kept.append(tokens[i])
        i += 1
    return kept


# ---------------------------------------------------------------------------
# Per-verb rules. A rule returns True when the arguments keep the command read-only.
# ---------------------------------------------------------------------------

_BLOCKED_VERBS = frozenset({"xargs", "exec", "eval", "source", ".", "tee", "sudo", "su"})
_SAFE_ENV_ASSIGN = re.compile(r"^(LC_[A-Z]+|LANG|LANGUAGE|TZ|NO_COLOR|COLUMNS|LINES|TERM)=")


def _positionals(args: list[str], takes_value: frozenset[str] = frozenset()) -> list[str]:
    """Arguments that are not options nor option values (``--`` ends options)."""
    pos: list[str] = []
    skip = False
    ended = False
    for a in args:
        if skip:
            skip = False
            continue
        if ended or not a.startswith("-") or a == "-":
            pos.append(a)
        elif a == "--":
            ended = True
        elif a in takes_value:
            skip = True
    return pos


def _env(args: list[str]) -> bool:
    # `env cmd` runs cmd; only the listing forms are read-only.
    return all(a in ("-0", "--null") for a in args)


def _date(args: list[str]) -> bool:
    if any(a.startswith(("--set", "-s")) for a in args):
        return False
    pos = _positionals(args, frozenset({"-d", "--date", "-r", "--reference", "-f", "--file"}))
    return all(p.startswith("+") for p in pos)


_HOSTNAME_OK = frozenset({
    "-f", "-i", "-I", "-s", "-d", "-A", "-a", "-V", "-h", "--fqdn", "--long", "--ip-address",
    "--all-ip-addresses", "--short", "--domain", "--all-fqdns", "--alias", "--version", "--help",
})


def _hostname(args: list[str]) -> bool:
    return all(a in _HOSTNAME_OK for a in args)


def _top(args: list[str]) -> bool:
    # Bare (interactive) top never returns, nor does batch mode without an iteration count:
    # only `top -b -n N` (or `-bn1`) prints and exits.
    flags = "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))
    return "b" in flags and "n" in flags


def _command(args: list[str]) -> bool:
    # `command -v x` looks up; `command x` runs x.
    return bool(args) and args[0] in ("-v", "-V")


_FIND_WRITES = frozenset(
    {"-delete", "-ok", "-okdir", "-exec", "-execdir", "-fprint", "-fprint0", "-fprintf", "-fls"}
)


def _find(args: list[str]) -> bool:
    return not any(a in _FIND_WRITES for a in args)


def _sort(args: list[str]) -> bool:
    for a in args:
        if a.startswith(("--output", "--compress-program")):
            return False
        if a.startswith("-") and not a.startswith("--") and "o" in a[1:]:
            return False
    return True


def _uniq(args: list[str]) -> bool:
    # `uniq in out` writes out.
    return len(_positionals(args, frozenset({"-f", "-s", "-w"}))) <= 1


_SED_S_CMD = re.compile(r"s(.)(?:\\.|(?!\1).)*\1(?:\\.|(?!\1).)*\1([A-Za-z0-9]*)")
_SED_Y_CMD = re.compile(r"y(.)(?:\\.|(?!\1).)*\1(?:\\.|(?!\1).)*\1")
_SED_ADDR_RE = re.compile(r"(?:\\(.)|/)(?:\\.|[^/\n])*/I?M?")


def _sed_script_ok(script: str) -> bool:
    """Reject sed scripts that write files (``w``/``W``, ``s///w``) or run commands (``e``)."""
    for m in _SED_S_CMD.finditer(script):
        if "w" in m.group(2) or "e" in m.group(2):
            return False
    rest = _SED_S_CMD.sub("s", script)
    rest = _SED_Y_CMD.sub("y", rest)
    rest = _SED_ADDR_RE.sub("", rest)
    for piece in re.split(r"[;\n{}]", rest):
        piece = piece.lstrip("0123456789$,~+! \t")
        if piece[:1] in ("w", "W", "e"):
            return False
    return True


def _sed(args: list[str]) -> bool:
    scripts: list[str] = []
    i = 0
    positional: list[str] = []
    while i < len(args):
        a = args[i]
        if a.startswith("--in-place") or a in ("-f", "--file") or a.startswith("--file="):
            return False
        if a == "-e" or a == "--expression":
            if i + 1 >= len(args):
                return False
            scripts.append(args[i + 1])
            i += 2
            continue
        if a.startswith("--expression="):
            scripts.append(a.split("=", 1)[1])
        elif a.startswith("-") and not a.startswith("--") and len(a) > 1:
            flags = a[1:]
            if "i" in flags or "f" in flags:
                return False
            if "e" in flags:  # -ne 'script' or -e'script'
                tail = flags[flags.index("e") + 1 :]
                if tail:
                    scripts.append(tail)
                elif i + 1 < len(args):
                    scripts.append(args[i + 1])
                    i += 1
                else:
                    return False
        elif not a.startswith("-"):
            positional.append(a)
        i += 1
    if not scripts and positional:
        scripts.append(positional[0])
    return all(_sed_script_ok(s) for s in scripts)


_AWK_BAD = re.compile(r"\bsystem\s*\(|\|\s*getline|\bprintf?\b[^;{}]*[>|]|\|&")
_AWK_UNSAFE = frozenset({"-f", "--file", "-i", "--include", "-l", "--load", "-E", "--exec"})


def _awk(args: list[str]) -> bool:
    program: str | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in _AWK_UNSAFE or a.startswith(("--file=", "--include=", "--load=", "--exec=", "-f")):
            return False
        if a in ("-v", "-F", "--assign", "--field-separator"):
            i += 2
            continue
        if not a.startswith("-") and program is None:
            program = a
        i += 1
    return program is not None and not _AWK_BAD.search(program)


def _rg(args: list[str]) -> bool:
    return not any(a == "--pre" or a.startswith("--pre=") for a in args)


def _tree(args: list[str]) -> bool:
    return not any(a == "-o" for a in args)


def _file(args: list[str]) -> bool:
    return not any(a in ("-C", "--compile") for a in args)


def _docker(args: list[str]) -> bool:
    if not args:
        return False
    if args[0] in ("ps", "images", "logs", "inspect", "version", "info"):
        return True
    return len(args) > 1 and (args[0], args[1]) in {
        ("container", "ls"), ("container", "ps"), ("container", "logs"), ("container", "inspect"),
        ("image", "ls"), ("image", "inspect"),
    }


_KUBECTL_VALUE = frozenset(
    {"-n", "--namespace", "--context", "--kubeconfig", "--cluster", "--user", "-s", "--server"}
)
_KUBECTL_READ = frozenset({"get", "describe", "logs", "version", "explain", "api-resources"})


def _kubectl(args: list[str]) -> bool:
    pos = _positionals(args, _KUBECTL_VALUE)
    return bool(pos) and pos[0] in _KUBECTL_READ


# ---- git -------------------------------------------------------------------

_GIT_GLOBAL_VALUE = frozenset({"-C"})
_GIT_GLOBAL_FLAG = frozenset(
    {"--no-pager", "-P", "--no-optional-locks", "--bare", "--literal-pathspecs", "--no-replace-objects"}
)
_GIT_DESTRUCTIVE = ("--force", "--hard", "--prune", "--output", "--delete", "--mirror")
_GIT_READ = frozenset({
    "status", "diff", "log", "show", "rev-parse", "ls-files", "blame", "describe", "shortlog",
    "ls-tree", "cat-file", "show-ref", "grep", "rev-list", "merge-base", "for-each-ref", "name-rev",
    "count-objects", "whatchanged", "cherry", "annotate", "diff-tree", "diff-files", "diff-index",
})
_LIST_VALUE = frozenset(
    {"--contains", "--no-contains", "--merged", "--no-merged", "--points-at", "--format", "--sort", "--column"}
)
_BRANCH_WRITE = frozenset({
    "-d", "-D", "-m", "-M", "-c", "-C", "-f", "-u", "--delete", "--move", "--copy", "--force",
    "--set-upstream-to", "--unset-upstream", "--edit-description", "--track", "--no-track",
})
_TAG_WRITE = frozenset({
    "-d", "-a", "-s", "-u", "-f", "-m", "-F", "-e", "--delete", "--annotate", "--sign",
    "--local-user", "--force", "--message", "--file", "--edit", "--create-reflog",
})
_CONFIG_WRITE = frozenset(
    {"--unset", "--unset-all", "--add", "--replace-all", "--rename-section", "--remove-section", "-e", "--edit"}
)
_CONFIG_READ = frozenset({"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l"})


def _git_list_only(args: list[str], write: frozenset[str], write_chars: str) -> bool:
    """``git branch`` / ``git tag``: listing only — no write flag, names only as --list patterns."""
    for a in args:
        if a in write or (a.startswith("--") and a.split("=", 1)[0] in write):
            return False
        if a.startswith("-") and not a.startswith("--") and not re.fullmatch(r"-n\d*", a):
            if any(ch in write_chars for ch in a[1:]):
                return False
    listing = any(a in ("-l", "--list") for a in args)
    return listing or not _positionals(args, _LIST_VALUE)


def _git_sub(sub: str, args: list[str]) -> bool:
    first = args[0] if args else ""
    if sub in _GIT_READ:
        return True
    if sub == "branch":
        return _git_list_only(args, _BRANCH_WRITE, "dDmMcCfu")
    if sub == "tag":
        return _git_list_only(args, _TAG_WRITE, "dasufmFe")
    if sub == "remote":
        return first in ("", "-v", "--verbose", "show", "get-url")
    if sub == "stash":
        return first in ("list", "show")  # bare `git stash` pushes
    if sub == "reflog":
        return first in ("", "show") or first.startswith("-")
    if sub == "worktree":
        return first == "list"
    if sub == "config":
        if any(a in _CONFIG_WRITE for a in args):
            return False
        return first in ("get", "list") or any(a in _CONFIG_READ for a in args)
    return False


def _git(args: list[str]) -> bool:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a in _GIT_GLOBAL_VALUE:
            i += 2
        elif a in _GIT_GLOBAL_FLAG or a.startswith(("--git-dir=", "--work-tree=")):
            i += 1
        else:
            return False  # -c / --config-env / --exec-path can run arbitrary programs
    if i >= len(args):
        return False
    sub, rest = args[i], args[i + 1 :]
    if any(a.startswith(_GIT_DESTRUCTIVE) for a in rest):
        return False
    return _git_sub(sub, rest)


_READ_ONLY = frozenset({
    # directories and system
    "ls", "pwd", "df", "du", "whoami", "uname", "id", "printenv", "free", "uptime", "nproc", "groups",
    # processes
    "ps", "lsof", "pgrep",
    # viewing files
    "cat", "head", "tail", "wc", "stat",
    # path lookup
    "which", "whereis", "type",
    # text processing
    "grep", "egrep", "fgrep", "jq", "diff", "cut", "tr", "echo", "printf", "basename", "dirname",
    "realpath", "md5sum", "sha256sum", "sha1sum", "true",
})
_RULES: dict[str, Callable[[list[str]], bool]] = {
    "date": _date, "env": _env, "hostname": _hostname, "top": _top, "docker": _docker,
    "kubectl": _kubectl, "file": _file, "find": _find, "tree": _tree, "command": _command,
    "rg": _rg, "sort": _sort, "uniq": _uniq, "awk": _awk, "gawk": _awk, "mawk": _awk, "sed": _sed,
    "git": _git,
}


def _segment_ok(words: list[str]) -> bool:
    while words and "=" in words[0] and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        if not _SAFE_ENV_ASSIGN.match(words[0]):
            return False
        words = words[1:]
    if not words:
        return False
    verb, args = words[0], words[1:]
    if verb in _BLOCKED_VERBS or "/" in verb:
        return False
    if verb in _READ_ONLY:
        return True
    rule = _RULES.get(verb)
    return rule is not None and rule(args)


@lru_cache(maxsize=4096)
def is_ephemeral(cmd: str) -> bool:
    """True when ``cmd`` only reads state that may change later (``git status``, ``ls``…).

    Order: empty → False; command substitution → False; a redirection other than
    ``N>&M`` or to/from /dev/null → False; a lone ``&`` (background) → False; then the
    command is split on ``&&`` ``||`` ``;`` ``|`` and every segment must be a whitelisted,
    read-only verb (with per-verb checks for write forms such as ``sed -i``).
    """
    if not cmd or not cmd.strip():
        return False
    if _SUBSTITUTION.search(cmd):
        return False
    try:
        tokens = _lex(cmd)
    except _Unparsable:
        return False
    tokens = _strip_safe_redirections(tokens)
    ops = [t for k, t in tokens if k == "op"]
    if any(o.lstrip("0123456789") in _REDIRECTS for o in ops):
        return False
    if any(o not in _SEPARATORS for o in ops):  # `&`, `(`, `)`, `;;`
        return False
    segments: list[list[str]] = [[]]
    for kind, text in tokens:
        if kind == "op":
            segments.append([])
        else:
            segments[-1].append(text)
    non_empty = [s for s in segments if s]
    return bool(non_empty) and all(_segment_ok(s) for s in non_empty)
