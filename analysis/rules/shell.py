"""What a Bash tool call does to docs/adr, from a real parse of its command (tree-sitter-bash).

`command_ops(command)` turns one shell command string into facts `(op, path, recursive)`:

- `run_cli`: a plugin CLI (`adr-NAME`, by bare name or any path) in command position, also behind
  wrappers (`sudo`, `env`, `timeout`, `xargs`, ...) or as the script of an interpreter
  (`bash bin/adr-new`, `python3 .../adr-search`); `path` is the CLI's name;
- `read`, `list`, `search`, `write`, `use`: a path that a command reads, lists, searches or writes,
  or takes as a path argument of a command we do not classify (`use`); `recursive` marks a
  recursive search or listing (`grep -r`, `rg`, `find`, `tree`, `ls -R`, ...), whose target may be
  a parent of docs/adr.

Only paths that mention `docs` are kept (the rule decides what names docs/adr). Walked: pipelines,
`&&`/`||`/`;` lists, subshells, `{ }` groups, `$( )`/backticks/process substitutions (in arguments and
strings too), `if`/`while`/`for`/`case`, functions, `bash -c`/`sh -c` strings and `eval` arguments
(parsed again, 4 levels deep at most), a heredoc fed to `bash`/`sh` (it is the script), `xargs`
and `find -exec` commands, redirections (`>`, `>>`, `&>`: write; `<`: read). Never paths: the
arguments of print-only commands (`echo`, `printf`, `which`, `test`/`[`, ...), heredoc bodies and
here-strings given to anything but a shell, message options (`-m`/`--message`/`--body`/`--title`),
the pattern of a search and the script of `sed`/`awk`/`jq`/`python -c`, and any argument that
contains whitespace. `cd`/`pushd` set the directory relative paths resolve against for the rest
of that list (not across tool calls); `NAME=value` assignments and `for NAME in ...` bind `$NAME`
for later words. An expansion that cannot be resolved stays as written (`$X/adr` names no
docs/adr; `$PWD/docs/adr` does). Syntax errors: tree-sitter recovers; what it parsed is walked,
loose words inside its ERROR nodes are not taken as paths.

`register_shell_table(con)` applies this to every Bash tool_use of the connection's events, once
per distinct command string, giving the `shell_ops` table (run_id, seq, idx, op, path, recursive)
that the axis (a) rule reads; `shell_ops(events)` gives the same table in Polars (for the Polars
twin of the rule).
"""

from __future__ import annotations

import contextlib
import fnmatch
import posixpath
import re
from dataclasses import dataclass, field
from functools import lru_cache

import duckdb
import polars as pl
import tree_sitter_bash
from tree_sitter import Language, Node, Parser

Op = tuple[str, str, bool]

_PARSER = Parser(Language(tree_sitter_bash.language()))
_MAX_DEPTH = 4
_CLI = re.compile(r"adr-[a-z][a-z0-9-]*")
_SHELLS = {"bash", "sh", "zsh", "dash", "ksh"}
_INTERPRETERS = {"python", "python3", "ruby", "node", "perl", "source", "."}
#: Commands that only print, test or change shell state: their arguments are never paths.
_NO_PATHS = {
    "echo", "printf", "which", "type", "whereis", "hash", "true", "false", ":", "basename",
    "dirname", "sleep", "exit", "return", "set", "unset", "shift", "wait", "kill", "alias",
    "read", "let", "test", "[", "[[", "export", "local", "declare", "readonly", "popd", "date",
    "seq", "expr",
}  # fmt: skip
#: Wrappers: the command they run follows their own options.
_WRAPPERS = {"sudo", "nohup", "time", "exec", "nice", "stdbuf", "command", "builtin"}
_MESSAGE_OPTS = {"--message", "--body", "--title", "--subject", "--notes", "--description"}
_MESSAGE_CMDS = {"git", "gh", "hg", "svn", "jj"}
_SEARCH = {"grep", "egrep", "fgrep", "rg", "ag", "ack", "ack-grep", "ripgrep"}
#: Per search tool, short options that take a value.
_SEARCH_VALUE_OPTS = {"grep": "efmABCdD", "rg": "efgtTmABCjME", "ag": "GgmABCf", "ack": "mABC"}
_SEARCH_VALUE_LONG = {
    "--regexp", "--file", "--glob", "--iglob", "--type", "--type-not", "--max-count", "--context",
    "--after-context", "--before-context", "--include", "--exclude", "--exclude-dir", "--max-depth",
    "--threads", "--encoding", "--color", "--colors", "--sort", "--type-add",
}  # fmt: skip
_READERS = {
    "cat", "head", "tail", "less", "more", "bat", "batcat", "wc", "sort", "uniq", "cut", "diff",
    "cmp", "file", "stat", "md5sum", "sha1sum", "sha256sum", "xxd", "od", "strings", "nl", "tac",
    "column", "fold", "fmt", "iconv", "view", "vim", "vi", "nano", "code", "open",
}  # fmt: skip
_WRITERS = {"tee", "rm", "touch", "mkdir", "rmdir", "truncate", "chmod", "chown", "shred", "unlink"}
_COPIERS = {"cp", "mv", "rsync", "ln", "install", "scp"}
_LISTERS = {"ls", "ll", "la", "dir", "exa", "eza", "lsd", "du"}
_EXPANSIONS = {"simple_expansion", "expansion"}
_SPACE = re.compile(r"\s")


