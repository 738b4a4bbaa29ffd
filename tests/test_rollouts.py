"""The rollout records module: seeds a resumed or re-run rollout must get again."""

from __future__ import annotations

import pytest

from osmosis_run.run.rollouts import rollout_seed
from osmosis_run.run.selection import stable_hash


@pytest.mark.parametrize(
    ("seed", "row_key", "sample_index"),
    [(0, "0", 0), (12345, "row-7", 3), (-1, "id:é", 15), (2**40, "", 1)],
)
def test_a_rollout_seed_is_the_stable_hash_of_seed_row_and_sample(
    seed: int, row_key: str, sample_index: int
) -> None:
    # The fast path must keep every seed a run recorded: runs resume across versions.
    expected = stable_hash("rollout", seed, row_key, sample_index) & 0x7FFFFFFF
    assert rollout_seed(seed, row_key, sample_index) == expected


def test_rollout_seeds_are_fixed_numbers() -> None:
    assert [rollout_seed(0, "0", k) for k in range(3)] == [
        stable_hash("rollout", 0, "0", k) & 0x7FFFFFFF for k in range(3)
    ]
    assert rollout_seed(0, "0", 0) == 1476851621  # what every earlier version gave
