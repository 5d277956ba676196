"""An ``agents.Agent``'s ``mcp_servers``, connected in whichever process runs the step.

The SDK leaves a server's connection to the app (``async with server:`` around ``Runner.run``). A
helix run has no such block: its steps run in this process or, after a crash, in another one, on
DBOS's event loop or on a caller's (``definitions/home.py``), and a run is answered across launches.
So the adapter connects each server itself, lazily, the first time a step of this process lists or
calls its tools, and keeps the connection for the next steps:

* every connection lives on one event loop of the adapter's, on a daemon thread of its own: an MCP
  client's session (its anyio task group) belongs to the task that opened it, and the loops the
  runtime runs agent code on come and go (a ``run_here`` caller's, a relaunched DBOS's). A keeper
  task per server opens it (``connect``) and closes it (``cleanup``) in the same task;
* a server that fails under a listing or a call is closed, and opened again by the next one (a
  stdio server that died is started again; its calls in flight are answered ``ToolServerError``);
* the connections are closed when the process exits (``atexit``), or by ``close_servers``; a forked
  child opens its own (the parent's loop thread and connections are not its).

The agent lists its tools through ``LinkedServer``s standing in for the app's servers in a clone of
its agent, so the SDK's own listing (tool filters, ``require_approval``, name prefixes, strict
schemas, annotations) and its own ``invoke_mcp_tool`` (``_meta`` resolvers, structured content)
run as the SDK runs them; only the connection is the adapter's. A server the app already connected
is refused: its session belongs to the app's loop.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from agents.mcp import MCPServer

from ...errors import ConfigurationError, ToolServerError
from ..mcp_tools import looks_like_transport
from . import policy as policies

__all__: list[str] = []

log = logging.getLogger("helix_dbos")

T = TypeVar("T")

#: A listing may start the server (a stdio process importing its SDK), which takes seconds on a busy
#: machine: bounded by this, so a server that never answers does not hold a step.
LIST_TIMEOUT = 30.0
#: How long closing the connections may take at exit or in ``close_servers``.
CLOSE_TIMEOUT = 5.0
#: ``_meta`` key of a call: the helix call the server is answering (its dispatch id is the key to
#: dedupe an effect on, the same on every attempt in any process).
META_KEY = "helix_dbos"

_guard = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_links: dict[int, Link] = {}  # id(app's server) -> its link; read and written on the MCP loop only


def mcp_loop() -> asyncio.AbstractEventLoop:
    """The adapter's MCP loop, started on first use on a daemon thread (it never holds the exit)."""
    global _loop
    with _guard:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="helix-openai-mcp", daemon=True).start()
            _loop = loop
        return _loop


async def on_mcp_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on the MCP loop from any loop; cancelling the waiter cancels it there."""
    future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, mcp_loop())
    return await asyncio.wrap_future(future)


class Link:
    """One app server's connection on the MCP loop: opened by a keeper task, closed by the same task."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.task: asyncio.Task[None] | None = None
        self.ready: asyncio.Future[None] | None = None
        self.stop: asyncio.Event | None = None

    async def ensure(self) -> None:
        """The server connected (opened now if it is not); raises what connecting raises."""
        if self.task is not None and not self.task.done() and self.stop is not None and self.stop.is_set():
            await asyncio.shield(self.task)  # a closing connection finishes its cleanup before the next opens
        if self.task is None or self.task.done():
            if getattr(self.server, "session", None) is not None:
                raise ConfigurationError(
                    f"MCP server {self.server.name!r} is already connected by the app; give it to the agent unconnected "
                    "(helix connects it in whichever process runs the step)"
                )
            self.ready = asyncio.get_running_loop().create_future()
            self.stop = asyncio.Event()
            self.task = asyncio.get_running_loop().create_task(self._keep(self.ready, self.stop), name=f"helix-mcp-{self.server.name}")
        assert self.ready is not None
        await asyncio.shield(self.ready)

    async def _keep(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        owner = os.getpid()
        try:
            await self.server.connect()  # type: ignore[no-untyped-call]  # on failure the SDK cleans up after itself
        except BaseException as exc:  # noqa: BLE001 handed to every waiter of this connection
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ToolServerError(f"connecting {self.server.name!r} was cancelled"))
            return
        ready.set_result(None)
        try:
            await stop.wait()
        finally:
            # A forked child holds a copy of this coroutine, suspended, on a loop it never runs; if the
            # child finalizes it, this block runs there, and cleaning the server up would close the
            # child's own connection on the same server object (its session and exit stack are the
            # child's by then). Only the process that connected cleans up.
            if os.getpid() == owner:
                await self.server.cleanup()  # type: ignore[no-untyped-call]

    def drop(self) -> None:
        """Close the connection (its keeper cleans up); the next use opens a new one."""
        if self.stop is not None:
            self.stop.set()

    async def close(self) -> None:
        self.drop()
        if self.task is not None and not self.task.done():
            await asyncio.shield(self.task)


def _link(server: MCPServer) -> Link:
    """The server's link; called on the MCP loop only (the one place ``_links`` is read and written)."""
    found = _links.get(id(server))
    if found is None or found.server is not server:
        found = _links[id(server)] = Link(server)
    return found


async def _listing(server: MCPServer, run_context: Any, agent: Any) -> list[Any]:
    await _link(server).ensure()
    return await server.list_tools(run_context, agent)