@dataclass
class _Ctx:
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    depth: int = 0

    def child(self) -> _Ctx:
        """A subshell: changes of directory and variables do not leak out."""
        return _Ctx(self.cwd, dict(self.env), self.depth)


class _Walker:
    def __init__(self) -> None:
        self.ops: list[Op] = []

    # --- values of words ------------------------------------------------------------------------
    def value(self, node: Node, ctx: _Ctx) -> str:
        """The word's value after quote removal; expansions we can resolve are resolved, others
        stay as written; command substitutions inside it are walked."""
        t = node.type
        if t in ("command_substitution", "process_substitution"):
            self.walk_children(node, ctx.child())
            return "$(...)"
        if t in _EXPANSIONS:
            name = next((c for c in node.named_children if c.type == "variable_name"), None)
            if name is not None and len(node.named_children) == 1:
                var = _text(name)
                if var in ctx.env:
                    return ctx.env[var]
            for c in node.named_children:  # ${X:-$(cmd)}
                if c.type in ("command_substitution", "process_substitution"):
                    self.walk_children(c, ctx.child())
            return _text(node)
        if t == "raw_string":
            return _text(node)[1:-1]
        if t == "ansi_c_string":
            return _text(node)[2:-1]
        if t == "word":
            return re.sub(r"\\(.)", r"\1", _text(node))
        if not node.named_children:
            return _text(node)
        src = node.text or b""
        base, out, pos = node.start_byte, [], 0
        for c in node.named_children:
            out.append(src[pos : c.start_byte - base].decode("utf-8", "replace"))
            out.append(self.value(c, ctx))
            pos = c.end_byte - base
        out.append(src[pos:].decode("utf-8", "replace"))
        s = "".join(out)
        if t == "string" and len(s) >= 2 and s[0] == s[-1] == '"':
            s = s[1:-1]
        return s

    # --- structure ------------------------------------------------------------------------------
    def walk_children(self, node: Node, ctx: _Ctx) -> None:
        for c in node.named_children:
            self.walk(c, ctx)

    def walk(self, node: Node, ctx: _Ctx) -> None:
        t = node.type
        if t == "command":
            self.command(node, ctx)
        elif t == "redirected_statement":
            self.redirected(node, ctx)
        elif t in ("subshell", "pipeline", "command_substitution", "process_substitution"):
            for c in node.named_children:
                self.walk(c, ctx.child())
        elif t == "variable_assignment":
            self.assign(node, ctx)
        elif t == "declaration_command":
            for c in node.named_children:
                if c.type == "variable_assignment":
                    self.assign(c, ctx)
        elif t == "for_statement":
            self.for_loop(node, ctx)
        elif t in ("test_command", "comment", "heredoc_body", "word", "string", "raw_string"):
            return  # tests only check; loose words (in ERROR nodes too) are not paths
        elif t in _EXPANSIONS or t == "concatenation":
            self.value(node, ctx)  # walk substitutions inside, if any
        else:  # program, list, compound_statement, if/while/case, function, do_group, ERROR, ...
            self.walk_children(node, ctx)

    def assign(self, node: Node, ctx: _Ctx) -> None:
        name = node.child_by_field_name("name")
        val = node.child_by_field_name("value")
        v = self.value(val, ctx) if val is not None else ""
        if name is not None and name.type == "variable_name":
            ctx.env[_text(name)] = v

    def for_loop(self, node: Node, ctx: _Ctx) -> None:
        var = node.child_by_field_name("variable")
        values = [self.value(c, ctx) for c in node.children_by_field_name("value")]
        if var is not None and values:
            ctx.env[_text(var)] = next((v for v in values if "docs" in v), values[0])
        body = node.child_by_field_name("body")
        if body is not None:
            self.walk(body, ctx)

    def redirected(self, node: Node, ctx: _Ctx) -> None:
        body = node.child_by_field_name("body")
        argv: list[str] = []
        if body is not None:
            argv = self.walk_statement(body, ctx)
        for r in node.children_by_field_name("redirect"):
            self.redirect(r, ctx, argv)

    def walk_statement(self, node: Node, ctx: _Ctx) -> list[str]:
        if node.type == "command":
            return self.command(node, ctx)
        self.walk(node, ctx)
        return []

    def redirect(self, node: Node, ctx: _Ctx, argv: list[str]) -> None:
        if node.type == "file_redirect":
            dest = node.child_by_field_name("destination")
            if dest is None:
                return
            op = "".join(_text(c) for c in node.children if not c.is_named)
            v = self.value(dest, ctx)
            if "&" in op and v.isdigit():
                return  # 2>&1
            self.path("read" if op.startswith("<") and ">" not in op else "write", v, ctx)
        elif node.type == "heredoc_redirect":
            for c in node.named_children:
                if c.type == "file_redirect":
                    self.redirect(c, ctx, argv)
                elif c.type == "heredoc_body" and _is_shell_script_from_stdin(argv):
                    self.parse_into(_text(c), ctx)
        elif node.type == "herestring_redirect":
            for c in node.named_children:
                self.value(c, ctx)  # substitutions run; the string itself is data
            if _is_shell_script_from_stdin(argv):
                s = next((self.value(c, ctx) for c in node.named_children), "")
                self.parse_into(s, ctx)

    def command(self, node: Node, ctx: _Ctx) -> list[str]:
        argv: list[str] = []
        redirects: list[Node] = []
        for c in node.named_children:
            if c.type == "variable_assignment":
                self.value(c, ctx)
            elif c.type.endswith("_redirect"):
                redirects.append(c)
            elif c.type == "command_name":
                argv.append(self.value(c.named_children[0], ctx) if c.named_children else _text(c))
            elif c.type != "comment":
                argv.append(self.value(c, ctx))
        if argv:
            self.run(argv, ctx)
        for r in redirects:
            self.redirect(r, ctx, argv)
        return argv

    def parse_into(self, script: str, ctx: _Ctx) -> None:
        if ctx.depth >= _MAX_DEPTH:
            return
        sub = ctx.child()
        sub.depth += 1
        self.walk(_PARSER.parse(script.encode("utf-8", "replace")).root_node, sub)

    # --- commands -------------------------------------------------------------------------------
    def path(self, op: str, value: str, ctx: _Ctx, recursive: bool = False) -> None:
        """Record a path argument if it mentions docs (the rule decides what names docs/adr)."""
        if not value or _SPACE.search(value) or "://" in value:
            return  # whitespace: not a path; a URL (https://host/docs/adr/) is not the project's docs/adr
        if ctx.cwd and not value.startswith(("/", "$", "~")):
            value = posixpath.normpath(posixpath.join(ctx.cwd, value))
        if "docs" in value:
            self.ops.append((op, _expand_adr_glob(value), recursive))

    def paths(self, op: str, args: list[str], ctx: _Ctx, recursive: bool = False) -> None:
        for a in args:
            if a.startswith("-"):
                if a.startswith("--") and "=" in a and a.split("=", 1)[0] not in _MESSAGE_OPTS:
                    self.path(op, a.split("=", 1)[1], ctx, recursive)
                continue
            self.path(op, a, ctx, recursive)

    def run(self, argv: list[str], ctx: _Ctx) -> None:
        name = posixpath.basename(argv[0])
        args = argv[1:]
        if _CLI.fullmatch(name):
            self.ops.append(("run_cli", name, False))
        elif name in _NO_PATHS:
            return
        elif name in ("cd", "pushd"):
            self.cd(args, ctx)
        elif name in _WRAPPERS:
            rest = _skip_options(args, "ugnCpitT")
            if name == "command" and args and args[0] in ("-v", "-V"):
                return
            if rest:
                self.run(rest, ctx)
        elif name == "env":
            rest = [a for a in _skip_options(args, "uSC") if "=" not in a or a.startswith("-")]
            if rest:
                self.run(rest, ctx)
        elif name == "timeout":
            rest = _skip_options(args, "sk")
            if len(rest) > 1:
                self.run(rest[1:], ctx)
        elif name == "xargs":
            rest = _skip_options(args, "IinLPdEsa")
            if rest:
                self.run(rest, ctx)
        elif name in _SHELLS:
            self.shell(args, ctx)
        elif name == "eval":
            self.parse_into(" ".join(args), ctx)
        elif name in _INTERPRETERS or re.fullmatch(r"python3(\.\d+)?", name):
            self.interpreter(args, ctx)
        elif name in _SEARCH:
            self.search(name, args, ctx)
        elif name == "git":
            self.git(args, ctx)
        elif name in ("find", "fd", "fdfind"):
            self.find(name, args, ctx)
        else:
            self.generic(name, args, ctx)

    def cd(self, args: list[str], ctx: _Ctx) -> None:
        dest = next((a for a in args if not a.startswith("-")), None)
        if dest is None or dest.startswith("$") or dest == "~":
            ctx.cwd = None
        elif dest.startswith("/"):
            ctx.cwd = posixpath.normpath(dest)
        else:
            ctx.cwd = posixpath.normpath(posixpath.join(ctx.cwd or ".", dest))

    def shell(self, args: list[str], ctx: _Ctx) -> None:
        for i, a in enumerate(args):
            if a.startswith("-") and "c" in a.lstrip("-") and not a.startswith("--"):
                if i + 1 < len(args):
                    self.parse_into(args[i + 1], ctx)
                return
        self.interpreter(args, ctx)

    def interpreter(self, args: list[str], ctx: _Ctx) -> None:
        """`python3 script args` / `bash script`: the script may be a plugin CLI; -c/-e code is not a path."""
        rest = _skip_options(args, "cemW", stop_at_value_opt="ce")
        if not rest:
            return
        if _CLI.fullmatch(posixpath.basename(rest[0])):
            self.ops.append(("run_cli", posixpath.basename(rest[0]), False))
            return
        self.paths("read", rest, ctx)

    def search(self, name: str, args: list[str], ctx: _Ctx) -> None:
        tool = {"egrep": "grep", "fgrep": "grep", "ack-grep": "ack", "ripgrep": "rg"}.get(name, name)
        value_opts = _SEARCH_VALUE_OPTS.get(tool, "")
        recursive = tool != "grep"
        has_pattern_opt = False
        positional: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                positional.extend(args[i + 1 :])
                break
            if a.startswith("--"):
                key = a.split("=", 1)[0]
                if key in ("--recursive", "--dereference-recursive") or a == "--directories=recurse":
                    recursive = True
                if key in ("--regexp", "--file", "--files"):
                    has_pattern_opt = True  # (rg --files lists files: no pattern operand)
                if key in _SEARCH_VALUE_LONG and "=" not in a:
                    i += 1
            elif a.startswith("-") and len(a) > 1:
                flags = a[1:]
                for j, f in enumerate(flags):
                    if f in "rR" and tool == "grep":
                        recursive = True
                    if f in value_opts:
                        if f in "ef":
                            has_pattern_opt = True
                        if j == len(flags) - 1:
                            i += 1
                        break
            else:
                positional.append(a)
            i += 1
        targets = positional if has_pattern_opt else positional[1:]
        if not targets and recursive:
            targets = ["."]
        for t in targets:
            self.path("search", t, ctx, recursive)

    def git(self, args: list[str], ctx: _Ctx) -> None:
        gctx = ctx
        i = 0
        while i < len(args) and args[i].startswith("-"):
            if args[i] == "-C" and i + 1 < len(args):
                gctx = ctx.child()
                self.cd([args[i + 1]], gctx)
                i += 1
            elif args[i] in ("-c", "--git-dir", "--work-tree", "--namespace"):
                i += 1
            i += 1
        if i >= len(args):
            return
        sub, rest = args[i], args[i + 1 :]
        if sub == "grep":
            self.search("rg", rest, gctx)  # recursive by default, like rg
            return
        kept: list[str] = []
        skip = False
        for a in rest:
            if skip:
                skip = False
                continue
            if a in ("-m", "-F", *_MESSAGE_OPTS) or (a.startswith("-m") and len(a) > 2 and a[1] != "-"):
                skip = a in ("-m", "-F", *_MESSAGE_OPTS)
                continue
            kept.append(a)
        for a in kept:
            if a.startswith("-"):
                continue
            # rev:path (git show HEAD:docs/adr/x.md) reads that path at that revision
            self.path("read" if sub in ("log", "show", "diff", "blame", "cat-file") else "use", a, gctx)

    def find(self, name: str, args: list[str], ctx: _Ctx) -> None:
        if name != "find":  # fd PATTERN [PATH...]
            pos = [a for a in _skip_options(args, "edtEjx", all_positionals=True)]
            for t in pos[1:] or ["."]:
                self.path("search", t, ctx, True)
            return
        roots: list[str] = []
        i = 0
        while (i < len(args) and not args[i].startswith(("-", "(", "!"))) or (
            i < len(args) and args[i] in ("-H", "-L", "-P")
        ):
            if not args[i].startswith("-"):
                roots.append(args[i])
            i += 1
        for r in roots or ["."]:
            self.path("search", r, ctx, True)
        while i < len(args):
            a = args[i]
            if a in ("-path", "-ipath", "-wholename", "-iwholename") and i + 1 < len(args):
                self.path("search", args[i + 1], ctx, True)
                i += 1
            elif a in ("-exec", "-execdir", "-ok", "-okdir"):
                j = i + 1
                while j < len(args) and args[j] not in (";", "+"):
                    j += 1
                if j > i + 1:
                    self.run(args[i + 1 : j], ctx)
                i = j
            i += 1

    def generic(self, name: str, args: list[str], ctx: _Ctx) -> None:
        if name in _MESSAGE_CMDS:
            args = _drop_messages(args)
        if name in ("sed", "awk", "gawk", "mawk", "jq", "yq", "perl"):
            has_script_opt = any(a in ("-e", "-f", "--expression", "--file", "--from-file") for a in args)
            in_place = name in ("sed", "perl") and any(a.startswith("-i") for a in args)
            rest = _skip_options(args, "efvF", all_positionals=True)
            files = rest if has_script_opt else rest[1:]
            self.paths("write" if in_place else "read", files, ctx)
            return
        if name in _COPIERS:
            pos = [a for a in args if not a.startswith("-")]
            self.paths("read", pos[:-1], ctx)
            self.paths("write", pos[-1:], ctx)
            return
        if name in _LISTERS or name == "tree":
            recursive = name in ("tree", "du") or any(
                a == "--recursive" or (a.startswith("-") and not a.startswith("--") and "R" in a)
                for a in args
            )
            pos = [a for a in args if not a.startswith("-")]
            self.paths("list", pos or ["."], ctx, recursive)
            return
        op = "read" if name in _READERS else "write" if name in _WRITERS else "use"
        self.paths(op, args, ctx)


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _is_shell_script_from_stdin(argv: list[str]) -> bool:
    """`bash <<EOF` / `sh -s`: the shell reads its script from stdin (no -c, no script file)."""
    if not argv or posixpath.basename(argv[0]) not in _SHELLS:
        return False
    rest = argv[1:]
    return not any(
        a.startswith("-") and "c" in a.lstrip("-") and not a.startswith("--") for a in rest
    ) and not [a for a in rest if not a.startswith("-")]


