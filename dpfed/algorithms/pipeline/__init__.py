"""PCA as the first step of a job (``pca+LEARNER``, e.g. ``dpfed simulate --algorithm gmlvq --pca 50``): the
PCA's two rounds, then the learner on the records projected to K dimensions, both steps in ONE composed
privacy plan that each party charges before its first release. Modules: :mod:`.spec` (the split of the job,
the projection), :mod:`.party`, :mod:`.coordinator`, :mod:`.algorithm` (the registry entry, :func:`compose`).
"""
from __future__ import annotations

from dpfed.algorithms.pipeline.algorithm import PipelineTable, compose
from dpfed.algorithms.pipeline.coordinator import PipelineCoordinator
from dpfed.algorithms.pipeline.party import PipelineParty, SecurePipelineParty
from dpfed.algorithms.pipeline.spec import PREFIX, learner_spec, pca_spec, project, split_params

__all__ = ["compose", "PipelineTable", "PipelineCoordinator", "PipelineParty", "SecurePipelineParty", "PREFIX",
           "split_params", "pca_spec", "learner_spec", "project"]
