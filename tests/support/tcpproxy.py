"""A TCP proxy between a runtime and the shared Postgres, that a test can cut and restore.

The shared server must never be stopped, so an outage is played here: ``cut()`` resets every
connection through the proxy and refuses new ones (each accepted socket is reset at once, which a
client sees as "server closed the connection unexpectedly"), ``restore()`` forwards again.

``stall()`` plays the other kind of outage, a server (or a link) that stops answering without
closing anything: connections stay open and new ones are accepted, but no byte is forwarded either
way; the kernel still acknowledges what the client sends, so no TCP timeout or keepalive notices.
``restore()`` delivers what was held and forwards again, as a server that wakes up would. Threads,
no asyncio: it runs beside whatever the test process does.

``lose_commit_ack(marker)`` plays the outage that makes a retry dangerous: on the first connection
whose client sends ``marker`` (a session id in a bound parameter), the next ``COMMIT`` reaches the
server, which commits, and its reply is dropped and the connection reset: the client never hears
that its transaction committed. One-shot; ``acks_lost`` counts the replies dropped.

``cut_after_commit(marker)`` plays an outage that begins just after a transaction committed: the
reply to the next ``COMMIT`` of the first connection that sends ``marker`` is delivered, then the
proxy cuts (``cut()``). ``cuts_after_commit`` counts them.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url


def _reset(sock: socket.socket) -> None:
    """Drop a connection as a crashed server would: the peer's next read fails at once.

    ``shutdown`` first: a bare ``close`` from this thread would neither wake the pump thread blocked
    in ``recv`` on it nor end the connection (the kernel keeps it while a syscall holds the socket).
    SO_LINGER 0 turns the final close into a reset.
    """
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class TcpProxy:
    """Listens on 127.0.0.1 at a random port and forwards each connection to ``target``."""

    def __init__(self, target_host: str = "127.0.0.1", target_port: int = 5432) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._flowing = threading.Event()  # cleared while stalled: pumps hold what they read
        self._flowing.set()
        self.accepted = 0
        self.refused = 0
        self.dropped = 0
        self.acks_lost = 0
        self._trap: bytes | None = None
        self._watching: set[socket.socket] = set()  # client sockets that sent the trap's marker
        self._doomed: set[socket.socket] = set()  # upstream sockets whose next reply is dropped
        self._cut_after = False  # the trap cuts after the reply instead of dropping it
        self._last: set[socket.socket] = set()  # upstream sockets whose next reply is the last before a cut
        self.cuts_after_commit = 0
        threading.Thread(target=self._accept_loop, name="tcpproxy-accept", daemon=True).start()

    @classmethod
    def for_url(cls, url: str) -> TcpProxy:
        u = make_url(url)
        return cls(u.host or "127.0.0.1", u.port or 5432)

    def url(self, url: str) -> str:
        """``url`` (a Postgres URL) pointed at this proxy instead of the server."""
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """The database goes away: every open connection is reset, new ones are refused."""
        with self._lock:
            self._cut = True
            doomed, self._open = self._open, set()
            self.dropped += len(doomed) // 2
        for s in doomed:
            _reset(s)

    @property
    def is_stalled(self) -> bool:
        return not self._flowing.is_set()

    def stall(self) -> None:
        """The database stops answering: every connection (open or new) is kept, nothing is forwarded."""
        self._flowing.clear()

    def restore(self) -> None:
        with self._lock:
            self._cut = False
        self._flowing.set()

    @contextmanager
    def outage(self, seconds: float) -> Iterator[None]:
        self.cut()
        try:
            time.sleep(seconds)
            yield
        finally:
            self.restore()

    @contextmanager
    def stalled(self, seconds: float) -> Iterator[None]:
        self.stall()
        try:
            time.sleep(seconds)
            yield
        finally:
            self.restore()

    def lose_commit_ack(self, marker: bytes) -> None:
        """Drop the reply to the next COMMIT on the first connection that sends ``marker``."""
        with self._lock:
            self._trap, self._cut_after = marker, False

    def cut_after_commit(self, marker: bytes) -> None:
        """Deliver the reply to the next COMMIT on the first connection that sends ``marker``, then cut."""
        with self._lock:
            self._trap, self._cut_after = marker, True

    def _client_sent(self, client: socket.socket, upstream: socket.socket, data: bytes) -> None:
        with self._lock:
            if self._trap is not None and self._trap in data:
                self._watching.add(client)
            if client in self._watching and b"COMMIT\x00" in data:
                self._watching.discard(client)
                self._trap = None
                (self._last if self._cut_after else self._doomed).add(upstream)

    def _server_replied(self, upstream: socket.socket, client: socket.socket) -> bool:
        """Whether this reply is the one to lose (then both ends are reset)."""
        with self._lock:
            if upstream not in self._doomed:
                return False
            self._doomed.discard(upstream)
            self.acks_lost += 1
        _reset(client)
        _reset(upstream)
        return True

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._flowing.set()  # held pumps wake and find their sockets reset
        try:
            self._listener.close()
        except OSError:
            pass

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut:
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if self._cut:
                    _reset(client)
                    _reset(upstream)
                    continue
                self._open.update((client, upstream))
                self.accepted += 1
            for a, b, outbound in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(a, b, outbound), name="tcpproxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, outbound: bool = True) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()  # stalled: hold it (the client's kernel has its ACK already)
                if outbound:
                    self._client_sent(src, dst, data)
                elif self._server_replied(src, dst):
                    break
                dst.sendall(data)
                if not outbound and src in self._last:
                    with self._lock:
                        self._last.discard(src)
                        self.cuts_after_commit += 1
                    self.cut()
                    break
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass
