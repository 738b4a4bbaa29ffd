"""`osmosis-run compare` and osmosis_run.results.compare: pairing, the row bootstrap, flips, the gate."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from conftest import qa_rows, write_jsonl
from run_dirs import finished, line, write_run
from typer.testing import Result

from osmosis_run.results.compare import (
    Comparison,
    ErrorChange,
    compare_runs,
    comparison_json,
    regression_verdict,
    row_key,
)
from osmosis_run.results.gates import Verdict
from osmosis_run.results.records import ResultLine, Summary
from osmosis_run.results.rundata import RunData
from osmosis_run.store.rundata import load_run

Cli = Callable[..., Result]
ECHO = ["--workflow", "eval_flows:Echo", "--grader", "eval_flows:ExactMatch"]

# An outcome per rollout: a reward, or "failure" (an error: scores 0, never passes).
Outcome = float | str


def rollouts(outcomes: Sequence[Outcome], *, samples: int = 1) -> list[ResultLine]:
    """Rollout i is sample i % samples of row i // samples."""
    made = []
    for i, outcome in enumerate(outcomes):
        rollout_id = f"r{i // samples}.s{i % samples}"
        if isinstance(outcome, str):
            made.append(line(rollout_id, status="failure", error_message=f"broke on {rollout_id}"))
        else:
            made.append(line(rollout_id, reward=outcome))
    return made


def run_of(
    path: Path, outcomes: Sequence[Outcome], *, samples: int = 1, pass_threshold: float = 1.0
) -> RunData:
    write_run(
        path,
        rollouts(outcomes, samples=samples),
        summary=finished(len(outcomes)),
        pass_threshold=pass_threshold,
    )
    return load_run(path)


def regression_pair(tmp_path: Path) -> tuple[RunData, RunData]:
    """A passes all 200 rows; B fails half of them (50 errors, 50 zero rewards)."""
    b: list[Outcome] = [1.0 if i % 2 else ("failure" if i % 4 == 0 else 0.0) for i in range(200)]
    return run_of(tmp_path / "a", [1.0] * 200), run_of(tmp_path / "b", b)


def noise_pair(tmp_path: Path) -> tuple[RunData, RunData]:
    """200 rows, B is A with four flips each way."""
    rng = random.Random(7)
    a: list[Outcome] = [1.0 if rng.random() < 0.7 else 0.0 for _ in range(200)]
    b = list(a)
    passing = [i for i, value in enumerate(a) if value == 1.0]
    failing = [i for i, value in enumerate(a) if value == 0.0]
    for i in rng.sample(passing, 4):
        b[i] = 0.0
    for i in rng.sample(failing, 4):
        b[i] = 1.0
    return run_of(tmp_path / "a", a), run_of(tmp_path / "b", b)


# --- the library -----------------------------------------------------------------------------


def test_a_known_regression_is_detected(tmp_path: Path) -> None:
    a, b = regression_pair(tmp_path)

    cmp = compare_runs(a, b)
    verdict = regression_verdict(cmp, 0.05)

    assert (cmp.paired, cmp.paired_rows, cmp.only_in_a, cmp.only_in_b) == (200, 200, 0, 0)
    assert (cmp.mean.a, cmp.mean.b, cmp.mean.delta) == (1.0, 0.5, -0.5)
    assert (cmp.pass_rate.a, cmp.pass_rate.b, cmp.pass_rate.delta) == (1.0, 0.5, -0.5)
    assert cmp.mean.ci is not None
    assert -0.6 < cmp.mean.ci.low < -0.5 < cmp.mean.ci.high < -0.4
    assert len(cmp.pass_to_fail) == 100
    assert cmp.fail_to_pass == []
    assert [e.rollout_id for e in cmp.new_errors] == [f"r{i}.s0" for i in range(0, 200, 4)]
    assert cmp.fixed_errors == []
    assert not verdict.held
    assert verdict.message == (
        f"mean regression <= 0.05: failed (B - A = -0.5000, 95% CI "
        f"[{cmp.mean.ci.low:+.4f}, {cmp.mean.ci.high:+.4f}], 200 paired rollouts over 200 rows)"
    )


def test_noise_is_not_a_regression(tmp_path: Path) -> None:
    a, b = noise_pair(tmp_path)

    cmp = compare_runs(a, b)

    assert (len(cmp.pass_to_fail), len(cmp.fail_to_pass), cmp.mean.delta) == (4, 4, 0.0)
    assert cmp.mean.ci is not None
    assert cmp.mean.ci.low < 0 < cmp.mean.ci.high
    assert regression_verdict(cmp, 0.05).held
    assert regression_verdict(cmp, 0.0).held


def test_a_drop_within_the_allowed_delta_holds_and_beyond_it_fails(tmp_path: Path) -> None:
    b: list[Outcome] = [0.0 if i < 6 else 1.0 for i in range(200)]
    cmp = compare_runs(run_of(tmp_path / "a", [1.0] * 200), run_of(tmp_path / "b", b))

    assert cmp.mean.delta == pytest.approx(-0.03)
    assert cmp.mean.ci is not None
    assert cmp.mean.ci.excludes_zero()
    assert regression_verdict(cmp, 0.05).held
    assert not regression_verdict(cmp, 0.01).held


def test_a_big_drop_whose_interval_includes_zero_is_not_flagged(tmp_path: Path) -> None:
    cmp = compare_runs(run_of(tmp_path / "a", [1.0, 1.0]), run_of(tmp_path / "b", [0.0, 1.0]))

    assert cmp.mean.delta == -0.5
    assert cmp.mean.ci is not None
    assert (cmp.mean.ci.low, cmp.mean.ci.high) == (-1.0, 0.0)
    assert regression_verdict(cmp, 0.05).held


def test_identical_runs_hold_with_a_zero_width_interval(tmp_path: Path) -> None:
    a = run_of(tmp_path / "a", [1.0, 0.0, "failure"])

    cmp = compare_runs(a, a)
    verdict = regression_verdict(cmp, 0.0)

    assert verdict == Verdict(
        name="mean regression <= 0",
        held=True,
        message="mean regression <= 0: held (B - A = +0.0000, 95% CI [+0.0000, +0.0000], "
        "3 paired rollouts over 3 rows)",
    )


def test_the_pass_rate_metric_judges_pass_rate(tmp_path: Path) -> None:
    # B scores a little higher on average but passes fewer rollouts.
    a = run_of(tmp_path / "a", [1.0] * 10 + [0.0] * 10)
    b = run_of(tmp_path / "b", [1.0] * 5 + [0.9] * 5 + [0.5] * 10)

    cmp = compare_runs(a, b, metric="pass_rate")

    assert cmp.mean.delta == pytest.approx(0.225)
    assert cmp.pass_rate.delta == pytest.approx(-0.25)
    assert cmp.primary is cmp.pass_rate
    assert not regression_verdict(cmp, 0.1).held
    assert regression_verdict(compare_runs(a, b), 0.1).held


def test_errors_score_zero_and_new_and_fixed_errors_are_listed(tmp_path: Path) -> None:
    a = run_of(tmp_path / "a", [1.0, "failure", "failure", 0.5])
    b = run_of(tmp_path / "b", ["failure", 1.0, "failure", 0.5])

    cmp = compare_runs(a, b)

    assert (cmp.mean.a, cmp.mean.b) == (0.375, 0.375)
    assert (cmp.pass_to_fail, cmp.fail_to_pass) == (["r0.s0"], ["r1.s0"])
    assert cmp.new_errors == [
        ErrorChange(
            rollout_id="r0.s0",
            status="failure",
            error_category="agent_error",
            error_message="broke on r0.s0",
        )
    ]
    assert [e.rollout_id for e in cmp.fixed_errors] == ["r1.s0"]


def test_unpaired_and_unscored_rollouts_are_counted_not_compared(tmp_path: Path) -> None:
    a_lines = [line("shared.s0"), line("gone.s0"), line("quiet.s0", status="ungraded")]
    b_lines = [line("shared.s0", reward=0.0), line("new.s0"), line("new2.s0")]
    b_lines.append(line("quiet.s0", status="removed"))
    a = load_run(write_run(tmp_path / "a", a_lines, summary=finished(3)))
    b = load_run(write_run(tmp_path / "b", b_lines, summary=finished(4)))

    cmp = compare_runs(a, b)

    assert (cmp.paired, cmp.only_in_a, cmp.only_in_b, cmp.unscored) == (1, 1, 2, 1)
    assert (cmp.mean.a, cmp.mean.b) == (1.0, 0.0)


def test_nothing_in_common_fails_the_gate(tmp_path: Path) -> None:
    a = load_run(write_run(tmp_path / "a", [line("x.s0")], summary=finished(1)))
    b = load_run(write_run(tmp_path / "b", [line("y.s0")], summary=finished(1)))

    cmp = compare_runs(a, b)

    assert (cmp.paired, cmp.mean.delta, cmp.mean.ci) == (0, None, None)
    assert regression_verdict(cmp, 0.05) == Verdict(
        name="mean regression <= 0.05",
        held=False,
        message="mean regression <= 0.05: failed (no rollout is scored in both runs)",
    )


