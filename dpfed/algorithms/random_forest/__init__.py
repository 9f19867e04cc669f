"""Differentially private random decision forests (Jagannathan, Pillaipakkamnatt & Wright 2009, 2012).

Each tree's structure (split features, thresholds inside the public schema bounds, random category subsets,
depth) is drawn from a public seed without the data (:mod:`.structure`); the parties release the per-leaf
class counts of every tree as one integer vector (L1 sensitivity T, L2 sensitivity sqrt(T): all records in
every tree, the budget split, :mod:`.plan`), with local noise or distributed discrete Gaussian shares under
secure aggregation (:mod:`.secure`); the model averages the noisy leaf distributions over the trees
(:mod:`.model`).

Modules, by role: :mod:`.structure` (public trees), :mod:`.model` (routing, counts, post-processing,
prediction), :mod:`.plan` (options and the local plan), :mod:`.secure` (distributed noise), :mod:`.release`
(the job's one plan), :mod:`.records` (the party's records), :mod:`.party` and :mod:`.coordinator` (the two
halves), :mod:`.estimator` (``DPRandomForestClassifier``), :mod:`.options` (parameters, caps, command-line
options), :mod:`.algorithm` (the registry entry).
"""
from __future__ import annotations

from dpfed.algorithms.random_forest.algorithm import ALGORITHMS
from dpfed.algorithms.random_forest.coordinator import ForestCoordinator
from dpfed.algorithms.random_forest.estimator import DataDerivedSchemaWarning, DPRandomForestClassifier
from dpfed.algorithms.random_forest.model import evaluate, leaf_counts, postprocess, predict, predict_proba, route
from dpfed.algorithms.random_forest.options import PARAMS
from dpfed.algorithms.random_forest.party import ForestParty, SecureForestParty
from dpfed.algorithms.random_forest.plan import ForestPlan, job_forest
from dpfed.algorithms.random_forest.release import plan_release
from dpfed.algorithms.random_forest.secure import secure_release
from dpfed.algorithms.random_forest.structure import Forest, draw_forest, seed_material

__all__ = ["ALGORITHMS", "PARAMS", "DPRandomForestClassifier", "DataDerivedSchemaWarning", "ForestParty",
           "SecureForestParty", "ForestCoordinator", "ForestPlan", "Forest", "draw_forest", "seed_material",
           "job_forest", "plan_release", "secure_release", "leaf_counts", "route", "postprocess", "predict",
           "predict_proba", "evaluate"]
