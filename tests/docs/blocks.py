"""The code blocks of a Markdown page and the ``doctest`` directives that say how to run each.

markdown-it-py (CommonMark, the parser behind ``rich``'s Markdown) finds the fenced blocks, in lists
too; a directive is an HTML comment, invisible on GitHub, on the lines just before a fence:

- ``<!-- doctest: skip reason="..." -->``: the block is not run; the reason is required and says why
  (Docker, another machine, minutes of run time). The page should say so too.
- ``<!-- doctest: background until="REGEX" -->``: a shell block with one long-running command (a broker
  in the foreground): it is started, the run goes on once its output matches REGEX, and it is stopped
  with Ctrl-C (SIGINT) at ``stop-background`` or at the end of the page, where it must exit 0.
- ``<!-- doctest: file path="NAME" -->``: the block is the content of the file NAME, written into the
  working directory (a TOML file, a test module the next block runs).
- ``<!-- doctest: output -->``: the block is what the run block before it prints (stdout and stderr of a
  shell block, stdout of a Python block), compared as doctest compares with ELLIPSIS and
  NORMALIZE_WHITESPACE: ``...`` stands for any text.
- ``<!-- doctest: stop-background -->``, on its own: Ctrl-C to the background commands started so far
  (the page says "stop the broker").

Without a directive, a ``sh``/``bash``/``shell`` block runs in bash (every command must succeed), a
``console`` block runs each ``$ `` line and compares what follows it, and a ``python`` block is executed;
every other block (no language, ``text``, ``json``, ``toml`` ...) is something to read, not to run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

SHELL = frozenset({"sh", "bash", "shell"})
CONSOLE = frozenset({"console"})
PYTHON = frozenset({"python", "py"})
RUNNABLE = SHELL | CONSOLE | PYTHON

DIRECTIVE = re.compile(r"<!--\s*doctest:(?P<body>.*?)-->", re.DOTALL)
#: A directive where one is written: at the start of a line (a mention in backticks is not one).
DIRECTIVE_LINE = re.compile(r"^[ \t]*<!--\s*doctest:", re.MULTILINE)
#: Each directive, and what it takes: required keys, then optional ones.
KNOWN: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "skip": (frozenset({"reason"}), frozenset()),
    "background": (frozenset({"until"}), frozenset()),
    "file": (frozenset({"path"}), frozenset()),
    "output": (frozenset(), frozenset()),
    "stop-background": (frozenset(), frozenset()),
}
STANDALONE = frozenset({"stop-background"})


class DirectiveError(ValueError):
    """A directive the runner cannot follow: unknown, missing a key, or not before a fence."""


@dataclass(frozen=True)
class Directive:
    name: str
    options: dict[str, str]
    line: int  # 1-based line of the comment


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language, text, the line of its opening fence (1-based)."""

    lang: str
    text: str
    line: int
    directives: tuple[Directive, ...] = field(default=())

    def directive(self, name: str) -> Directive | None:
        return next((d for d in self.directives if d.name == name), None)

    @property
    def runnable(self) -> bool:
        return self.lang in RUNNABLE


@dataclass(frozen=True)
class StopBackground:
    line: int


Step = Block | StopBackground


def parse_directive(body: str, line: int) -> Directive:
    words = shlex.split(body)
    if not words:
        raise DirectiveError(f"line {line}: an empty doctest directive")
    name, rest = words[0], words[1:]
    if name not in KNOWN:
        raise DirectiveError(f"line {line}: unknown doctest directive {name!r} (known: {', '.join(KNOWN)})")
    options: dict[str, str] = {}
    for word in rest:
        key, eq, value = word.partition("=")
        if not eq:
            raise DirectiveError(f"line {line}: {name}: expected key=value, got {word!r}")
        options[key] = value
    required, optional = KNOWN[name]
    missing = required - options.keys()
    unknown = options.keys() - required - optional
    if missing or unknown:
        raise DirectiveError(
            f"line {line}: {name}: missing {sorted(missing)}, unknown {sorted(unknown)}"
            if missing
            else f"line {line}: {name}: unknown option(s) {sorted(unknown)}"
        )
    if name == "skip" and not options["reason"].strip():
        raise DirectiveError(f"line {line}: skip needs a reason")
    return Directive(name, options, line)


def parse(text: str) -> list[Step]:
    """The page's fences and standalone directives, in order; a directive must come just before the
    fence it is for (blank lines and other directives between are fine)."""
    lines = text.splitlines()
    steps: list[Step] = []
    pending: list[Directive] = []
    pending_end = 0  # the line after the last pending directive's comment
    found = 0

    def check_gap(until: int) -> None:
        if pending and any(lines[i].strip() for i in range(pending_end, until)):
            raise DirectiveError(f"line {pending[0].line}: not followed by a code block")

    for token in MarkdownIt("commonmark").parse(text):
        if token.map is None:
            continue
        if token.type == "html_block" and DIRECTIVE.search(token.content):
            check_gap(token.map[0])
            for match in DIRECTIVE.finditer(token.content):
                found += 1
                line = token.map[0] + 1 + token.content.count("\n", 0, match.start())
                directive = parse_directive(match["body"], line)
                if directive.name in STANDALONE:
                    if pending:
                        raise DirectiveError(f"line {pending[0].line}: not followed by a code block")
                    steps.append(StopBackground(line))
                else:
                    pending.append(directive)
            pending_end = token.map[1]
        elif token.type == "fence":
            check_gap(token.map[0])
            lang = token.info.split()[0] if token.info.strip() else ""
            steps.append(Block(lang, token.content, token.map[0] + 1, tuple(pending)))
            pending = []
    if pending:
        raise DirectiveError(f"line {pending[0].line}: not followed by a code block")
    mentioned = len(DIRECTIVE_LINE.findall(text))
    if mentioned != found:
        raise DirectiveError(
            f"{mentioned - found} doctest directive(s) not read as HTML blocks (inside a code block?)"
        )
    for step in steps:
        if isinstance(step, Block):
            check_block(step)
    return steps


def check_block(block: Block) -> None:
    names = [d.name for d in block.directives]
    where = f"line {block.line}"
    if len(set(names)) != len(names):
        raise DirectiveError(f"{where}: a directive given twice: {names}")
    if block.directive("background") and block.lang not in SHELL:
        raise DirectiveError(f"{where}: background is for a shell block, not {block.lang!r}")
    if block.directive("output") and block.runnable:
        raise DirectiveError(f"{where}: output is for a block of text after the block that prints it")
    if len(names) > 1:
        raise DirectiveError(f"{where}: one directive a block, got {names}")


def parse_file(path: Path) -> list[Step]:
    try:
        return parse(path.read_text())
    except DirectiveError as error:
        raise DirectiveError(f"{path}: {error}") from None


def pip_install_lines(steps: list[Step]) -> list[list[str]]:
    """The ``pip install`` commands of a page's shell blocks that run, each as its words."""
    commands = []
    for step in steps:
        if not isinstance(step, Block) or step.lang not in SHELL or step.directive("skip"):
            continue
        for line in step.text.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] in (["pip", "install"], ["pip3", "install"]):
                commands.append(words[1:])
    return commands