def _skip_options(
    args: list[str], value_opts: str, *, stop_at_value_opt: str = "", all_positionals: bool = False
) -> list[str]:
    """The arguments after the leading options (short options in `value_opts` take a value).

    With `all_positionals`, options anywhere are dropped and every positional kept.
    """
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out.extend(args[i + 1 :])
            break
        if a.startswith("-") and len(a) > 1:
            if not a.startswith("--") and a[-1] in value_opts and len(a) == 2:
                if a[-1] in stop_at_value_opt:
                    return []
                i += 1
            i += 1
            continue
        if not all_positionals:
            return args[i:]
        out.append(a)
        i += 1
    return out


def _drop_messages(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-m", *_MESSAGE_OPTS):
            skip = True
        elif not (a.startswith("-m") and not a.startswith("--")) and a.split("=", 1)[0] not in _MESSAGE_OPTS:
            out.append(a)
    return out


@lru_cache(maxsize=65536)
def command_ops(command: str) -> tuple[Op, ...]:
    """The (op, path, recursive) facts of one Bash command string, in order, duplicates dropped."""
    w = _Walker()
    # Nesting deeper than Python's stack: keep the facts found up to there.
    with contextlib.suppress(RecursionError):
        w.walk(_PARSER.parse(command.encode("utf-8", "replace")).root_node, _Ctx())
    return tuple(dict.fromkeys(w.ops))


def _expand_adr_glob(path: str) -> str:
    """A glob naming docs/adr by matching (`docs/*`, `docs/a*/x.md`) is written with `adr` in place of
    the matching component, so the rule sees the docs/adr path it expands to. Other paths unchanged."""
    parts = path.split("/")
    for i in range(1, len(parts)):
        q = parts[i]
        if parts[i - 1] == "docs" and any(ch in q for ch in "*?[") and fnmatch.fnmatchcase("adr", q):
            return "/".join([*parts[:i], "adr", *parts[i + 1 :]])
    return path


SCHEMA = {
    "run_id": pl.String,
    "seq": pl.Int64,
    "idx": pl.Int64,
    "op": pl.String,
    "path": pl.String,
    "recursive": pl.Boolean,
}


def facts(calls: pl.DataFrame) -> pl.DataFrame:
    """`calls` (run_id, seq, command) -> one row per fact (run_id, seq, idx, op, path, recursive),
    `idx` the fact's order within its command; each distinct command string is parsed once."""
    # A fact's path mentions `docs` or a CLI name `adr-...`; a command whose text has neither `docs`
    # nor `adr` cannot yield one except by gluing fragments (`d=do; ls ${d}cs/adr`), so most
    # commands are not parsed at all.
    calls = calls.filter(pl.col("command").str.contains("docs|adr"))
    if calls.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    distinct = calls["command"].unique().to_list()
    rows = [(c, i, *f) for c in distinct for i, f in enumerate(command_ops(c))]
    table = pl.DataFrame(
        rows,
        schema={"command": pl.String} | {k: SCHEMA[k] for k in ("idx", "op", "path", "recursive")},
        orient="row",
    )
    calls = calls.with_columns(pl.col("seq").cast(pl.Int64))
    return calls.join(table, on="command").select(*SCHEMA).sort("run_id", "seq", "idx")


def shell_ops(events: pl.DataFrame) -> pl.DataFrame:
    """The `shell_ops` table of an events frame (what every Bash tool_use does), in Polars."""
    calls = (
        events.lazy()
        .select("run_id", "seq", "block_type", "tool_name", "tool_input")
        .filter((pl.col("block_type") == "tool_use") & (pl.col("tool_name") == "Bash"))
        .select("run_id", "seq", command=pl.col("tool_input").str.json_path_match("$.command"))
        .collect()
    )
    return facts(calls)


def register_shell_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create the `shell_ops` table the axis (a) rule reads, from the connection's `events` table."""
    calls = con.sql(
        "SELECT run_id, seq, json_extract_string(tool_input, '$.command') AS command FROM events "
        "WHERE block_type = 'tool_use' AND tool_name = 'Bash'"
    ).pl()
    con.register("_shell_ops", facts(calls))
    con.execute("CREATE OR REPLACE TABLE shell_ops AS SELECT * FROM _shell_ops")
    con.unregister("_shell_ops")
