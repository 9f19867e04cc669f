"""Private k-means: sample-and-aggregate (NRS07 Sec. 4 and 6) and DP Lloyd, alone or across parties.

Pieces, in the order a party runs them (method ``sample-aggregate``):

1. a noisy record count (discrete Laplace) fixes the number of blocks m (so m is public);
2. records go to m blocks independently (:func:`dpfed.algorithms.kmeans.sample_aggregate.assign_blocks`), and
   ordinary k-means (k-means++ start, Lloyd) runs on each block (:func:`kmeans`);
3. each block's k centers are put into a canonical order (:func:`canonical_order`: Hungarian
   matching to k public anchor points -- a fixed function of the block's own center *set*, so one
   record changes one aligned answer, and the order does not depend on how centers or blocks are
   listed);
4. the m aligned answers (vectors of length k*d) are aggregated privately: NRS07's center of
   attention with smooth-sensitivity Gaussian noise (``aggregator="coa"``) or GUPT's clamped
   mean (``aggregator="mean"``);
5. optionally ``refine_steps`` DP Lloyd steps on the party's records start from that answer;
6. noisy cluster sizes (discrete Laplace) of the released centers.

Method ``lloyd`` is DP Lloyd from a uniformly random start (Blum et al. 2005, "SuLQ"; the
diffprivlib baseline): each iteration releases per-cluster noisy sums (Gaussian) and counts
(discrete Laplace). Every budget split is public, computed from the job parameters alone, and
calibrated so that the PLD composition of all releases is exactly the job's (epsilon, delta).

Across parties each party runs this on its own records (one task; parallel composition) and the
coordinator merges the P*k released centers, weighted by their noisy sizes, by weighted
k-means++ and Lloyd (post-processing). That is ``noise = "local"``, private against the coordinator
on its own. ``noise = "distributed"`` runs only under secure aggregation and is the central algorithm
over every party's records, round by round, each release an integer vector plus one discrete
Gaussian share per party (:mod:`dpfed.algorithms.kmeans.secure`: DP Lloyd sums and counts,
the sample-and-aggregate clamped mean; the center of attention is refused there, and why).

The package, by role:

    model.py             the model maths: k-means++, Lloyd, per-block k-means, canonical order, merge
    sample_aggregate.py  sample-and-aggregate for any vector estimator (NRS07 center of attention, GUPT mean)
    plan.py              the local-noise privacy plan (noise parameters and event from public parameters)
    fit.py               one party's private fit under local noise (the party's release, the estimator's fit)
    options.py           the parameter table, a job's options, the command-line options
    secure_plan.py       the distributed-noise plan: schedule of rounds, sensitivities, calibrated shares
    secure.py            the secure release per round: check, integer vector, decode of the sum
    party.py             the party halves (local, secure)   coordinator.py   the coordinator half
    estimator.py         ``DPKMeans``            evaluate.py      inertia against a non-private reference
    algorithm.py         the registry entry ``ALGORITHMS``
"""
from __future__ import annotations

from dpfed.algorithms.kmeans.algorithm import ALGORITHMS
from dpfed.algorithms.kmeans.coordinator import KMeansCoordinator, SecureKMeansCoordinator, combine
from dpfed.algorithms.kmeans.estimator import DPKMeans
from dpfed.algorithms.kmeans.evaluate import evaluate, nonprivate_inertia
from dpfed.algorithms.kmeans.fit import fit_private
from dpfed.algorithms.kmeans.model import (align_blocks, block_answers, block_kmeans, canonical_order, inertia, kmeans,
                                           kmeans_plusplus, lloyd, merge_centers, numeric_part, public_anchors)
from dpfed.algorithms.kmeans.options import DEFAULTS, PARAMS, add_arguments, params_from_args
from dpfed.algorithms.kmeans.party import KMeansParty, SecureKMeansParty
from dpfed.algorithms.kmeans.plan import AGGREGATORS, METHODS, KMeansPlan, make_plan, plan_event

__all__ = [
    "kmeans_plusplus", "lloyd", "kmeans", "block_kmeans", "inertia", "public_anchors", "canonical_order",
    "align_blocks",
    "KMeansPlan", "make_plan", "plan_event", "fit_private", "block_answers", "merge_centers", "DPKMeans", "ALGORITHMS",
    "numeric_part", "evaluate", "nonprivate_inertia", "METHODS", "AGGREGATORS", "DEFAULTS", "PARAMS", "add_arguments",
    "params_from_args", "KMeansParty", "SecureKMeansParty", "KMeansCoordinator", "SecureKMeansCoordinator", "combine",
]