def test_the_bootstrap_resamples_rows_not_samples(tmp_path: Path) -> None:
    # The same 200 rollout deltas, as 20 rows of 10 perfectly correlated samples or 200 rows:
    # the clustered interval must be wider, since 20 rows are less evidence than 200.
    b: list[Outcome] = [0.0 if i < 60 else 1.0 for i in range(200)]
    clustered = compare_runs(
        run_of(tmp_path / "a10", [1.0] * 200, samples=10),
        run_of(tmp_path / "b10", b, samples=10),
    )
    flat = compare_runs(run_of(tmp_path / "a1", [1.0] * 200), run_of(tmp_path / "b1", b))

    assert (clustered.paired, clustered.paired_rows, flat.paired_rows) == (200, 20, 200)
    assert clustered.mean.delta == flat.mean.delta == pytest.approx(-0.3)
    assert clustered.mean.ci is not None
    assert flat.mean.ci is not None
    clustered_width = clustered.mean.ci.high - clustered.mean.ci.low
    flat_width = flat.mean.ci.high - flat.mean.ci.low
    assert clustered_width > 2 * flat_width


def test_the_interval_is_seeded(tmp_path: Path) -> None:
    a, b = noise_pair(tmp_path)

    first = compare_runs(a, b, seed=3, resamples=500)
    again = compare_runs(a, b, seed=3, resamples=500)
    other = compare_runs(a, b, seed=4, resamples=500)

    assert first == again
    assert first.mean.ci != other.mean.ci
    assert (first.seed, first.resamples) == (3, 500)


def test_different_pass_thresholds_are_noted_and_a_judges(tmp_path: Path) -> None:
    a = run_of(tmp_path / "a", [0.6, 0.4], pass_threshold=0.5)
    b = run_of(tmp_path / "b", [0.6, 0.4])

    cmp = compare_runs(a, b)
    explicit = compare_runs(a, b, pass_threshold=0.3)

    assert (cmp.pass_threshold, cmp.pass_rate.a, cmp.pass_rate.b) == (0.5, 0.5, 0.5)
    assert cmp.notes == [
        "the runs use different pass thresholds (A 0.5, B 1); both are judged at A's"
    ]
    assert (explicit.pass_rate.a, explicit.notes) == (1.0, [])


def test_an_unfinished_run_is_noted(tmp_path: Path) -> None:
    a = load_run(write_run(tmp_path / "a", rollouts([1.0, 1.0])))
    stopped = Summary(rollouts=1, planned=2, interrupted=True)
    b = load_run(write_run(tmp_path / "b", rollouts([1.0]), summary=stopped))

    assert compare_runs(a, b).notes == [
        "run A did not finish (2 rollouts so far)",
        "run B did not finish (1 rollout so far)",
    ]


def test_row_key_strips_only_the_sample_suffix() -> None:
    assert [row_key(r) for r in ("a.s3", "a.sx.s10", "row@4.s0", "plain", "x.sy")] == [
        "a",
        "a.sx",
        "row@4",
        "plain",
        "x.sy",
    ]


def test_comparison_json_carries_the_verdict(tmp_path: Path) -> None:
    a, b = regression_pair(tmp_path)
    cmp = compare_runs(a, b, resamples=100)
    verdict = regression_verdict(cmp, 0.05)

    document = json.loads(comparison_json(cmp, verdict))

    assert document["verdict"] == verdict.model_dump()
    assert Comparison.model_validate(document) == cmp
    assert json.loads(comparison_json(cmp))["verdict"] is None


def test_resamples_must_be_positive(tmp_path: Path) -> None:
    a = run_of(tmp_path / "a", [1.0])

    with pytest.raises(ValueError, match=r"^resamples must be at least 1$"):
        compare_runs(a, a, resamples=0)


# --- through the CLI ----------------------------------------------------------------------


def write_pair(tmp_path: Path, pair: Callable[[Path], tuple[RunData, RunData]]) -> Comparison:
    """Write runs ``a`` and ``b`` into ``tmp_path``; their comparison as the CLI will name them."""
    a, b = pair(tmp_path)
    return as_named_by_cli(compare_runs(a, b))


def as_named_by_cli(cmp: Comparison) -> Comparison:
    return cmp.model_copy(update={"run_a": Path("a"), "run_b": Path("b")})


def test_cli_fails_on_a_known_regression(cli: Cli, tmp_path: Path) -> None:
    cmp = write_pair(tmp_path, regression_pair)
    verdict = regression_verdict(cmp, 0.05)

    result = cli("compare", "a", "b", "--fail-on-regression", "0.05")

    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert [text for text in lines if text != text.rstrip()] == []
    assert lines[0] == "osmosis-run: compare a -> b"
    assert lines[1].split() == ["A", "B", "B", "-", "A", "95%", "CI"]
    assert lines[2].split()[:5] == ["mean", "reward", "1.000", "0.500", "-0.500"]
    assert lines[3].split()[:5] == ["pass", "rate", "100.0%", "50.0%", "-50.0%"]
    assert (
        lines[4]
        == "paired: 200 rollouts over 200 rows; unpaired: 0 only in A, 0 only in B; unscored: 0"
    )
    assert lines[5].startswith("pass -> fail (100): r0.s0, r2.s0, r4.s0, ")
    assert lines[5].endswith(", r38.s0 (+80 more)")
    assert lines[6] == "new errors (50):"
    assert lines[7] == "  r0.s0: agent_error: broke on r0.s0"
    assert lines[-1] == "  ... and 30 more"
    assert result.stderr == f"FAILED: {verdict.message}\n"


