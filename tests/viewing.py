"""A real ``osmosis-run view`` process on loopback, for the view's tests and benchmark.

    with start_view([runs_dir]) as view:
        view.get_json("/api/runs")
    assert view.returncode == 130  # stopped by SIGINT, as a Ctrl-C stops it

It prints its URL on stdout (with ``?token=`` when it has one); the fixture reads it, so the
port is whatever the kernel gave ``--port 0``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conftest import subprocess_env

__all__ = ["Answer", "Viewing", "start_view"]

START_S = 30.0


@dataclass
class Answer:
    """One HTTP answer."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Viewing:
    """The running view: its printed URL, its process, what it printed on stderr."""

    url: str
    process: subprocess.Popen[bytes]
    returncode: int | None = None
    stderr: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        """``http://host:port`` (no path, no token)."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        """GET ``path`` (sent as it is: no normalisation of ``..``)."""
        request = urllib.request.Request(
            self.base + path, headers={**self.headers, **(headers or {})}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return Answer(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, dict(exc.headers), exc.read())

    def get_json(self, path: str) -> Any:
        answer = self.get(path)
        assert answer.status == 200, (path, answer.status, answer.body[:300])
        return answer.json()


@contextlib.contextmanager
def start_view(
    args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[Viewing]:
    """``osmosis-run view ARGS --port 0 --no-open`` until the block ends, then SIGINT."""
    command = [sys.executable, "-m", "osmosis_run", "view", *args]
    if "--port" not in args:
        command += ["--port", "0"]
    command.append("--no-open")
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env or subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode().strip()
    if not line.startswith("http://"):
        process.kill()
        _, err = process.communicate(timeout=START_S)
        raise AssertionError(f"osmosis-run view printed {line!r}; stderr: {err.decode()}")
    view = Viewing(url=line, process=process)
    try:
        yield view
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=START_S)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        view.returncode = process.returncode
        view.stderr = err.decode()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
