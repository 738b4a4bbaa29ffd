"""W7's rollout server: ``osmosis-run serve`` in a process of its own, on a loopback port.

The server runs the benchmark's workflow and grader (``perf_flows``) from the workspace, as the
in-process eval does; it is stopped with SIGINT (a graceful shutdown) once the eval is done, and
its own CPU seconds are read from /proc before that.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .workspace import ECHO, EXACT_MATCH, HarnessError

STARTUP_S = 60.0


@dataclass
class Server:
    """A running ``osmosis-run serve``: its URL and process."""

    url: str
    process: subprocess.Popen[bytes]

    def cpu_s(self) -> float:
        """The server process's own CPU seconds so far (user + system, from /proc)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve(cli: list[str], *, cwd: Path, out: Path, concurrency: int) -> Iterator[Server]:
    """``osmosis-run serve`` of the benchmark's flows until the block ends."""
    port = _free_port()
    cmd = [*cli, "serve", "-w", ECHO, "-g", EXACT_MATCH, "--port", str(port)]
    cmd += ["--concurrency", str(concurrency), "--out", str(out)]
    (cwd / "logs").mkdir(exist_ok=True)
    log = (cwd / "logs" / "W7-serve.stderr").open("wb")
    process = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_listening(process, port)
        yield Server(url, process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(STARTUP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise HarnessError(f"osmosis-run serve exited with {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise HarnessError(f"osmosis-run serve did not listen on port {port} within {STARTUP_S:g}s")
