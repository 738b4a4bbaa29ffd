"""What a stderr writer of osmosis-run's own, instead of rich, saves the CLI's start-up.

``python -m tests.perf.bench_render``, with ``PYTHONPATH`` naming the build to measure. The
workload: ``osmosis-run eval`` of 3 trivial rollouts, whole process, stderr to a file (not a
terminal), the run directory in RAM. Each pair runs it as it is and with ``TTY_COMPATIBLE=0``,
which sends every line through rich's Console (rich loaded and started, nothing styled: the
same bytes). On a build that writes stderr through rich alone (this one), the two are the same
program; on one with a plain writer of its own (the wave-2 build, a3852ac, whose ``cli/render.py``
wrote plain lines without loading rich), the difference is what that writer saves. Prints one
JSON line: the median walls and CPU seconds of each, over ``--pairs`` alternating pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from .bench_construct import measure
from .workspace import ECHO, EXACT_MATCH, FLOWS_MODULE

_FLOWS = Path(__file__).with_name(f"{FLOWS_MODULE}.py")
_MAIN = "from osmosis_run.cli import main; main()"


def main(argv: list[str] | None = None) -> int:
    """Run the pairs; print the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.bench_render")
    parser.add_argument("--pairs", type=int, default=20)
    args = parser.parse_args(argv)
    memory = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=memory) as tmp:
        cwd = Path(tmp)
        (cwd / _FLOWS.name).write_text(_FLOWS.read_text(encoding="utf-8"), encoding="utf-8")
        rows = [{"id": f"q{i}", "user_prompt": "x", "label": "x"} for i in range(3)]
        (cwd / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        eval_args = ["eval", "d.jsonl", "-w", ECHO, "-g", EXACT_MATCH, "--out", "run"]
        env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd), env.get("PYTHONPATH")]))
        envs = {"as_is": env, "through_rich": {**env, "TTY_COMPATIBLE": "0"}}
        for each in envs.values():  # one unmeasured run of each
            measure(_MAIN, eval_args, cwd, each)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in envs}
        for _ in range(args.pairs):
            for name, each in envs.items():
                runs[name].append(measure(_MAIN, eval_args, cwd, each))
    median = {
        name: {key: statistics.median(r[key] for r in done) for key in ("wall", "cpu")}
        for name, done in runs.items()
    }
    own, rich = median["as_is"], median["through_rich"]
    line = {
        "bench": "render",
        "workload": "eval of 3 rollouts, whole process, stderr not a terminal",
        "pairs": args.pairs,
        "as_is_wall_s": round(own["wall"], 4),
        "through_rich_wall_s": round(rich["wall"], 4),
        "wall_ratio": round(own["wall"] / rich["wall"], 3),
        "as_is_cpu_s": round(own["cpu"], 4),
        "through_rich_cpu_s": round(rich["cpu"], 4),
        "cpu_ratio": round(own["cpu"] / rich["cpu"], 3),
        "load": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
