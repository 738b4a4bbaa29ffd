"""What ``osmosis_run._construct`` saves over pydantic: ``python -m tests.perf.bench_construct``.

W1-ram's workload (``osmosis-run eval`` of 20,000 trivial rollouts at concurrency 64, the run
directory in RAM), whole process, in pairs: the build as it is, and the same build with
``construct(cls, **fields)`` as ``cls.model_construct(**fields)`` (pydantic's public API; put in
place of the module before osmosis_run is imported, so that every caller gets it). Then the
calls one such eval makes, recorded and replayed through each (best of 5): the CPU each costs
per rollout, steadier than the walls on a busy machine. Prints one JSON line: the median walls
and CPU seconds (the process and its writer child) over ``--pairs`` alternating pairs, their
ratios, and the replayed calls' cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .workspace import ECHO, EXACT_MATCH, FLOWS_MODULE

_FLOWS = Path(__file__).with_name(f"{FLOWS_MODULE}.py")
ROWS = 20_000
_PUBLIC = """\
import sys, types
from pydantic import BaseModel
module = types.ModuleType("osmosis_run._construct")
def construct(cls, /, **fields):
    return cls.model_construct(**fields)
module.construct = construct
module.__all__ = ["construct"]
sys.modules["osmosis_run._construct"] = module
"""
_MAIN = "from osmosis_run.cli import main; main()"
# The calls one eval makes, recorded, then timed through both (best of 5): CPU per rollout.
_MICRO = """\
import importlib.util, json, os, sys, time, types
where = importlib.util.find_spec("osmosis_run").submodule_search_locations[0]
spec = importlib.util.spec_from_file_location("_real_construct", os.path.join(where, "_construct.py"))
real = sys.modules["_real_construct"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
calls = []
def construct(cls, /, **fields):
    calls.append((cls, fields))
    return real.construct(cls, **fields)
module = types.ModuleType("osmosis_run._construct")
module.construct = construct
module.__all__ = ["construct"]
sys.modules["osmosis_run._construct"] = module
from osmosis_run.cli import main
try:
    main()
except SystemExit:
    pass
def best(build):
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for cls, fields in calls:
            build(cls, **fields)
        times.append(time.perf_counter() - t0)
    return min(times)
own = best(real.construct)
public = best(lambda cls, /, **fields: cls.model_construct(**fields))
print(json.dumps({"calls": len(calls), "construct_s": own, "model_construct_s": public}),
      file=sys.stderr)
"""
# One measured run: the child's wall and CPU (RUSAGE_CHILDREN: it and the writer it waited for).
_HELPER = """\
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": ru.ru_utime + ru.ru_stime}))
"""


def measure(program: str, args: list[str], cwd: Path, env: dict[str, str]) -> dict[str, float]:
    """Run ``python -c program *args`` in ``cwd`` (its ``run`` folder removed first).

    Returns:
        its wall and CPU seconds (``wall``, ``cpu``: the process and the children it waited for).
    """
    run_dir = cwd / "run"
    subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    done = subprocess.run(
        [sys.executable, "-c", _HELPER, sys.executable, "-c", program, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout))


def main(argv: list[str] | None = None) -> int:
    """Run the pairs; print the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m tests.perf.bench_construct")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--rows", type=int, default=ROWS)
    args = parser.parse_args(argv)
    if not os.path.isdir("/dev/shm"):
        raise SystemExit("bench_construct writes its runs to RAM, and /dev/shm is missing")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        cwd = Path(tmp)
        (cwd / _FLOWS.name).write_text(_FLOWS.read_text(encoding="utf-8"), encoding="utf-8")
        rows = ({"id": f"q{i}", "user_prompt": "x", "label": "x"} for i in range(args.rows))
        (cwd / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        eval_args = ["eval", "d.jsonl", "-w", ECHO, "-g", EXACT_MATCH, "-c", "64"]
        eval_args += ["--out", "run", "-q"]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd), env.get("PYTHONPATH")]))
        programs = {"construct": _MAIN, "model_construct": _PUBLIC + _MAIN}
        for program in programs.values():  # one unmeasured run of each
            measure(program, eval_args, cwd, env)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in programs}
        started = time.perf_counter()
        for _ in range(args.pairs):
            for name, program in programs.items():
                runs[name].append(measure(program, eval_args, cwd, env))
        subprocess.run(["rm", "-rf", str(cwd / "run")], check=True)
        micro = subprocess.run(
            [sys.executable, "-c", _MICRO, *eval_args],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
        calls = json.loads(micro.stderr.strip().splitlines()[-1])
    median = {
        name: {key: statistics.median(r[key] for r in done) for key in ("wall", "cpu")}
        for name, done in runs.items()
    }
    own, public = median["construct"], median["model_construct"]
    line = {
        "bench": "construct",
        "workload": f"eval of {args.rows} trivial rollouts, concurrency 64, in RAM",
        "pairs": args.pairs,
        "construct_wall_s": round(own["wall"], 3),
        "model_construct_wall_s": round(public["wall"], 3),
        "wall_ratio": round(own["wall"] / public["wall"], 3),
        "construct_cpu_s": round(own["cpu"], 3),
        "model_construct_cpu_s": round(public["cpu"], 3),
        "cpu_ratio": round(own["cpu"] / public["cpu"], 3),
        "calls_per_rollout": round(calls["calls"] / args.rows, 2),
        "construct_us_per_rollout": round(calls["construct_s"] / args.rows * 1e6, 2),
        "model_construct_us_per_rollout": round(calls["model_construct_s"] / args.rows * 1e6, 2),
        "saved_share_of_construct_wall": round(
            (calls["model_construct_s"] - calls["construct_s"]) / own["wall"], 3
        ),
        "bench_s": round(time.perf_counter() - started, 1),
        "load": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
