"""A throwaway PostgreSQL cluster for the demo and benchmarks: initdb in a temporary directory,
listening only on a Unix socket there, removed on exit. PostgreSQL refuses to run as root, so as
root the server runs as the ``postgres`` OS user (the directory is handed over to it).
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Self

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))


class ThrowawayCluster:
    """``with ThrowawayCluster() as c: psycopg.connect(c.dsn("postgres"))``"""

    def __init__(self, settings: dict[str, str] | None = None, keep: bool = False,
                 cron_database: str | None = None):
        """``cron_database``: preload pg_cron and let it run jobs in that database (connecting
        through this cluster's Unix socket, the only way in)."""
        self.settings = settings or {}
        self.keep = keep
        self.cron_database = cron_database
        self.root: Path | None = None

    # -- life cycle
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="plpy_anon_cluster_"))
        os.chmod(self.root, 0o755)
        (self.root / "socket").mkdir()
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            for p in (self.root, self.root / "socket"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        self._run([PG_BIN / "initdb", "-D", self.datadir, "-U", "postgres", "--auth=trust",
                   "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"])
        conf = {"listen_addresses": "''", "unix_socket_directories": f"'{self.socket_dir}'",
                "fsync": "off", "max_connections": "20", **self.cron_settings(), **self.settings}
        with open(self.datadir / "postgresql.auto.conf", "a") as f:
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())
        self._run([PG_BIN / "pg_ctl", "-D", self.datadir, "-l", self.root / "server.log",
                   "-w", "start"])

    def stop(self) -> None:
        if self.root is None:
            return
        if (self.datadir / "postmaster.pid").exists():
            self._run([PG_BIN / "pg_ctl", "-D", self.datadir, "-m", "fast", "-w", "stop"])
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def cron_settings(self) -> dict[str, str]:
        if not self.cron_database:
            return {}
        return {"shared_preload_libraries": "'pg_cron'", "cron.database_name": f"'{self.cron_database}'",
                "cron.host": f"'{self.socket_dir}'"}

    # -- addresses
    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.socket_dir} dbname={dbname} user=postgres"

    # -- helpers
    def _run(self, argv) -> None:
        argv = [str(a) for a in argv]
        if os.geteuid() == 0:
            argv = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"] + argv
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            log = ""
            if self.root is not None and (self.root / "server.log").exists():
                log = (self.root / "server.log").read_text()[-2000:]
            raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}{log}")
