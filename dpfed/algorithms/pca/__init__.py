"""Differentially private PCA across parties: a noisy sum of clipped records' outer products, its top-k
eigenvectors ("Analyze Gauss", Dwork, Talwar, Thakurta & Zhang, STOC 2014), around a noisy mean released first.

Modules, by role: :mod:`.plan` (geometry, grid, sensitivities, the local plan of the two rounds and its event), :mod:`.rounds`
(the party's check of each round and its geometry),
:mod:`.statistics` (the party's exact integer vector), :mod:`.secure` (distributed noise under secure
aggregation), :mod:`.release` (the job's one plan, local or secure), :mod:`.party` and :mod:`.coordinator`
(the two halves), :mod:`.model` (post-processing, projection, captured variance), :mod:`.estimator`
(``DPPCA``), :mod:`.options` (parameters and command-line options), :mod:`.algorithm` (the registry entry).
"""
from __future__ import annotations

from dpfed.algorithms.pca.algorithm import ALGORITHMS
from dpfed.algorithms.pca.coordinator import PCACoordinator
from dpfed.algorithms.pca.estimator import DPPCA
from dpfed.algorithms.pca.model import captured_variance, evaluate, postprocess, project
from dpfed.algorithms.pca.options import PARAMS
from dpfed.algorithms.pca.party import PCAParty, SecurePCAParty
from dpfed.algorithms.pca.plan import GRID, KINDS, Geometry, PCAPlan, RoundPlan, geometries, sensitivities
from dpfed.algorithms.pca.release import plan_release
from dpfed.algorithms.pca.secure import secure_release
from dpfed.algorithms.pca.statistics import clipped_records, covariance_sum, mean_sum

__all__ = ["ALGORITHMS", "PARAMS", "DPPCA", "PCAParty", "SecurePCAParty", "PCACoordinator", "PCAPlan", "Geometry",
           "RoundPlan", "GRID", "KINDS", "geometries", "sensitivities", "plan_release", "secure_release", "covariance_sum", "mean_sum",
           "clipped_records", "postprocess", "project", "captured_variance", "evaluate"]
