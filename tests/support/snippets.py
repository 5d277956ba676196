"""Every fenced block of README.md and docs/*.md, run as a reader who pastes them in order would.

A page is run from a fresh, empty directory with the project's virtualenv first on ``PATH`` (so
``python``, ``helix-dbos`` and ``dbos`` are the project's), no helix or DBOS setting of the runner's
and no provider API key; on Postgres ``HELIX_DBOS_DATABASE_URL`` names a fresh test database, as a
reader who exported it, on SQLite nothing does and the runtime's default ``./helix_dbos.sqlite`` is
used. The suite's pool caps (tests/conftest.py) are kept. Its blocks, in page order:

- **a file**: a block whose first line is a ``# path.py`` comment, or whose paragraph says "save
  this as `path`" or ends "`path`:", is written to that path as printed (run by later blocks);
- ``python``: run in the page's one interpreter (tests/support/snippet_driver.py), each block
  seeing what the blocks before it defined;
- ``bash`` / ``sh``: every line (``\\`` continues a line) run by bash in the page's directory;
  ``export NAME=VALUE`` lines set the page's environment for the lines after them;
- ``console``: the same for the lines after a ``$`` prompt; the lines between are their output;
- ``sql``: every statement run against the ledger the page's earlier blocks made (the page's
  Postgres database, else the newest ``*.sqlite`` file in its directory, else ``./helix_dbos.sqlite``
  as a runtime's first launch leaves it), in a transaction rolled back; ``:session_id`` is bound
  to the newest session. A block whose first line is ``-- Postgres`` or ``-- SQLite`` runs on that
  database only; on SQLite the ``helix.`` and ``dbos.`` prefixes are dropped, as docs/audit.md says.

A command exits 0 unless its trailing comment says ``exits N``; a trailing comment ending in ``...``
is the start of a line the command prints. The first failure ends the page and
names the page's line.

A block that cannot run as printed says why in a comment right before its fence (other comments may
sit between), and the marker is checked:

=============================  ====================================================================
``<!-- snippet: output -->``    what something prints, or a format: never a ``$`` prompt; ``json``
                               must parse.
``<!-- snippet: synopsis -->``  how commands are called (``[--flag X]``, ``NAME``, alternatives, the
                               reader's own script): every program exists, and for ``helix-dbos``,
                               ``dbos`` and ``python -m M`` every ``--flag`` shown is in its
                               ``--help``.
``<!-- snippet: in a clone -->``  run from a clone of the repository (``pip install -e .``, the
                               test command): checked as a synopsis from the repository's root,
                               ``.venv/bin/X`` being the project's, and every extra
                               ``.[a,b]`` named is one pyproject.toml declares.
``<!-- snippet: fragment, given A B -->``  Python that reads names the page leaves to the reader:
                               it compiles, its imports resolve, and the names it reads that nothing
                               defines are exactly ``A B``. ``yaml``: it parses.
``<!-- snippet: needs X -->``   needs what the suite has not (an API key, your provider's SDK, a
                               server of yours). Python: it compiles, its imports resolve but for
                               modules named in the marker, and it reads no undefined name; a file
                               is still written. A command: run, it fails, naming ``X``. An
                               ``UPPER_CASE`` ``X`` must be unset in the page's environment.
``<!-- snippet: server -->``    its last command serves until stopped: started in the background,
                               waited for until ``/healthz`` answers; stopped with Ctrl-C (SIGINT
                               to its process group) when the next server block starts or the page
                               ends, and it must still be running then and exit within 30 s.
                               ``localhost:8000`` in the page's commands and code becomes the port
                               the page's servers are given (``HELIX_DBOS_PORT``): the machine is
                               shared.
=============================  ====================================================================
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DRIVER = Path(__file__).resolve().parent / "snippet_driver.py"

MARKER = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")
COMMENT = re.compile(r"^<!--.*-->\s*$")
FENCE = re.compile(r"^```([\w-]*)\s*$")
KINDS = ("output", "synopsis", "in a clone", "fragment", "needs", "server")
SHELLS = {"bash", "sh", "shell", "console"}
FILE_HEADER = re.compile(r"^#\s*([\w./-]+\.(?:py|ya?ml|ini|toml|json|txt))\b")
FILE_PROSE = re.compile(r"(?:save (?:this|it) as|saved as) `([\w./-]+\.\w+)`|`([\w./-]+\.\w+)`:\s*$", re.I)
EXITS = re.compile(r"#.*\bexits (\d+)\b")
SHOWN = re.compile(r"\s#\s+(.+?)(?:\.\.\.|…)\s*$")
SERVER_PORT = re.compile(r"\b(localhost|127\.0\.0\.1):8000\b")
#: what a reader is assumed not to have; the runner's values never reach a page
KEY_PREFIXES = ("OPENAI", "ANTHROPIC", "GROQ", "GOOGLE", "GEMINI", "MISTRAL", "COHERE", "HELIX_DBOS_", "DBOS__")
SUITE_POOLS = {"HELIX_DBOS_API_POOL": "2", "HELIX_DBOS_TX_POOL": "3", "HELIX_DBOS_DBOS_POOL": "3"}


class SnippetError(AssertionError):
    """A block that did not do what the page says, named by page and line."""


@dataclass(frozen=True)
class Marker:
    kind: str
    rest: str

    @classmethod
    def parse(cls, text: str, where: str) -> Marker:
        for kind in KINDS:
            if text == kind or text.startswith((kind + ",", kind + " ")):
                return cls(kind, text[len(kind):].lstrip(", ").strip())
        raise SnippetError(f"{where}: unknown snippet marker {text!r}; one of {', '.join(KINDS)}")

    def given(self) -> set[str]:
        return set(self.rest.removeprefix("given").split()) if self.kind == "fragment" else set()


@dataclass
class Block:
    page: str
    line: int  #: the opening fence's line, 1-based
    lang: str
    text: str
    markers: list[Marker] = field(default_factory=list)
    file: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def marker(self, kind: str) -> Marker | None:
        return next((m for m in self.markers if m.kind == kind), None)


def pages() -> list[str]:
    """README.md and every docs/*.md (not docs/design/), found by globbing: new pages are covered."""
    return ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def blocks(page: str, root: Path = ROOT) -> list[Block]:
    lines = (root / page).read_text().split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        block = Block(page, i + 1, match.group(1), "\n".join(lines[i + 1:end]) + "\n")
        j = i - 1
        while j >= 0 and COMMENT.match(lines[j]):
            marker = MARKER.match(lines[j])
            if marker:
                block.markers.insert(0, Marker.parse(marker.group(1), f"{page}:{j + 1}"))
            j -= 1
        block.file = _file_name(block, lines[:j + 1])
        found.append(block)
        i = end + 1
    return found


def _file_name(block: Block, before: list[str]) -> str | None:
    first = block.text.split("\n", 1)[0]
    header = FILE_HEADER.match(first)
    if header and block.lang in ("python", "yaml", "toml", "ini", "json", ""):
        return header.group(1)
    paragraph: list[str] = []
    for line in reversed(before):
        if not line.strip():
            if paragraph:
                break
            continue
        paragraph.insert(0, line)
    prose = FILE_PROSE.search(" ".join(paragraph))
    if prose and block.lang not in SHELLS and block.lang != "sql":
        return prose.group(1) or prose.group(2)
    return None


@dataclass
class Command:
    text: str
    line: int  #: its first line in the page
    output: list[str] = field(default_factory=list)  #: the lines a console block shows after it

    @property
    def shown_output(self) -> str | None:
        """A trailing comment ending in ``...`` shows how a line of what the command prints starts."""
        match = SHOWN.search(self.text)
        return match.group(1).strip() if match else None

    @property
    def expected_exit(self) -> int:
        match = EXITS.search(self.text)
        return int(match.group(1)) if match else 0


def commands(block: Block) -> list[Command]:
    """A shell block's commands, continuation lines joined; a console block's lines after ``$``."""
    found: list[Command] = []
    pending: list[str] = []
    start = 0
    for offset, raw in enumerate(block.text.rstrip("\n").split("\n")):
        number = block.line + 1 + offset
        if pending:
            pending.append(raw)
        elif block.lang == "console" and not raw.startswith("$ "):
            if found:
                found[-1].output.append(raw)
            continue
        else:
            text = raw[2:] if block.lang == "console" else raw
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            pending, start = [text], number
        if not pending[-1].rstrip().endswith("\\"):
            found.append(Command("\n".join(pending), start))
            pending = []
    return found


def sql_statements(text: str) -> list[str]:
    statements, current = [], []
    for line in text.split("\n"):
        current.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(current))
            current = []
    rest = "\n".join(current).strip()
    if rest and not all(ln.strip().startswith("--") or not ln.strip() for ln in current):
        statements.append(rest)
    return statements


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


class PageRun:
    """One page's blocks run in order, in ``workdir``, on ``database_url`` (None: the SQLite default)."""

    def __init__(self, page: str, workdir: Path, database_url: str | None, new_ledger: Callable[[Path], str], root: Path = ROOT) -> None:
        self.page = page
        self.workdir = workdir
        self.scratch = workdir.parent / f"{workdir.name}.harness"  # the harness's files, outside the reader's directory
        self.scratch.mkdir(exist_ok=True)
        self.blocks = blocks(page, root)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(KEY_PREFIXES)}
        self.env.update(SUITE_POOLS, PATH=f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", VIRTUAL_ENV=str(VENV_BIN.parent))
        self.env.pop("PYTHONPATH", None)
        self.database_url = database_url
        self.new_ledger = new_ledger
        if database_url is not None:
            self.env["HELIX_DBOS_DATABASE_URL"] = database_url
        self.port: int | None = None
        if any(b.marker("server") for b in self.blocks):
            self.port = _free_port()
            self.env["HELIX_DBOS_PORT"] = str(self.port)
        self.driver: subprocess.Popen[bytes] | None = None
        self.driver_log = self.scratch / "python.log"
        self.server: tuple[subprocess.Popen[bytes], Command, Path] | None = None
        self.requests = 0
        self.ran: list[str] = []  #: what ran, for the report: "README.md:30 file example.py", ...

    # -- running ----------------------------------------------------------------------------------

    def run(self) -> list[str]:
        try:
            for block in self.blocks:
                started = time.monotonic()
                self._block(block)
                self.ran[-1] += f" [{time.monotonic() - started:.1f} s]"
            self._stop_server()
        except SnippetError as exc:
            raise SnippetError("\n".join([str(exc), "", "what the page ran before it:", *self.ran])) from None
        finally:
            self.close()
        return self.ran

    def close(self) -> None:
        if self.server is not None:
            proc = self.server[0]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            self.server = None
        if self.driver is not None:
            assert self.driver.stdin is not None
            self.driver.stdin.close()
            try:
                self.driver.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.driver.kill()
                self.driver.wait()
            self.driver = None

    def _block(self, block: Block) -> None:
        kinds = {m.kind for m in block.markers}
        if "output" in kinds:
            self._check_output(block)
        elif "synopsis" in kinds or "in a clone" in kinds:
            self._check_synopsis(block, in_clone="in a clone" in kinds)
        elif "fragment" in kinds:
            self._check_fragment(block)
        elif block.file is not None:
            self._write_file(block)
        elif block.lang == "python":
            if "needs" in kinds:
                self._check_needs_python(block)
            else:
                self._exec_python(block)
        elif block.lang in SHELLS:
            self._shell(block)
        elif block.lang == "sql":
            self._sql(block)
        else:
            raise SnippetError(f"{block.where}: a ```{block.lang} block that names no file cannot run as printed; "
                               "say what it is with a snippet marker")

    def _write_file(self, block: Block) -> None:
        assert block.file is not None
        path = self.workdir / block.file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.text)
        self.ran.append(f"{block.where} file {block.file}")
        if block.marker("needs") and block.lang == "python":
            self._check_needs_python(block, wrote=True)

    # -- python -----------------------------------------------------------------------------------

    def _python(self, op: str, block: Block) -> dict[str, Any]:
        if self.driver is None:
            self.driver = subprocess.Popen(
                [str(VENV_BIN / "python"), "-u", str(DRIVER)], cwd=self.workdir, env=self.env,
                stdin=subprocess.PIPE, stdout=self.driver_log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.requests += 1
        result = self.scratch / f"result-{self.requests}.json"
        code = SERVER_PORT.sub(rf"\g<1>:{self.port}", block.text) if self.port else block.text
        request = {"op": op, "code": code, "page": self.page, "line": block.line, "result": str(result)}
        assert self.driver.stdin is not None
        self.driver.stdin.write((json.dumps(request) + "\n").encode())
        self.driver.stdin.flush()
        deadline = time.monotonic() + 240
        while not result.exists():
            if self.driver.poll() is not None:
                raise SnippetError(f"{block.where}: the page's python exited {self.driver.returncode}\n{_tail(self.driver_log.read_text())}")
            if time.monotonic() > deadline:
                raise SnippetError(f"{block.where}: the block did not finish within 240 s\n{_tail(self.driver_log.read_text())}")
            time.sleep(0.05)
        answer: dict[str, Any] = json.loads(result.read_text())
        return answer

    def _exec_python(self, block: Block) -> None:
        answer = self._python("exec", block)
        if not answer["ok"]:
            raise SnippetError(f"{block.where}: the python block failed\n{answer['error']}\n{_tail(self.driver_log.read_text())}")
        self.ran.append(f"{block.where} python")

    def _check_python(self, block: Block) -> dict[str, Any]:
        answer = self._python("check", block)
        if not answer["ok"]:
            raise SnippetError(f"{block.where}: the python block does not compile\n{answer['error']}")
        return answer

    def _check_fragment(self, block: Block) -> None:
        marker = block.marker("fragment")
        assert marker is not None
        if block.lang == "yaml":
            import yaml

            yaml.safe_load(block.text)
            self.ran.append(f"{block.where} yaml fragment parsed")
            return
        if block.lang != "python":
            raise SnippetError(f"{block.where}: a fragment is python or yaml, not {block.lang!r}")
        answer = self._check_python(block)
        if answer["unresolved"]:
            raise SnippetError(f"{block.where}: imports that do not resolve: {answer['unresolved']}")
        if set(answer["free"]) != marker.given():
            raise SnippetError(f"{block.where}: the fragment reads {sorted(answer['free'])} undefined, "
                               f"its marker gives {sorted(marker.given())}")
        self.ran.append(f"{block.where} python fragment checked (given {' '.join(sorted(marker.given()))})")

    def _needs(self, block: Block) -> Marker:
        marker = block.marker("needs")
        assert marker is not None
        for word in marker.rest.split():
            if re.fullmatch(r"[A-Z][A-Z0-9_]+", word) and word in self.env:
                raise SnippetError(f"{block.where}: marked as needing {word}, which the page's environment has")
        return marker

    def _check_needs_python(self, block: Block, wrote: bool = False) -> None:
        marker = self._needs(block)
        answer = self._check_python(block)
        named = set(re.findall(r"[\w.]+", marker.rest))
        unresolved = [u for u in answer["unresolved"] if u.split(" ", 1)[0] not in named]
        if unresolved:
            raise SnippetError(f"{block.where}: imports that do not resolve: {unresolved}")
        if answer["free"]:
            raise SnippetError(f"{block.where}: reads names nothing defines: {answer['free']}")
        self.ran.append(f"{block.where} python checked (needs {marker.rest})" + (f", written to {block.file}" if wrote else ""))

    # -- shell ------------------------------------------------------------------------------------

    def _command(self, command: Command, block: Block) -> subprocess.CompletedProcess[str]:
        text = SERVER_PORT.sub(rf"\g<1>:{self.port}", command.text) if self.port else command.text
        try:
            return subprocess.run(["bash", "-c", text], cwd=self.workdir, env=self.env, capture_output=True,
                                  text=True, timeout=300, check=False)
        except subprocess.TimeoutExpired as exc:
            raise SnippetError(f"{self.page}:{command.line}: `{command.text}` did not end within 300 s") from exc

    def _shell(self, block: Block) -> None:
        cmds = commands(block)
        server = block.marker("server")
        needs = block.marker("needs")
        if server:
            if not cmds:
                raise SnippetError(f"{block.where}: a server block with no command")
            *cmds, last = cmds
        bindings: dict[str, str] = {}
        for command in cmds:
            command = self._bound(command, bindings)
            done = self._command(command, block)
            if needs:
                self._needs(block)
                said = done.stdout + done.stderr
                if done.returncode == 0 or not all(w.lower() in said.lower() for w in needs.rest.split()[:1]):
                    raise SnippetError(f"{self.page}:{command.line}: marked as needing {needs.rest}, but `{command.text}` "
                                       f"exited {done.returncode} without naming it\n{_tail(said)}")
                self.ran.append(f"{self.page}:{command.line} `{command.text}` refused: needs {needs.rest}")
                continue
            if done.returncode != command.expected_exit:
                raise SnippetError(f"{self.page}:{command.line}: `{command.text}` exited {done.returncode}, "
                                   f"expected {command.expected_exit}\n{_tail(done.stdout + done.stderr)}")
            shown = command.shown_output
            if shown is not None and not any(line.startswith(shown) for line in done.stdout.splitlines()):
                raise SnippetError(f"{self.page}:{command.line}: `{command.text}` printed no line starting {shown!r}\n{_tail(done.stdout + done.stderr)}")
            self._bind(command, done.stdout, bindings)
            self._exported(command)
            self.ran.append(f"{self.page}:{command.line} `{command.text.splitlines()[0]}` exited {done.returncode}")
        if server:
            self._start_server(last, block)

    def _exported(self, command: Command) -> None:
        words = shlex.split(command.text, comments=True)
        if words[:1] == ["export"]:
            for word in words[1:]:
                name, _, value = word.partition("=")
                self.env[name] = value

    def _bound(self, command: Command, bindings: Mapping[str, str]) -> Command:
        text = command.text
        for name, value in bindings.items():
            text = re.sub(rf"(?<=/){re.escape(name)}(?=[/?'\s]|$)", value, text)
        return Command(text, command.line, command.output)

    def _bind(self, command: Command, stdout: str, bindings: dict[str, str]) -> None:
        """A console block's output line ``{"session_id": "S", ...}`` names a value later commands use as
        ``/S/``: bind each such placeholder (an upper-case string value) to what the command printed."""
        shown = " ".join(command.output)
        if not shown.lstrip().startswith("{"):
            return
        try:
            printed = json.loads(stdout)
        except ValueError as exc:
            raise SnippetError(f"{self.page}:{command.line}: the page shows JSON after `{command.text}`, which printed {stdout[:500]!r}") from exc
        for key, name in re.findall(r'"(\w+)": "([A-Z][A-Z0-9]*)"', shown):
            if name in bindings:
                continue
            taken = set(bindings.values())
            value = next((v for k, v in _walk(printed) if k == key and isinstance(v, str) and v not in taken), None)
            if value is None:
                raise SnippetError(f"{self.page}:{command.line}: the page shows {key!r} {name!r}, the output has none: {stdout[:500]}")
            bindings[name] = value

    def _start_server(self, command: Command, block: Block) -> None:
        self._stop_server()
        log = self.scratch / f"server-{command.line}.log"
        text = SERVER_PORT.sub(rf"\g<1>:{self.port}", command.text)
        proc = subprocess.Popen(["bash", "-c", text], cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.server = (proc, command, log)
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise SnippetError(f"{self.page}:{command.line}: the server `{command.text}` exited {proc.returncode}\n{_tail(log.read_text())}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SnippetError(f"{self.page}:{command.line}: the server `{command.text}` did not answer /healthz within 180 s\n{_tail(log.read_text())}")
            time.sleep(0.3)
        self.ran.append(f"{self.page}:{command.line} `{command.text}` serving")

    def _stop_server(self) -> None:
        if self.server is None:
            return
        proc, command, log = self.server
        if proc.poll() is not None:
            raise SnippetError(f"{self.page}:{command.line}: the server `{command.text}` had exited {proc.returncode} before "
                               f"the page was done with it\n{_tail(log.read_text())}")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal: the whole foreground group
        started = time.monotonic()
        while time.monotonic() - started < 30:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            proc.poll()
            time.sleep(0.1)
        else:
            raise SnippetError(f"{self.page}:{command.line}: the server `{command.text}` still ran 30 s after Ctrl-C\n{_tail(log.read_text())}")
        proc.wait()
        self.server = None
        self.ran.append(f"{self.page}:{command.line} `{command.text}` stopped by Ctrl-C in {time.monotonic() - started:.1f} s")

    # -- markers that are checked, not run --------------------------------------------------------

    def _check_output(self, block: Block) -> None:
        if any(line.startswith("$ ") for line in block.text.splitlines()):
            raise SnippetError(f"{block.where}: marked as output, but it has a `$` prompt: a command to run")
        if block.lang == "json":
            try:
                json.loads(block.text)
            except ValueError as exc:
                raise SnippetError(f"{block.where}: marked as JSON output, which does not parse: {exc}") from exc
        self.ran.append(f"{block.where} output")

    def _check_synopsis(self, block: Block, in_clone: bool) -> None:
        where = ROOT if in_clone else self.workdir
        texts = [c.text for c in commands(block)] if block.lang in SHELLS else [ln for ln in block.text.splitlines() if ln.strip()]
        extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
        for text in texts:
            for part in re.split(r"\s*&&\s*", text.replace("\\\n", " ")):
                self._check_usage(block, part, where, extras)
        self.ran.append(f"{block.where} {'in a clone' if in_clone else 'synopsis'} checked ({len(texts)} lines)")

    def _check_usage(self, block: Block, part: str, where: Path, extras: set[str]) -> None:
        words = shlex.split(part.split(" #", 1)[0].replace("…", "x"))
        while words and (words[0] == "export" or re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0])):
            words = words[1:]
        if not words or words[0] == "." or words[:3] == ["python3", "-m", "venv"]:
            return  # an assignment, or making and activating a virtualenv
        program = Path(words[0]).name if words[0].startswith(".venv/bin/") else words[0]
        if shutil.which(program, path=self.env["PATH"]) is None:
            raise SnippetError(f"{block.where}: `{part}` runs {program!r}, which is not installed")
        for extra in re.findall(r"\.\[([\w,-]+)\]", part):
            unknown = set(extra.split(",")) - extras
            if unknown:
                raise SnippetError(f"{block.where}: `{part}` installs extras {sorted(unknown)} that pyproject.toml does not declare")
        if program in ("helix-dbos", "dbos"):
            head = [program, *[w for w in words[1:2] if re.fullmatch(r"[a-z][a-z-]*", w)]]
        elif program in ("python", "python3") and words[1:2] == ["-m"] and len(words) > 2:
            head = ["python", "-m", words[2]]
        else:
            return
        done = subprocess.run([*head, "--help"], cwd=where, env=self.env, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise SnippetError(f"{block.where}: `{' '.join(head)} --help` exited {done.returncode}\n{_tail(done.stdout + done.stderr)}")
        missing = [f for f in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", part) if f not in done.stdout]
        if missing:
            raise SnippetError(f"{block.where}: `{part}` shows {missing}, which `{' '.join(head)} --help` does not list")

    # -- sql --------------------------------------------------------------------------------------

    def _ledger_url(self) -> str:
        if self.database_url is not None:
            return self.database_url
        files = sorted(self.workdir.rglob("*.sqlite"), key=lambda p: p.stat().st_mtime)
        if not files:  # the page made none: its database as a launched runtime leaves it (DBOS's tables and the ledger's)
            return self.new_ledger(self.workdir / "helix_dbos.sqlite")
        return f"sqlite:///{files[-1]}"

    def _sql(self, block: Block) -> None:
        import sqlalchemy as sa

        url = self._ledger_url()
        sqlite = url.startswith("sqlite")
        first = block.text.lstrip().split("\n", 1)[0].strip().lower()
        if (first == "-- postgres" and sqlite) or (first == "-- sqlite" and not sqlite):
            self.ran.append(f"{block.where} sql for {'Postgres' if sqlite else 'SQLite'}, skipped here")
            return
        if not sqlite:
            url = url.replace("postgresql://", "postgresql+psycopg://", 1)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                session = conn.execute(sa.text(f"SELECT session_id FROM {'' if sqlite else 'helix.'}sessions ORDER BY created_at DESC LIMIT 1")).scalar()
                for statement in sql_statements(block.text):
                    sql = re.sub(r"\b(helix|dbos)\.(?=\w)", "", statement) if sqlite else statement
                    params = {"session_id": session} if ":session_id" in sql else {}
                    try:
                        conn.execute(sa.text(sql), params).fetchall()
                    except sa.exc.SQLAlchemyError as exc:
                        raise SnippetError(f"{block.where}: the SQL failed on {'SQLite' if sqlite else 'Postgres'}\n{statement}\n{exc}") from exc
                conn.rollback()
        finally:
            engine.dispose()
        self.ran.append(f"{block.where} sql on {'SQLite' if sqlite else 'Postgres'}")


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) of a JSON value, depth first, in document order."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)
