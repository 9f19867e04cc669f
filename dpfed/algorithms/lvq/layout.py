"""The shapes of a GLVQ / GMLVQ job from its public spec: classes, d, prototypes, Omega's rank."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.lvq.defaults import DEFAULTS
from dpfed.core.errors import TaskRejected
from dpfed.core.memo import per_object

__all__ = ["Layout", "layout", "prototype_labels"]

#: (classes, d, prototypes per class, Omega rank (0 = GLVQ), learn Omega)
Layout = tuple[int, int, int, int, bool]


@per_object()
def layout(spec: JobSpec) -> Layout:
    """(classes, d, prototypes per class, Omega rank (0 = GLVQ), learn Omega) from the public spec
    (cached per spec object: asked several times per task)."""
    schema = spec.schema
    if schema.categorical.any():
        raise TaskRejected("LVQ needs numeric features with public bounds; the schema has categorical columns")
    if schema.n_classes < 2:
        raise TaskRejected("LVQ needs a schema with at least 2 classes")
    p = {**DEFAULTS, **spec.params}
    d = schema.n_features
    ppc = int(p["prototypes_per_class"])
    if ppc < 1:
        raise TaskRejected("prototypes_per_class must be >= 1")
    rank = 0
    if spec.algorithm == "gmlvq":
        rank = int(p["omega_rank"]) or d
        if not 1 <= rank <= d:
            raise TaskRejected(f"omega_rank must lie in 1..{d}")
    return schema.n_classes, d, ppc, rank, spec.algorithm == "gmlvq"


def prototype_labels(n_classes: int, ppc: int) -> np.ndarray:
    """The class of every prototype: ``ppc`` prototypes per class, class by class."""
    return np.repeat(np.arange(n_classes, dtype=np.int64), ppc)
