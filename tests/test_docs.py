"""The docs say what the software is and does, and what they show works.

- docs/, the README, the comments and strings of the code and the tests' names describe the
  software, not the way it was written: no work sessions (Kafka consumer, HTTP client,
  pytest and Redis sessions are fine), no helpers as people, no issue numbers, no dated
  "re-measured" narration;
- every command a docs code block shows parses: ``recrawl ...`` against the real parser
  (:func:`streams.cli.build_parser`), ``make X`` against the Makefile's targets, and every
  benchmark or ``python -m`` module named, against its own ``--help`` (every distinct
  program's in turn in one subprocess, each run as ``python path`` or ``python -m`` runs it:
  the imports they share are paid once);
- every relative link in docs/ and the README names a file that exists, and its anchor a
  heading of that file.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
CODE_DIRS = ("models", "streams", "infra", "benchmarks", "experiments", "tests")

# ------------------------------------------------------------------ words of the writing process

#: "session" is fine next to one of these (a Kafka consumer's, an HTTP client's, pytest's,
#: a Redis or Scrapy one)
SESSION_OK = re.compile(
    r"kafka|consumer|group|timeout|http|aiohttp|client|cookie|pytest|test|fixture|redis|"
    r"scope|start_new|scrapy|subscri|websub|hub",
    re.I,
)
SESSION = re.compile(r"\bsessions?\b", re.I)
#: each pattern is a word of the writing process wherever it appears
PROCESS = [
    (re.compile(r"\bhelpers?\s+(?:[A-Z]\b|\"|\u201c)"), "a helper as a person"),
    (re.compile(r"\bhelpers?'s?\s+(?:sessions?|files|runs|work)\b|\b(?:other|four|this|that)"
                r"\s+helpers?(?:'s?)?\s+(?:sessions?|files|runs|test|work)?", re.I),
     "a helper as a person"),
    (re.compile(r"(?<![-\w])issues?\s*#\d+|(?<![-\w])issues?\s+\d+(?![\d^])", re.I),
     "an issue number"),
    (re.compile(r"\bthe issue(?:'s|s')?\s+(?:names|asks|says|lists|bound|set-?up|target|"
                r"two targets)|\b(?:in|from|by) the issue\b|\bthe issue's\b",
                re.I), "the issue as a source"),
    (re.compile(r"\bre-measured (?:on|in|after|before)\b", re.I),
     "dated re-measurement narration"),
    (re.compile(r"\b(?:this|that|the same) (?:morning|afternoon|evening|night)\b|"
                r"\b(?:before|after) commit\b", re.I), "a time of writing"),
]
#: a test's name that tells the story instead of the behaviour
TEST_NAME = re.compile(
    r"session|helper|issue_?\d|the_issues?_|(?:before|after)_commit|morning|afternoon|"
    r"evening|yesterday|today|the_fix|wave_", re.I)
#: an issue of another project (a library's bug tracker) is a reference, not our story
FOREIGN_ISSUE = re.compile(r"(?:faust-streaming|faust|aiokafka|redis-py|scrapy|numba|"
                           r"cpython|github)\S*\s+issue", re.I)


def _findings(text: str, where: str) -> Iterator[str]:
    for m in SESSION.finditer(text):
        window = text[max(0, m.start() - 60): m.end() + 40]
        if not SESSION_OK.search(window):
            yield f"{where}: {window.strip()!r} (a session of work)"
    for pat, why in PROCESS:
        for m in pat.finditer(text):
            before = text[max(0, m.start() - 30): m.start() + 6]
            if why == "an issue number" and FOREIGN_ISSUE.search(before):
                continue
            yield f"{where}: {text[max(0, m.start() - 30): m.end() + 30].strip()!r} ({why})"


def _code_files() -> Iterator[Path]:
    for d in CODE_DIRS:
        for p in sorted((REPO / d).rglob("*")):
            if p.suffix in (".py", ".lua") and ".venv" not in p.parts and p != Path(__file__):
                yield p


def _prose_of(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of a code file's comments and strings (docstrings, help texts)."""
    src = path.read_text()
    if path.suffix == ".lua":
        for n, line in enumerate(src.splitlines(), 1):
            if "--" in line:
                yield n, line[line.index("--"):]
        return
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        # comments, docstrings and help texts (a bare "session" string is pytest's scope)
        prose = tok.type == tokenize.COMMENT or (
            tok.type == tokenize.STRING and tok.string.strip("'\"rbf") != "session")
        if prose:
            yield tok.start[0], tok.string


