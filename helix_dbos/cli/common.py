"""What every command shares: the database URL, the app's runtime, JSON output and typed errors.

Reads (``sessions``, ``show``, ``calls``) go through the runtime's ``Reader`` on a bare engine and
never launch DBOS, so they are safe beside a live service. Commands that open or answer runs launch the app's runtime in this
process and wait until the run is at rest: a run left mid-flight by a CLI that exits would wait for
this executor id's next launch (or ``helix-dbos recover``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ConfigurationError, HelixError, ValidationError

#: The ``application_name`` of a one-shot command's connections (one at a time, none kept).
CLI_APPLICATION_NAME = "helix-dbos:cli"

if TYPE_CHECKING:  # SQLAlchemy and the runtime load in the commands that use them, not for --help
    from ..runtime import Reader, Runtime

P = ParamSpec("P")
R = TypeVar("R")

def _width(stream: Any) -> int | None:
    """A terminal's own width; piped output gets COLUMNS or 160, not Rich's 80, so grep sees whole rows."""
    if stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() else 160


def tolerant_streams() -> None:
    """Print what the ledger holds even when UTF-8 cannot encode it.

    A tool or a model may produce a lone surrogate, which the ledger keeps exactly; written raw it
    would end ``show`` or ``calls`` in a traceback. It is printed as its ``\\udXXX`` escape instead
    (``--json`` output is ASCII-safe JSON anyway).
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


console = Console(highlight=False, width=_width(sys.stdout))
err_console = Console(stderr=True, highlight=False, width=_width(sys.stderr))

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL. Default: HELIX_DBOS_DATABASE_URL, then dbos-config.yaml, then sqlite:///helix_dbos.sqlite."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts) instead of tables.")]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds to wait for the run to come to rest.")]


def check_session_id(session_id: str) -> str:
    """The inputs' own checks (``definitions.inputs``), loaded when a command uses them (``--help`` stays light)."""
    from ..definitions.inputs import check_session_id as check

    return check(session_id)


def check_priority(priority: int | None) -> None:
    """Refused before launching: a refusal costs no DBOS launch."""
    from ..definitions.inputs import check_priority as check

    check(priority)


def check_text(name: str, value: str | None, max_length: int | None = None) -> None:
    from ..definitions.inputs import check_text as check

    check(name, value, max_length)


def database_url(explicit: str | None) -> str:
    """The URL to use, refused at once (typed) when it is not a Postgres or SQLite URL."""
    from ..ledger.engine import check_url
    from ..runtime.process.config import resolve_database_url
    from ..settings import from_environ

    url = resolve_database_url(explicit, from_environ())
    check_url(url)
    return url


def esc(value: Any) -> str:
    """User data (ids, names, outputs) for a Rich markup string: ``x[/bold]`` must print, not parse."""
    return escape(str(value))


def explain_database_error(exc: BaseException) -> ConfigurationError | None:
    """``ledger.engine.explain_database_error``, imported when needed (SQLAlchemy is not, for --help)."""
    from ..ledger.engine import explain_database_error as explain

    return explain(exc)


def unique_prefix(kind: str, given: str, ids: list[str], flag: str) -> str:
    """``given`` itself, or the one id it is a prefix of (tables print ids shortened); ambiguity is refused."""
    if given in ids:
        return given
    found = [i for i in ids if i.startswith(given)]
    if len(found) > 1:
        shown = ", ".join(sorted(found)[:5]) + (" ..." if len(found) > 5 else "")
        raise ValidationError(f"{kind} {given!r} is ambiguous: it starts {len(found)} ids ({shown}); give more of {flag}", detail={"matches": sorted(found)})
    return found[0] if found else given


def resolve_session(reader: Reader, given: str) -> str:
    return unique_prefix("session id", given, reader.session_ids_starting(given), "SESSION_ID")


def resolve_dispatch(reader: Reader, session_id: str, given: str) -> str:
    return unique_prefix("dispatch id", given, reader.dispatch_ids_starting(session_id, given), "DISPATCH_ID")


def resolve_ids(db: str | None, session_id: str, dispatch_id: str | None = None) -> tuple[str, str | None]:
    """Full ids for the ones a user typed (any unique prefix); unknown ones are left for the runtime to refuse."""
    with ledger(db) as reader:
        sid = resolve_session(reader, session_id)
        return sid, (resolve_dispatch(reader, sid, dispatch_id) if dispatch_id is not None else None)


def executor_ever_ran(db: str | None, executor_id: str) -> bool:
    with ledger(db) as reader:
        return reader.executor_ever_ran(executor_id)


@contextmanager
def ledger(explicit: str | None) -> Iterator[Reader]:
    """A reader of the ledger, without DBOS. A missing ledger is a typed error, not a traceback."""
    import sqlalchemy as sa

    from ..ledger.engine import check_sqlite_folder, create_sync_engine, sqlite_path
    from ..runtime import Reader

    url = database_url(explicit)
    check_sqlite_folder(url)  # a missing folder is not a missing ledger: migrate would not help
    path = sqlite_path(url)
    if path is not None and not path.exists():  # opening it would create an empty file as a side effect
        raise ConfigurationError(f"no database at {path}; run `helix-dbos migrate` or pass --db", detail=url)
    engine = create_sync_engine(url, poolclass=sa.pool.NullPool, application_name=CLI_APPLICATION_NAME)
    try:
        yield Reader(engine)
    except sa.exc.OperationalError as exc:
        explained = explain_database_error(exc)
        if explained is not None:
            raise explained from None
        if "no such table" in str(exc) or "does not exist" in str(exc):
            raise ConfigurationError("the database has no helix ledger yet; run `helix-dbos migrate`", detail=str(exc.orig)) from None
        raise
    except sa.exc.ProgrammingError as exc:
        if "does not exist" in str(exc):
            raise ConfigurationError("the database has no helix ledger yet; run `helix-dbos migrate`", detail=str(exc.orig)) from None
        raise
    finally:
        engine.dispose()


@contextmanager
def launched(explicit: str | None, *, live_output: bool = False) -> Iterator[Runtime]:
    """The app's runtime (``HELIX_DBOS_APP``), launched in this process for the command's duration;
    ``live_output`` (``--live``) turns the runtime's live output on for it."""
    from ..loader import load_runtime

    runtime = load_runtime(database_url=explicit)
    if live_output:
        runtime.live_output = True
    runtime.launch()
    try:
        yield runtime
    finally:
        runtime.shutdown()


def workflow_done(run_id: str, limit: float = 10.0) -> None:
    """Wait for DBOS to record the run's workflow as ended.

    The ledger says "at rest" a moment before DBOS records the workflow's end; a process that shut
    DBOS down in between would leave the workflow pending, replayed at this executor's next launch.
    """
    from dbos import DBOS

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        status = DBOS.get_workflow_status(run_id)
        if status is None or status.status not in ("PENDING", "ENQUEUED"):
            return
        time.sleep(0.02)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


def model_json(model: Any) -> Any:
    """``model.model_dump(mode="json")``, or its Python form when a string cannot go through pydantic's
    JSON mode (a lone surrogate in an object key of a tool's result: ``json.dumps`` escapes it).

    A dataclass view (a ``StopReceipt``) prints as its fields."""
    if dataclasses.is_dataclass(model) and not isinstance(model, type):
        return dataclasses.asdict(model)
    try:
        return model.model_dump(mode="json")
    except (UnicodeEncodeError, ValueError):
        return model.model_dump(mode="python")


def print_json(value: Any) -> None:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    sys.stdout.write(json.dumps(value, default=_default, indent=2) + "\n")
    sys.stdout.flush()


def short(value: str | None, n: int = 8) -> str:
    return "-" if not value else value[:n]


#: The exit status of a refused start of a command that serves (``serve``, ``worker``, and
#: ``python -m helix_dbos.service``): a bad setting, an app that does not load, a port in use, a
#: database or executor id the runtime cannot have. 2, as a usage error: nothing was started.
REFUSED_START = 2


def _refused(exc: HelixError, as_json: bool, status: int = 1) -> NoReturn:
    if as_json:
        print_json(exc.to_dict())
    else:
        err_console.print(f"[bold red]error[/] [dim]({exc.code})[/]: {esc(exc.message)}")
        if exc.detail:  # a structured detail as JSON, as --json prints it (not a Python repr)
            detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail, ensure_ascii=False, default=str)
            err_console.print(f"[dim]{esc(detail)}[/]")
    raise typer.Exit(status) from None


#: The largest ``--limit`` a listing takes: more rows than a terminal or a script wants, far below
#: the 64-bit integers the databases' ``LIMIT`` takes (a larger number was a driver traceback).
MAX_LIMIT = 1_000_000


def usage_error(message: str) -> NoReturn:
    """A bad option value: one line on stderr and exit status 2 (a usage error, as Click's own)."""
    err_console.print(f"[bold red]error[/] [dim]({ValidationError.code})[/]: {esc(message)}", soft_wrap=True)
    raise typer.Exit(2)


def int_range(flag: str, low: int, high: int) -> Callable[[int | None], int | None]:
    """An option callback refusing values outside ``low..high`` with ``usage_error``."""

    def check(value: int | None) -> int | None:
        if value is not None and not low <= value <= high:
            usage_error(f"{flag} must be an integer from {low} to {high}, not {value}")
        return value

    return check


def typed_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """A refusal prints its user-safe sentence and code (or the JSON body) and exits 1, never a traceback."""
    return _guarded(fn, 1)


def refused_starts(fn: Callable[P, R]) -> Callable[P, R]:
    """``typed_errors`` for the commands that serve: a refusal is a refused start, exit ``REFUSED_START``."""
    return _guarded(fn, REFUSED_START)


def _guarded(fn: Callable[P, R], status: int) -> Callable[P, R]:
    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except HelixError as exc:
            _refused(exc, bool(kwargs.get("as_json")), status)
        except Exception as exc:  # the server, not the ledger: SQLAlchemy's, psycopg's or DBOS's wrapper
            explained = explain_database_error(exc) if type(exc).__module__.startswith(("dbos", "psycopg", "sqlalchemy")) else None
            if explained is None:
                raise
            _refused(explained, bool(kwargs.get("as_json")), status)

    return run
