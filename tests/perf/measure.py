"""Run one program as a whole process and measure its wall time and peak RSS.

``RUSAGE_CHILDREN`` reports the largest RSS of *all* children a process ever waited for, so every
measurement runs in its own small helper interpreter whose only child is the measured program;
the helper times the child with ``time.perf_counter`` and prints its own ``RUSAGE_CHILDREN``.
The helper's own startup is outside the measured wall, and so is an ``os.sync()`` before it:
a run does not pay for writing back the files of the run before it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .workspace import HarnessError

_HELPER = """\
import json, resource, subprocess, sys, time
out, err, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(out, "wb") as o, open(err, "wb") as e:
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=o, stderr=e).returncode
    wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "wall_s": wall, "maxrss_kib": ru.ru_maxrss,
                  "user_s": ru.ru_utime, "sys_s": ru.ru_stime}))
"""


@dataclass(frozen=True)
class Measured:
    """One finished process: exit code, wall, peak RSS, CPU, and what it printed.

    CPU includes the process's children (osmosis-run's writer process); peak RSS is the largest
    single process's, which is osmosis-run's own (its writer process stays near 10 MiB).
    """

    rc: int
    wall_s: float
    rss_mib: float
    cpu_s: float
    sys_s: float
    stdout: str
    stderr: str

    def check(self, what: str) -> None:
        """Raise when the process failed.

        Raises:
            HarnessError: a non-zero exit code.
        """
        if self.rc != 0:
            tail = "\n".join(self.stderr.strip().splitlines()[-15:])
            raise HarnessError(f"{what} exited {self.rc}:\n{tail}")


# The suite's own variables: osmosis-run refuses an OSMOSIS_RUN_* name it does not know.
HARNESS_ONLY = frozenset({"OSMOSIS_RUN_INTEROP_PYTHON", "OSMOSIS_RUN_INTEROP_STRICT"})


def measure(cmd: list[str], *, cwd: Path, logs: Path) -> Measured:
    """Run ``cmd`` in ``cwd`` under the helper; its stdout and stderr go to files in ``logs``."""
    logs.mkdir(parents=True, exist_ok=True)
    os.sync()
    out, err = logs / "stdout.txt", logs / "stderr.txt"
    helper = subprocess.run(
        [sys.executable, "-c", _HELPER, str(out), str(err), *cmd],
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k not in HARNESS_ONLY},
        capture_output=True,
        text=True,
        check=False,
    )
    if helper.returncode != 0:
        raise HarnessError(f"the measuring helper failed:\n{helper.stderr}")
    report = json.loads(helper.stdout)
    return Measured(
        rc=report["rc"],
        wall_s=report["wall_s"],
        rss_mib=report["maxrss_kib"] / 1024,
        cpu_s=report["user_s"] + report["sys_s"],
        sys_s=report["sys_s"],
        stdout=out.read_text(encoding="utf-8", errors="replace"),
        stderr=err.read_text(encoding="utf-8", errors="replace"),
    )