def process_words() -> list[str]:
    """Every word of the writing process in docs, the README, comments and test names."""
    out: list[str] = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            out += _findings(line, f"{doc.relative_to(REPO)}:{n}")
    for path in _code_files():
        for n, text in _prose_of(path):
            out += _findings(text, f"{path.relative_to(REPO)}:{n}")
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"\s*(?:async\s+)?def\s+(test_\w+)", line)
            if m and TEST_NAME.search(m.group(1)):
                out.append(f"{path.relative_to(REPO)}:{n}: test name {m.group(1)}")
    return out


def test_docs_comments_and_test_names_describe_the_software_not_its_writing() -> None:
    found = process_words()
    assert not found, "words of the writing process:\n" + "\n".join(found)


# ------------------------------------------------------------------ commands in code blocks

def code_blocks(text: str) -> Iterator[list[str]]:
    """The lines of each fenced (```) and indented (4 spaces after a blank line) block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            yield lines[i + 1: j]
            i = j + 1
        elif lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()) and not (
                lines[i].lstrip()[:2] in ("* ", "- ", "| ") or lines[i].lstrip()[:1].isdigit()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            yield [ln[4:] for ln in lines[i:j]]
            i = j
        else:
            i += 1


PROMPT = re.compile(r"^\$\s+")
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


def commands(block: list[str]) -> Iterator[list[str]]:
    """The commands of one block as argument lists: continuation lines joined, comments,
    prompts, environment assignments, ``taskset -c N`` and ``&``/``&&``/``;``/``|`` taken
    apart; a line that does not start a known command (output) is left out."""
    joined: list[str] = []
    for line in block:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line)
    for line in joined:
        if not line or line[0].isspace():
            continue
        line = PROMPT.sub("", line)
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        part: list[str] = []
        for w in [*words, "&&"]:
            if w in ("&&", "&", ";", "|", "||"):
                while part and ENV.match(part[0]):
                    part.pop(0)
                if part[:1] == ["taskset"]:
                    part = part[3:]
                if part:
                    yield part
                part = []
            else:
                part.append(w)


def _program(argv: list[str]) -> tuple[str, list[str]] | None:
    """``("recrawl", args)``, ``("make", args)``, ``("script:<path>", args)`` or
    ``("module:<name>", args)`` for a command of this project, else None."""
    head = argv[0]
    if head.endswith(":") or (len(argv) > 1 and argv[1].endswith(":")):
        return None  # a message a command printed ("recrawl ping: cannot reach ..."): output
    if head.endswith("/recrawl") or head == "recrawl":
        return "recrawl", argv[1:]
    if head == "make":
        return "make", argv[1:]
    if head.endswith("python") or head.endswith("python3") or head.endswith("python3.11"):
        rest = [a for a in argv[1:] if a != "-u"]
        if rest[:1] == ["-m"] and len(rest) > 1 and rest[1].split(".")[0] in (
                "streams", "infra", "experiments", "models", "benchmarks"):
            return f"module:{rest[1]}", rest[2:]
        if rest and rest[0].startswith("benchmarks/") and rest[0].endswith(".py"):
            return f"script:{rest[0]}", rest[1:]
    return None


def doc_commands() -> list[tuple[str, str, list[str]]]:
    """(where, program, args) of every project command in a docs code block."""
    out = []
    for doc in DOCS:
        for block in code_blocks(doc.read_text()):
            for argv in commands(block):
                prog = _program(argv)
                if prog is not None:
                    out.append((str(doc.relative_to(REPO)), prog[0], prog[1]))
    return out


def _recrawl_parses(args: list[str]) -> str | None:
    from streams.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(args)
    except SystemExit as e:
        if e.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1]
    return None


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.M))


def _flags(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", help_text))


def _help_key(prog: str, args: list[str]) -> tuple[str, str | None]:
    """What ``--help`` to ask for a command: the program's, or its subcommand's when the
    first argument is one (``bench_e2e.py throughput``, ``bench_estimation.py updates``)."""
    first = args[0] if args and not args[0].startswith("-") else None
    return prog, first


#: runs ``--help`` of each program in argv[1] (JSON ``[[kind, name, subcommand], ...]``) in
#: turn, as ``python name`` (sys.path[0] the script's folder, not the working one) or
#: ``python -m name`` (sys.path[0] the working folder) would, and writes
#: ``[[exit status, output], ...]`` as JSON to the file argv[2]
_HELPS = """
import contextlib, io, json, os, runpy, sys
programs, target = json.loads(sys.argv[1]), sys.argv[2]
base = [p for p in sys.path if p not in ("", os.getcwd())]
out = []
for kind, name, sub in programs:
    sys.argv = [name, *([sub] if sub else []), "--help"]
    sys.path[:] = [os.path.dirname(os.path.abspath(name)) if kind == "script" else os.getcwd(),
                   *base]
    buf, status = io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            if kind == "script":
                runpy.run_path(name, run_name="__main__")
            else:
                runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:
        status, _ = 1, buf.write(f"{type(e).__name__}: {e}")
    out.append([status, buf.getvalue()])
