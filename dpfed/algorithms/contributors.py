"""The coordinator's check of who contributed to a one-release job's answer set (shared by the learners whose
job is one summed release, e.g. the random forest): exactly the job's parties, or under secure aggregation any
>= P_min of them (the survivors' sum)."""
from __future__ import annotations

from typing import Sequence

from dpfed.algorithms.contract import Aggregate

__all__ = ["check_contributors"]


def check_contributors(what: str, parties: Sequence[str], combined: Aggregate, secure: bool,
                       min_survivors: int) -> None:
    """ValueError unless ``combined`` came from the expected parties (module docstring)."""
    got = set(combined.parties)
    missing, unknown = set(parties) - got, got - set(parties)
    if secure and not combined.parties:
        raise ValueError(f"the {what} round was aborted: fewer than {min_survivors} parties contributed "
                         "(nothing was unmasked)")
    if secure and not unknown and len(got) >= min_survivors:
        missing = set()
    if missing or unknown:
        raise ValueError(f"expected answers from exactly the {len(parties)} job parties; "
                         f"missing {sorted(missing)}, unknown {sorted(unknown)}")