def test_cli_passes_on_noise(cli: Cli, tmp_path: Path) -> None:
    cmp = write_pair(tmp_path, noise_pair)

    result = cli("compare", "a", "b", "--fail-on-regression", "0.05")

    assert result.exit_code == 0
    assert result.stderr.splitlines()[-1] == f"ok: {regression_verdict(cmp, 0.05).message}"


def test_cli_without_a_gate_exits_0_even_on_a_regression(cli: Cli, tmp_path: Path) -> None:
    write_pair(tmp_path, regression_pair)

    result = cli("compare", "a", "b")

    assert result.exit_code == 0
    assert not any(text.startswith(("ok:", "FAILED:")) for text in result.stderr.splitlines())


def test_cli_json_is_one_document_on_stdout(cli: Cli, tmp_path: Path) -> None:
    cmp = write_pair(tmp_path, regression_pair)
    verdict = regression_verdict(cmp, 0.05)

    result = cli("compare", "a", "b", "--json", "--fail-on-regression", "0.05")

    assert result.exit_code == 1
    assert result.stderr == f"FAILED: {verdict.message}\n"
    document = json.loads(result.stdout)
    assert document == json.loads(comparison_json(cmp, verdict))


def test_cli_metric_seed_and_resamples_reach_the_comparison(cli: Cli, tmp_path: Path) -> None:
    a, b = noise_pair(tmp_path)
    expected = as_named_by_cli(compare_runs(a, b, metric="pass_rate", seed=9, resamples=300))

    result = cli(
        "compare", "a", "b", "--json", "--metric", "pass_rate", "--seed", "9", "--resamples", "300"
    )

    assert result.exit_code == 0
    assert Comparison.model_validate_json(result.stdout) == expected


def test_cli_compares_two_real_eval_runs(cli: Cli, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "qa.jsonl", qa_rows(8))
    assert cli("eval", str(data), *ECHO, "--out", "good").exit_code == 0
    broken = ["--workflow", "eval_flows:Invalid", "--grader", "eval_flows:ExactMatch"]
    assert cli("eval", str(data), *broken, "--out", "bad", "--max-error-rate", "1.0").exit_code == 0

    result = cli("compare", "good", "bad", "--json", "--fail-on-regression", "0.1")

    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert (document["paired"], document["mean"]["a"], document["mean"]["b"]) == (8, 0.5, 0.0)
    assert document["pass_to_fail"] == ["q0.s0", "q2.s0", "q4.s0", "q6.s0"]
    assert [e["error_message"] for e in document["new_errors"]] == ["bad output"] * 8
    assert document["verdict"]["held"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["a", "nope"],
            "error: nope does not exist; give the directory `osmosis-run eval` printed",
        ),
        (
            ["a", "a", "--pass-threshold", "inf"],
            "error: --pass-threshold inf: must be a finite number",
        ),
    ],
)
def test_cli_bad_run_dirs_are_usage_errors(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    run_of(tmp_path / "a", [1.0])

    result = cli("compare", *args)

    assert result.exit_code == 2
    assert result.stderr == message + "\n"


@pytest.mark.parametrize(
    "args",
    [
        ["--metric", "median"],
        ["--fail-on-regression", "-0.1"],
        ["--resamples", "0"],
    ],
)
def test_cli_bad_options_are_usage_errors(cli: Cli, tmp_path: Path, args: list[str]) -> None:
    run_of(tmp_path / "a", [1.0])

    result = cli("compare", "a", "a", *args)

    assert result.exit_code == 2
    assert args[0] in result.stderr


def test_cli_writes_a_compare_html(cli: Cli, tmp_path: Path) -> None:
    pytest.importorskip("osmosis_run.reports.html_report")
    write_pair(tmp_path, noise_pair)

    result = cli("compare", "a", "b", "--json", "--html", "diff.html")

    assert result.exit_code == 0
    assert result.stderr == "osmosis-run: wrote HTML report diff.html\n"
    assert (tmp_path / "diff.html").stat().st_size > 0


def test_compare_help_documents_every_option(cli: Cli) -> None:
    result = cli("compare", "--help")

    assert result.exit_code == 0
    for option in (
        "--metric",
        "--fail-on-regression",
        "--pass-threshold",
        "--resamples",
        "--seed",
        "--json",
        "--html",
    ):
        assert option in result.stdout