async def _calling(server: MCPServer, name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None) -> Any:
    await _link(server).ensure()
    return await (server.call_tool(name, arguments) if meta is None else server.call_tool(name, arguments, meta=meta))


async def _drop(server: MCPServer) -> None:
    _link(server).drop()


async def _busy(server: MCPServer) -> bool:
    """Whether the server sends one request at a time (the SDK's ``MCPServerStreamableHttp``) and one
    is in flight: a listing now would wait for that call to end (a step's listing before each body
    would wait for the other bodies' calls)."""
    lock = getattr(server, "_request_lock", None)
    return bool(getattr(server, "_serialize_session_requests", False)) and isinstance(lock, asyncio.Lock) and lock.locked()


async def _ensure(server: MCPServer) -> None:
    await _link(server).ensure()


async def _closing(server: MCPServer) -> None:
    await _link(server).close()


def _helix_meta(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The call's ``_meta`` with the helix call it answers added (its dispatch id, attempt, session)."""
    call = policies.CURRENT_CALL.get()
    if call is None:
        return meta
    helix = {"dispatch_id": call.dispatch_id, "attempt": call.attempt, "session_id": call.session_id, "run_id": call.run_id}
    return {**(meta or {}), META_KEY: helix}


class LinkedServer(MCPServer):
    """The app's server as the agent lists and calls it: through the adapter's connection.

    Everything else the SDK reads of a server (its name, approval policy, structured-content flag,
    ``_meta`` resolver) is the app's server's own. A listing that fails keeps the last good one (a
    server never listed in this process offers no tools, so a saved call of its tools is judged as
    a call of a removed tool: unsafe), and the reason is kept for the agents catalog.
    """

    def __init__(self, server: MCPServer) -> None:  # the base's state is the app's server's: not initialised here
        self.__dict__["app_server"] = server
        self.listed: list[Any] | None = None
        self.error: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["app_server"], name)

    @property
    def name(self) -> str:
        return str(self.app_server.name)

    async def connect(self) -> None:
        await on_mcp_loop(_ensure(self.app_server))

    async def cleanup(self) -> None:
        await on_mcp_loop(_closing(self.app_server))

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[Any]:
        if self.listed is not None and await on_mcp_loop(_busy(self.app_server)):
            return list(self.listed)  # its one request at a time is a call in flight: the listing would wait for it
        try:
            tools = await asyncio.wait_for(on_mcp_loop(_listing(self.app_server, run_context, agent)), LIST_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 keep the last good listing; say why in the log and the catalog
            self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if looks_like_transport(exc):  # a server that died is opened again by the next use; a slow one keeps its calls in flight
                await on_mcp_loop(_drop(self.app_server))
            log.warning("MCP server %r could not list its tools (%s); %s", self.name, self.error,
                        "keeping its last listing" if self.listed is not None else "its tools are not offered")
            return list(self.listed or [])
        self.listed, self.error = list(tools), None
        return list(tools)

    async def call_tool(self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None) -> Any:
        try:
            return await on_mcp_loop(_calling(self.app_server, tool_name, arguments, _helix_meta(meta)))
        except ConfigurationError:
            raise
        except Exception as exc:
            if looks_like_transport(exc):
                await on_mcp_loop(_drop(self.app_server))
                raise ToolServerError(f"tool {tool_name!r}: its MCP server {self.name!r} is unavailable ({type(exc).__name__}: {exc})") from exc
            raise

    async def list_prompts(self) -> Any:
        return await on_mcp_loop(self._ensured(self.app_server.list_prompts()))

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await on_mcp_loop(self._ensured(self.app_server.get_prompt(name, arguments)))

    async def _ensured(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            await _link(self.app_server).ensure()
        except BaseException:
            coro.close()
            raise
        return await coro


async def _close(servers: list[MCPServer] | None) -> None:
    links = list(_links.values()) if servers is None else [_links[id(s)] for s in servers if id(s) in _links]
    await asyncio.gather(*(link.close() for link in links), return_exceptions=True)


def close_servers(servers: list[MCPServer] | None = None, timeout: float = CLOSE_TIMEOUT) -> None:
    """Close the connections the adapter opened in this process (all of them, or those of
    ``servers``): each keeper cleans its server up (a stdio server's process ends). A later step
    opens them again. Called at exit; a test calls it to see a server let go."""
    loop = _loop
    if loop is None or loop.is_closed() or not loop.is_running():
        return
    future = asyncio.run_coroutine_threadsafe(_close(servers), loop)
    try:
        future.result(timeout)
    except Exception:  # best effort: a server that will not close is the process's exit to end
        log.warning("the MCP servers were not all closed within %g s", timeout, exc_info=True)


#: A forked child's copies of its parent's links (their keepers suspended on a loop that does not run
#: there): kept referenced for the child's life, so its garbage collector never finalizes them.
_inherited: list[Link] = []


def _forget_after_fork() -> None:
    """A forked child has the parent's loop object but not its thread, nor its connections: it opens its own."""
    global _guard, _loop
    _guard = threading.Lock()
    _loop = None
    _inherited.extend(_links.values())
    for link in _links.values():  # the SDK's per-connection state, as a server never connected has it
        server: Any = link.server
        if getattr(server, "session", None) is not None:
            server.session = None
            server.exit_stack = contextlib.AsyncExitStack()
            server._cleanup_lock, server._request_lock = asyncio.Lock(), asyncio.Lock()
    _links.clear()


atexit.register(close_servers)
os.register_at_fork(after_in_child=_forget_after_fork)
