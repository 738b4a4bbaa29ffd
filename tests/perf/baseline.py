"""Builds of osmosis-run installed side by side, each in its own venv: W1-ram's two programs.

``Baseline(revision).command()`` returns that build's ``osmosis-run`` console script, building it
once per machine: the revision's tree (``git archive``) is installed into a fresh venv under
``$OSMOSIS_PERF_CACHE`` (default ``~/.cache/osmosis-run-perf``), with every dependency pinned
to the version this interpreter has, so that only osmosis-run's own code differs between the
two programs. The venv is kept, keyed by revision and interpreter, and used again as long as its
dependencies still match this environment's; it is rebuilt when they do not. Building needs pip
to reach an index (or its cache); using a built venv needs nothing.

``Baseline(None)`` is the working tree (its files as git sees them, committed or not), installed
the same way, so that both programs of W1-ram start alike: a regular install in a venv of its
own, not this environment's editable install and whatever its ``site`` loads. Its venv is
rebuilt whenever the tree's files change.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from .workspace import REPO, HarnessError

DEFAULT_REVISION = "5505ddb"  # the wave-1 build
CACHE_ENV = "OSMOSIS_PERF_CACHE"
MANIFEST = "osmosis-perf-baseline.json"  # written last: a venv without it is incomplete
_OURS = "osmosis-run"
_TOOLS = frozenset({"pip", "setuptools", "wheel"})  # the venv's own, not the program's


class Baseline:
    """One revision of osmosis-run in a cached venv of its own."""

    def __init__(self, revision: str | None = DEFAULT_REVISION) -> None:
        self.revision = revision or "working tree"
        self.commit = _resolve(revision) if revision else _tree_digest()
        cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "osmosis-run-perf")
        kind = "baseline" if revision else "current"
        self.venv = cache / f"{kind}-{self.commit[:12]}-{sys.implementation.cache_tag}"
        if not revision:  # one venv for the working tree, whatever its state
            self.venv = cache / f"{kind}-{sys.implementation.cache_tag}"
        self._from_tree = not revision

    @property
    def script(self) -> Path:
        """The venv's ``osmosis-run`` console script."""
        return self.venv / "bin" / "osmosis-run"

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.venv / "bin" / "python"

    def command(self, log: Callable[[str], None]) -> list[str]:
        """The baseline's ``osmosis-run`` command, building its venv first if needed.

        Raises:
            HarnessError: the revision cannot be archived or installed.
        """
        self.venv.parent.mkdir(parents=True, exist_ok=True)
        with open(self.venv.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two suites at once build it once
            stale = self._stale()
            if stale is not None:
                log(
                    f"W1-ram: building {self.revision} ({self.commit[:12]}) in {self.venv}: {stale}"
                )
                started = time.perf_counter()
                self._build()
                log(f"W1-ram: built in {time.perf_counter() - started:.1f}s")
        return [str(self.script)]

    def _stale(self) -> str | None:
        """Why the cached venv cannot serve (None: it can)."""
        try:
            built = json.loads((self.venv / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "no complete venv yet"
        if built.get("commit") != self.commit or not self.script.is_file():
            return "the cached venv is another build"
        theirs = _versions(metadata.distributions(path=[str(self._site_packages())]))
        ours = _versions(metadata.distributions())
        # A distribution this environment lacks is one the current build does not use.
        differ = sorted(name for name in theirs if ours.get(name, theirs[name]) != theirs[name])
        if differ:
            name = differ[0]
            return f"{name} is {theirs[name]} there and {ours[name]} here"
        return None

    def _site_packages(self) -> Path:
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return self.venv / "lib" / version / "site-packages"

    def _build(self) -> None:
        shutil.rmtree(self.venv, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="osmosis-perf-baseline-") as scratch:
            tree, pins = Path(scratch) / "tree", Path(scratch) / "pins.txt"
            if self._from_tree:
                _copy_tree(tree)
            else:
                _archive(self.commit, tree)
            pins.write_text(_pins(), encoding="utf-8")
            _call([sys.executable, "-m", "venv", str(self.venv)], "python -m venv")
            install = [
                str(self.python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ]
            _call([*install, "--constraint", str(pins), str(tree)], f"pip install of {tree}")
        (self.venv / MANIFEST).write_text(
            json.dumps({"revision": self.revision, "commit": self.commit}) + "\n",
            encoding="utf-8",
        )


def _resolve(revision: str) -> str:
    """The full commit id of ``revision`` in this repository."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise HarnessError(f"{revision!r} is not a commit of {REPO}: pass --baseline REVISION")
    return found.stdout.strip()


def _tree_files() -> list[str]:
    """The working tree's files as git sees them: tracked or new, not ignored, still there."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        raise HarnessError(f"git ls-files failed: {listed.stderr.decode(errors='replace')}")
    names = sorted(set(listed.stdout.decode().split("\0")) - {""})
    return [name for name in names if (REPO / name).is_file()]


def _tree_digest() -> str:
    """A digest of the working tree's files (names and contents)."""
    digest = hashlib.blake2b(digest_size=16)
    for name in _tree_files():
        digest.update(name.encode() + b"\0" + (REPO / name).read_bytes() + b"\0")
    return digest.hexdigest()


def _copy_tree(into: Path) -> None:
    """Copy the working tree's files into ``into``."""
    for name in _tree_files():
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)


def _archive(commit: str, into: Path) -> None:
    """Extract the tree of ``commit`` into ``into`` (the working tree and git state untouched)."""
    tar = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit],
        capture_output=True,
        check=False,
    )
    if tar.returncode != 0:
        raise HarnessError(f"git archive {commit} failed: {tar.stderr.decode(errors='replace')}")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(into, filter="data")


def _pins() -> str:
    """A pip constraints file: every distribution of this environment at its version here."""
    versions = _versions(metadata.distributions())
    return "".join(f"{name}=={version}\n" for name, version in sorted(versions.items()))


def _versions(dists: Iterable[metadata.Distribution]) -> dict[str, str]:
    """Normalized name -> version, leaving out osmosis-run itself and the packaging tools."""
    versions: dict[str, str] = {}
    for dist in dists:
        name = dist.metadata["Name"]
        if not name:
            continue
        key = re.sub(r"[-_.]+", "-", name).lower()  # PEP 503
        if key != _OURS and key not in _TOOLS:
            versions.setdefault(key, dist.version)
    return versions


def _call(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise HarnessError(f"{what} failed (exit {done.returncode}):\n{tail}")
