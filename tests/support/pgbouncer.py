"""A PgBouncer of a test's own, in transaction mode, on a free loopback port in front of the test
server (the Debian package's binary; a test skips, saying so, where it is not installed)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.support.procs import free_port


def binary() -> str | None:
    return shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None)


class PgBouncer:
    """``pool_size`` server connections per database, every client transaction on any of them."""

    def __init__(self, server_url: str, pool_size: int) -> None:
        exe = binary()
        assert exe is not None
        server = make_url(server_url)
        self.pool_size = pool_size
        self.port = free_port()
        # readable by the unprivileged user it drops to when started as root (it refuses to run as root)
        self.folder = Path(tempfile.mkdtemp(prefix="helix-pgbouncer-"))
        self.folder.chmod(0o755)
        ini = self.folder / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={server.host or '127.0.0.1'} port={server.port or 5432} user={server.username or 'postgres'}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            "auth_type = any\npool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\nmax_client_conn = 500\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        ini.chmod(0o644)
        args = [exe, *(["-u", "nobody"] if os.geteuid() == 0 else []), str(ini)]
        self.log = self.folder / "pgbouncer.log"
        self._log = open(self.log, "w")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"pgbouncer did not start: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.1)

    def url_for(self, database_url: str) -> str:
        """``database_url``'s database, through this PgBouncer."""
        return make_url(database_url).set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)