with open(target, "w") as f:
    json.dump(out, f)
"""


def test_every_command_in_a_docs_code_block_parses(tmp_path: Path) -> None:
    found = doc_commands()
    assert {p for _, p, _ in found} >= {"recrawl", "make"}, found
    bad: list[str] = []
    targets = _make_targets()
    keys: list[tuple[str, str | None]] = []
    for _, prog, args in found:
        key = _help_key(prog, args)
        if prog.startswith(("script:", "module:")) and key not in keys:
            keys.append(key)
    result = tmp_path / "helps.json"
    done = subprocess.run(
        [sys.executable, "-c", _HELPS, json.dumps([[*k.split(":", 1), sub] for k, sub in keys]),
         str(result)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and result.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    texts = {}
    for key, (status, out) in zip(keys, json.loads(result.read_text()), strict=True):
        texts[key] = out
        if status != 0:
            shown = " ".join(k for k in key if k)
            bad.append(f"{shown} --help exited {status}: {out.strip()[-300:]}")
    for where, prog, args in found:
        shown = f"{where}: {prog} {' '.join(args)}"
        if prog == "recrawl":
            if (why := _recrawl_parses(args)) is not None:
                bad.append(f"{shown}: {why}")
        elif prog == "make":
            wanted = [a for a in args if "=" not in a and not a.startswith("-")]
            if missing := [a for a in wanted if a not in targets]:
                bad.append(f"{shown}: no make target {missing}")
        elif (key := _help_key(prog, args)) in texts:
            unknown = sorted({a.split("=")[0] for a in args if a.startswith("--")}
                             - _flags(texts[key]))
            if unknown:
                bad.append(f"{shown}: not in its --help: {unknown}")
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------ links

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def slugs(md: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in md.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links() -> list[str]:
    bad = []
    for doc in DOCS:
        text = doc.read_text()
        for m in LINK.finditer(text):
            target = m.group(1) or m.group(2)
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                bad.append(f"{doc.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in slugs(dest.read_text()):
                bad.append(f"{doc.relative_to(REPO)}: {target} (no such heading)")
    return bad


def test_every_relative_link_in_the_docs_resolves() -> None:
    bad = broken_links()
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------ the checks themselves


@pytest.mark.parametrize(("text", "flagged"), [
    ("the eleventh session's runs", True),
    ("Re-measured on 2026-11-27", True),
    ('helper "records" is rewriting it', True),
    ("helper B's SignalEstimator", True),
    ("the target of issue 13", True),
    ("(issue 17)", True),
    ("after the Kafka session timeout", False),
    ("each pytest session starts its own Kafka", False),
    ("an aiohttp client session per run", False),
    ("concurrency=1 (faust-streaming issue #606)", False),
    ("the issue script refuses it", False),
    ("one tick issues 10^4 orders", False),
    ("lib.lua's helpers", False),
])
def test_the_word_check_tells_the_writing_apart_from_the_software(
        text: str, flagged: bool) -> None:
    assert bool(list(_findings(text, "x"))) is flagged


def test_the_command_extraction_sees_commands_and_leaves_out_output() -> None:
    block = ["$ OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/bench_sim.py \\",
             "    --whole", "recrawl infra up --home /tmp/x  # then the worker", "make demo &&"
             " recrawl plan --budget 1", "   recrawl demo: summary", "what  count  seconds",
             "recrawl ping: cannot reach Kafka at 127.0.0.1:9093 (tried for 10 s)"]
    got = [_program(a) for a in commands(block)]
    assert got == [("script:benchmarks/bench_sim.py", ["--whole"]),
                   ("recrawl", ["infra", "up", "--home", "/tmp/x"]), ("make", ["demo"]),
                   ("recrawl", ["plan", "--budget", "1"]), None, None]
    assert _recrawl_parses(["plan", "--budget", "1"]) is None
    assert _recrawl_parses(["plan", "--no-such-flag"]) is not None


def test_the_link_check_reads_headings_as_github_does() -> None:
    assert slugs("# Redis Cluster\n## What a budget buys: recrawl plan\n## A\n## A\n") == {
        "redis-cluster", "what-a-budget-buys-recrawl-plan", "a", "a-1"}
