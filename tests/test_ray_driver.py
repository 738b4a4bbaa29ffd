"""The Ray driver's own pieces, on the host: no cluster starts here (tests/test_ray_hosts.py
runs them on two hosts).

Ray's relayed lines go to stderr, never stdout; each actor reserves ``--ray-actor-cpus`` CPUs;
a lost actor is one line as it happens and is counted in the summary's ``backend``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray

from osmosis_run.backends import ray as ray_backend
from osmosis_run.backends.ray import RayExecutor, _Slot
from osmosis_run.errors import BackendError
from osmosis_run.reports.summary_rows import summary_rows
from osmosis_run.results.records import Summary
from osmosis_run.run.plan import prepare
from osmosis_run.run.settings import EvalSettings


def test_rays_relayed_lines_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    from ray._private import worker

    ray_backend._relay_to_stderr()
    ray_backend._relay_to_stderr()  # twice: wrapped once
    worker.print_to_stdstream(
        {"lines": ["Raylet is terminated."], "pid": "raylet", "is_err": False, "ip": "10.0.0.2"},
        False,
    )
    out, err = capsys.readouterr()
    assert out == ""
    assert "Raylet is terminated." in err


class _Remote:
    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def options(self, **options: Any) -> None:
        self.asked.append(options)


def test_each_actor_reserves_the_cpus_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    remote = _Remote()
    monkeypatch.setattr(ray_backend, "_remote", remote)
    ray_backend._actor_class(1.5)
    ray_backend._actor_class(0.0)
    assert [(o["num_cpus"], o["max_restarts"], o["max_task_retries"]) for o in remote.asked] == [
        (1.5, 0, 0),
        (0.0, 0, 0),
    ]


def test_a_lost_actor_is_one_line_and_counted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray, "kill", lambda *a, **k: None)  # no cluster here
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a"}\n')
    plan = prepare(
        EvalSettings(
            dataset=str(data), workflow="osmosis_run.examples.calculator:CalculatorAgent",
            backend="ray", ray_actor_cpus=1, out=str(tmp_path / "run"),
        )
    )  # fmt: skip
    said: list[str] = []
    executor = RayExecutor(plan, notify=said.append)

    async def lose() -> None:
        slot = _Slot(0, handle=object(), node="10.0.0.2", generation=1, in_flight=3)
        slot.record = {"node": "10.0.0.2", "cpus": 1.0, "lost": False}
        executor._actors.append(slot.record)
        executor._start = _never_starts  # type: ignore[method-assign]
        executor._lost(slot, 1, RuntimeError("The actor died unexpectedly.\nmore"))
        executor._lost(slot, 1, RuntimeError("noticed twice"))  # its other batch: once only
        await asyncio.sleep(0)

    asyncio.run(lose())
    assert said == [
        "osmosis-run: lost the Ray actor on node 10.0.0.2 (The actor died unexpectedly.); "
        "3 rollouts run again"
    ]
    stats = executor.stats()
    assert stats == {
        "kind": "ray",
        "actors": [{"node": "10.0.0.2", "cpus": 1.0, "lost": True}],
        "actors_lost": 1,
        "rollouts_rerun": 3,
        "lost": [{"node": "10.0.0.2", "rollouts": 3, "reason": "The actor died unexpectedly."}],
    }
    rows = dict(summary_rows(Summary(backend=stats)))
    assert rows["ray"] == (
        "1 actor started on 1 node (1 on 10.0.0.2); 1 lost (node 10.0.0.2: 3 rollouts ran again)"
    )


async def _never_starts(slot: _Slot, probe: object) -> None:
    raise BackendError("no node left")
