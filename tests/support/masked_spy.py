"""A spy on the coordinator's SecAgg server in this process: the party sets of the masked inputs (or
masked partial sums) each ``collect_masked`` call receives, one list per call."""
from __future__ import annotations

from dpfed.federation import secagg as sa


def spy_masked_parts(monkeypatch) -> list[list[tuple[str, ...]]]:
    """Patch :meth:`SecAggServer.collect_masked` (undone with ``monkeypatch.undo()``) and return the record."""
    seen: list[list[tuple[str, ...]]] = []
    collect = sa.SecAggServer.collect_masked

    def spy(self, r, inputs, length=None):
        inputs = list(inputs)
        seen.append([(m.name,) if isinstance(m, sa.MaskedInput) else tuple(m.names) for m in inputs])
        return collect(self, r, inputs, length)

    monkeypatch.setattr(sa.SecAggServer, "collect_masked", spy)
    return seen
