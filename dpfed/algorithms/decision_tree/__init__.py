"""A private decision tree grown by noisy counts (Friedman & Schuster, KDD 2010, "Data mining with differential
privacy": DiffP-C4.5's split choice from noisy counts), federated level by level.

Candidate splits come from the public schema (:mod:`.grid`: equal-width cells on numeric bounds, categorical
codes). Round r = 0 .. D-1: the parties release, in one integer vector, the class counts per (open node of
level r, feature, cell) (L1 sensitivity F, L2 sqrt(F)); the coordinator sums them, picks each node's split by
the smallest Gini impurity of the noisy counts or stops the node when its noisy count is below the noise
(:mod:`.model`, post-processing), and sends the structure so far with the next task, which every party checks
(:mod:`.task`). Round D releases the leaves' class counts (sensitivity 1). The depth D is the ``depth``
parameter or, without it, :mod:`.depth`'s automatic depth from public parameters. Budget split and accounting:
:mod:`.plan` (local rounded Gaussian) and :mod:`.secure` (distributed discrete Gaussian under secure
aggregation); the halves: :mod:`.party`, :mod:`.coordinator`; :mod:`.estimator`
(``DPDecisionTreeClassifier``), :mod:`.options`, :mod:`.algorithm` (the registry entry "decision-tree").
"""
from __future__ import annotations

from dpfed.algorithms.decision_tree.algorithm import ALGORITHMS
from dpfed.algorithms.decision_tree.coordinator import TreeCoordinator
from dpfed.algorithms.decision_tree.estimator import DPDecisionTreeClassifier
from dpfed.algorithms.decision_tree.grid import Grid, cells, grid_for
from dpfed.algorithms.decision_tree.model import (choose_splits, descend, evaluate, leaf_counts, level_counts,
                                                  predict, predict_proba)
from dpfed.algorithms.decision_tree.options import PARAMS
from dpfed.algorithms.decision_tree.party import SecureTreeParty, TreeParty
from dpfed.algorithms.decision_tree.plan import TreePlan, local_plan
from dpfed.algorithms.decision_tree.release import plan_release
from dpfed.algorithms.decision_tree.secure import secure_tree_plan

__all__ = ["ALGORITHMS", "PARAMS", "DPDecisionTreeClassifier", "TreeParty", "SecureTreeParty", "TreeCoordinator",
           "TreePlan", "Grid", "grid_for", "cells", "descend", "level_counts", "leaf_counts", "choose_splits",
           "local_plan", "secure_tree_plan", "plan_release", "predict", "predict_proba", "evaluate"]
