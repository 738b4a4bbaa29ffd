"""Two hosts on one machine: two network namespaces joined by a veth pair, and a Ray cluster on them.

    with two_hosts() as (a, b):                       # 10.231.N.1 (host A), 10.231.N.2 (host B)
        with RayCluster(a, b) as cluster:             # head (1 CPU) on A, a worker (2 CPUs) on B
            done = a.run([*osmosis_run, "eval", ..., "--ray-address", cluster.address])
        with FakeModel(a, delay=0.05) as model:       # tests/fake_upstream.py on A's address
            ... model.url, model.requests()

Each host is a named namespace (``ip netns add osr-<pid>-<n>-a``) with loopback up and one end
of the veth pair addressed inside it: nothing is added to the namespace the tests run in, so
this works as root on the machine and inside CI's ``unshare --net``. Every Ray node is started
with ``ip netns exec`` and has a HOME and a temp dir of its own. The teardown ends every process
in the hosts' namespaces (all started here, by PID: SIGTERM, then SIGKILL), deletes the
namespaces (which deletes the veths) and the temp dirs, also when a test fails.

Run as a script in a host, it is the fake model: ``python tests/hosts.py model --host IP
[--delay S]`` prints its URL, then answers each line ``count`` on stdin with the number of chat
requests it received.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV_BIN = Path(sys.executable).parent
SUBNET = "10.231.7"
HEAD_PORT = 6379  # each cluster has namespaces of its own: fixed ports never collide
OBJECT_STORE = 80 * 1024 * 1024
# Ray notices a dead node after about 1.5 s (the raylet-kill test waits for it).
SYSTEM_CONFIG = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
    "health_check_initial_delay_ms": 0,
}
_count = itertools.count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def wait_for(check: Callable[[], bool], *, timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


class Host:
    """One network namespace: its name, its address, a folder of its own."""

    def __init__(self, netns: str, ip: str, root: Path) -> None:
        self.netns, self.ip, self.root = netns, ip, root
        self.home = root / "home"
        self.home.mkdir(parents=True)

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` run in this host."""
        return ["ip", "netns", "exec", self.netns, *args]

    def env(self, **extra: str) -> dict[str, str]:
        """The test process's environment (osmosis-run's variables dropped, the test flows
        importable), HOME this host's, Ray's usage stats off."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OSMOSIS_", "RAY_"))}
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), *sys.path])
        env.update(HOME=str(self.home), RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
        env.update(extra)
        return env

    def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``args`` in this host to the end; its output captured."""
        return subprocess.run(
            self.command(args),
            cwd=cwd,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def popen(
        self, args: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start ``args`` in this host, stdout and stderr piped."""
        return subprocess.Popen(
            self.command(args),
            cwd=cwd,
            env=env or self.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @contextlib.contextmanager
    def started(
        self, args: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> Iterator[subprocess.Popen[str]]:
        """``popen``, killed (if still running) and its pipes closed on the way out."""
        child = self.popen(args, cwd=cwd, env=env)
        try:
            yield child
        finally:
            if child.poll() is None:
                child.kill()
            with contextlib.suppress(Exception):
                child.communicate(timeout=30)
            for pipe in (child.stdin, child.stdout, child.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()

    def pids(self) -> list[int]:
        """Every process in this host (all of them started by these tests)."""
        done = subprocess.run(
            ["ip", "netns", "pids", self.netns], capture_output=True, text=True, check=False
        )
        return [int(pid) for pid in done.stdout.split() if pid != str(os.getpid())]

    def pids_named(self, name: str) -> list[int]:
        """The processes in this host whose command name is ``name`` (``raylet``, ...)."""
        found = []
        for pid in self.pids():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                    found.append(pid)
        return found

    def cpu_s(self) -> dict[int, float]:
        """CPU seconds (user + system) of each process now in this host."""
        tick = os.sysconf("SC_CLK_TCK")
        cpu: dict[int, float] = {}
        for pid in self.pids():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
                cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
        return cpu

    def end_processes(self, timeout: float = 3) -> None:
        """SIGTERM every process in this host, SIGKILL what is left after ``timeout``."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, timeout)):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            with contextlib.suppress(AssertionError):
                wait_for(lambda: not self.pids(), timeout=wait, what="the host's processes")
                return


def netns_names() -> list[str]:
    """The named network namespaces of this machine (``ip netns list``)."""
    done = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=30
    )
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def sweep_stale() -> list[str]:
    """Remove the hosts a killed test run left behind, and return their names.

    ``two_hosts`` removes its namespaces on the way out, failure or not, but a run killed
    outright (SIGKILL, a CI timeout) cannot. Named namespaces outlive every process (they are
    files under /run/netns), so the next ``two_hosts`` removes those named after a process
    that is gone (``osr-<pid>-<n>-a``), ending what still runs in them first. A live run's
    hosts are left alone.
    """
    removed = []
    for name in netns_names():
        match = re.fullmatch(r"osr-(\d+)-\d+-[ab]", name)
        if match is None or Path(f"/proc/{match[1]}").exists():
            continue
        Host(name, "", Path()).end_processes()
        _ip("netns", "del", name)
        removed.append(name)
    return removed


@contextlib.contextmanager
def two_hosts() -> Iterator[tuple[Host, Host]]:
    """Hosts A (``SUBNET.1``) and B (``SUBNET.2``), joined by a veth pair; removed on the way
    out (a namespace that cannot be removed is an error), and those of killed runs before."""
    sweep_stale()
    n = next(_count)
    root = Path(tempfile.mkdtemp(prefix="osr-h"))
    names = [f"osr-{os.getpid()}-{n}-a", f"osr-{os.getpid()}-{n}-b"]
    made: list[Host] = []
    try:
        for name, end, side in zip(names, ("1", "2"), "ab", strict=True):
            _ip("netns", "add", name)
            made.append(Host(name, f"{SUBNET}.{end}", root / side))
        a, b = made
        _ip("-n", a.netns, "link", "add", "osr0", "type", "veth", "peer", "name", "osr0",
            "netns", b.netns)  # fmt: skip
        for host in (a, b):
            _ip("-n", host.netns, "addr", "add", f"{host.ip}/24", "dev", "osr0")
            _ip("-n", host.netns, "link", "set", "lo", "up")
            _ip("-n", host.netns, "link", "set", "osr0", "up")
        yield a, b
    finally:
        for host in reversed(made):
            host.end_processes()
        left = []
        for host in reversed(made):
            try:
                _ip("netns", "del", host.netns)
            except subprocess.CalledProcessError as exc:
                left.append(f"{host.netns} ({exc.stderr.strip()})")
        shutil.rmtree(root, ignore_errors=True)
        if left:
            raise RuntimeError(f"network namespaces not removed: {', '.join(left)}")


class RayCluster:
    """A head node (1 CPU) on host A, a worker node (2 CPUs) on host B, each started with
    ``ray start`` in its host, HOME and temp dir its own; ``env`` is added to both nodes'
    (``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN``). Leaving the block ends both nodes' processes."""

    def __init__(
        self, head: Host, worker: Host, *, env: dict[str, str] | None = None, worker_cpus: int = 2
    ) -> None:
        self.head, self.worker = head, worker
        self.extra = dict(env or {})
        self.worker_cpus = worker_cpus
        self.address = f"{head.ip}:{HEAD_PORT}"

    def __enter__(self) -> RayCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def node_env(self, host: Host) -> dict[str, str]:
        """A node's environment: no PYTHONPATH (the workers get the flows as users' workers do,
        shipped with the driver's working directory)."""
        env = host.env(**self.extra)
        del env["PYTHONPATH"]
        return env

    def _start(self) -> None:
        ray = str(VENV_BIN / "ray")
        common = ["--object-store-memory", str(OBJECT_STORE), "--disable-usage-stats"]
        head = self.head.run(
            [ray, "start", "--head", "--node-ip-address", self.head.ip, "--port",
             str(HEAD_PORT), "--num-cpus", "1", "--include-dashboard", "false",
             "--temp-dir", str(self.head.root / "ray"), "--system-config",
             json.dumps(SYSTEM_CONFIG), *common],
            env=self.node_env(self.head), timeout=120,
        )  # fmt: skip
        if head.returncode != 0:
            raise RuntimeError(f"ray start --head failed:\n{head.stdout}\n{head.stderr}")
        worker = self.worker.run(
            [ray, "start", "--address", self.address, "--node-ip-address", self.worker.ip,
             "--num-cpus", str(self.worker_cpus), "--temp-dir", str(self.worker.root / "ray"),
             *common],
            env=self.node_env(self.worker), timeout=120,
        )  # fmt: skip
        if worker.returncode != 0:
            raise RuntimeError(f"ray start (worker) failed:\n{worker.stdout}\n{worker.stderr}")
        self.wait_for_nodes(2)

    def alive_nodes(self) -> list[str]:
        """The IPs of the nodes the cluster holds alive (a driver on host A asks)."""
        return list(self.node_ids())

    def node_ids(self) -> dict[str, str]:
        """Each live node's Ray node ID, by its IP (a driver on host A asks)."""
        probe = (
            "import json, ray\n"
            f"ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False)\n"
            "print(json.dumps({n['NodeManagerAddress']: n['NodeID'] for n in ray.nodes()"
            " if n['Alive']}))\n"
        )
        done = self.head.run(
            [sys.executable, "-c", probe], env=self.node_env(self.head), timeout=60
        )
        if done.returncode != 0:
            return {}
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    def wait_for_nodes(self, n: int, timeout: float = 60) -> None:
        wait_for(
            lambda: len(self.alive_nodes()) == n, timeout=timeout, what=f"{n} nodes", every=0.5
        )

    def raylet_pid(self, host: Host) -> int:
        """The PID of the raylet of the node on ``host``."""
        (pid,) = host.pids_named("raylet")
        return pid

    def stop(self) -> None:
        for host in (self.worker, self.head):
            host.end_processes()
        for host in (self.worker, self.head):
            shutil.rmtree(host.root / "ray", ignore_errors=True)


class FakeModel:
    """tests/fake_upstream.py as a process on ``host``'s address (or ``address``, such as its
    loopback); ``requests()`` asks it how many chat requests it has received."""

    def __init__(self, host: Host, *, delay: float = 0.0, address: str | None = None) -> None:
        self.host, self.delay = host, delay
        self.address = address or host.ip
        self.url = ""
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> FakeModel:
        args = [sys.executable, str(Path(__file__).resolve()), "model", "--host", self.address]
        self.process = self.host.popen([*args, "--delay", str(self.delay)])
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.__exit__()
            raise RuntimeError("the fake model did not start")
        return self

    def requests(self) -> int:
        assert self.process is not None
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write("count\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def __exit__(self, *_: object) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(Exception):
            self.process.communicate(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _serve_model(host: str, delay: float) -> None:
    from fake_upstream import Reply, Upstream, _serve_connection

    up = Upstream(default=Reply(delay=delay))

    def answer_counts() -> None:
        for line in sys.stdin:
            if line.strip() == "count":
                print(len(up.chat_requests()), flush=True)
        os._exit(0)

    async def run() -> None:
        server = await asyncio.start_server(
            lambda r, w: _serve_connection(up, r, w), host, 0, backlog=4096
        )
        print(f"http://{host}:{server.sockets[0].getsockname()[1]}/v1", flush=True)
        threading.Thread(target=answer_counts, daemon=True).start()
        async with server:
            await server.serve_forever()

    asyncio.run(run())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tests/hosts.py")
    parser.add_argument("what", choices=["model"])
    parser.add_argument("--host", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    _serve_model(args.host, args.delay)


def osmosis_run() -> list[str]:
    """The command that runs osmosis-run from this checkout."""
    return [sys.executable, "-m", "osmosis_run"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    main()
