"""A PgBouncer of a test's own, on a free port, in front of the shared PostgreSQL.

Debian's `pgbouncer` (`.ci/run` installs it). It refuses to run as root, so as root it drops
to the `postgres` user, in a folder that user can write. Its pool holds few server connections
(`pool_size`), whatever the number of clients: the shared server's limit is shared by everyone.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.conftest import PG_URL
from tests.loopback import free_port

PGBOUNCER = "/usr/sbin/pgbouncer"

_CONFIG = """\
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/userlist.txt
pool_mode = {mode}
default_pool_size = {pool_size}
max_client_conn = {max_clients}
logfile = {folder}/pgbouncer.log
pidfile = {folder}/pgbouncer.pid
"""


def available() -> bool:
    return Path(PGBOUNCER).exists()


@contextlib.contextmanager
def pgbouncer(
    mode: str,
    *,
    users: Sequence[str] = ("postgres",),
    pool_size: int = 4,
    max_clients: int = 200,
) -> Iterator[str]:
    """Run a PgBouncer in `mode` (`transaction` or `session`); yields the ledger URL through it
    (PG_URL with the port changed), and stops it afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="ws-pgbouncer-"))
    port = free_port()
    (folder / "userlist.txt").write_text("".join(f'"{user}" ""\n' for user in users))
    (folder / "pgbouncer.ini").write_text(
        _CONFIG.format(
            port=port, folder=folder, mode=mode, pool_size=pool_size, max_clients=max_clients
        )
    )
    command = [PGBOUNCER, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chmod(folder, 0o755)
        for path in (folder, *folder.iterdir()):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(port, process, folder)
        yield PG_URL.replace(":5432/", f":{port}/")
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_for(port: int, process: subprocess.Popen[bytes], folder: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (
                (folder / "pgbouncer.log").read_text()
                if (folder / "pgbouncer.log").exists()
                else ""
            )
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {log[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError("pgbouncer did not start listening")
