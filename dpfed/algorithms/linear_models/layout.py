"""The shapes of a linear-model job from its public spec: the loss, K scores, D + 1 weights per score."""
from __future__ import annotations

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.linear_models.defaults import LOSSES
from dpfed.algorithms.linear_models.model import outputs
from dpfed.core.errors import TaskRejected
from dpfed.core.memo import per_object
from dpfed.data.encoding import encoded_dimension

__all__ = ["Layout", "layout"]

#: (loss, classes, K scores, D + 1 weights per score)
Layout = tuple[str, int, int, int]


@per_object()
def layout(spec: JobSpec) -> Layout:
    """(loss, classes, K, D + 1) from the public spec (cached per spec object); refuses an unlabelled schema."""
    if spec.algorithm not in LOSSES:
        raise TaskRejected(f"not a linear-model job: {spec.algorithm!r}")
    c = spec.schema.n_classes
    if c < 2:
        raise TaskRejected(f"{spec.algorithm} needs a schema with at least 2 classes")
    return LOSSES[spec.algorithm], c, outputs(c), encoded_dimension(spec.schema) + 1
