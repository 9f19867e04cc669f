"""What every DP-SGD coordinator half does alike, whatever its model: the check of who is in a round's sum, and
the summary's noise placement and central noise multiplier of secure steps (post-processing of public facts)."""
from __future__ import annotations

import math
from typing import Sequence

from dpfed.algorithms.contract import Aggregate
from dpfed.core.distributed_noise import DistributedNoisePlan

__all__ = ["check_round_parties", "noise_placement", "central_noise_multiplier"]


def check_round_parties(parties: Sequence[str], combined: Aggregate, *, secure: bool, min_survivors: int) -> None:
    """ValueError unless the round's sum ``combined`` comes from every one of the job's ``parties``, or under secure
    aggregation from at least ``min_survivors`` of them and no other (the secure gather aborts below)."""
    if secure:
        if not set(combined.parties) <= set(parties) or len(combined.parties) < min_survivors:
            raise ValueError(f"a secure round needs at least {min_survivors} of the job's parties")
    elif set(combined.parties) != set(parties):
        raise ValueError("answers must come from every party of the job")


def noise_placement(noise: str, secure: bool) -> str:
    """The summary's ``noise_placement``: ``local``, ``distributed (secure aggregation)``, or distributed noise
    without it (simulation only)."""
    return noise + (" (secure aggregation)" if secure else
                    " (simulation only: needs secure aggregation)" if noise == "distributed" else "")


def central_noise_multiplier(step: DistributedNoisePlan) -> float:
    """The central noise of a secure step's sum from the P_min - c honest shares, in units of the clip norm
    (comparable with local noise's multiplier; survivors beyond P_min add more)."""
    return step.gamma * step.sigma_share * math.sqrt(step.honest_parties) / step.clip
