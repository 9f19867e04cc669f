"""The queries of a statistics job and the layout of its one released integer vector (public: a pure
function of the job's parameters and the schema, never of the records).

A query is a dict ``{"stat", "column", "by", "bins", "q", "column2"}`` (JSON job parameter ``queries``) or
the short string ``STAT[:COLUMN[:ARG]]`` (``mean:age``, ``quantile:age:0.9``, ``histogram:age:bins=20``,
``table:sex:race``, ``count``), grouped by the job's ``group_by`` unless it names its own ``by``. ``by`` is a
categorical column or ``class`` (the label); the groups are the schema's public domain.

Each query is answered from one *block* of the vector; queries that need the same sums share a block:

* ``moments`` (count, sum, mean, var, std of a numeric column): per group the Bernstein-basis sums of the
  value rescaled to u = (clamp(x) - lower) / (upper - lower) in [0, 1]: degree 1 releases
  sum (1 - u), sum u; degree 2 (variance, std) sum (1 - u)^2, sum 2u(1 - u), sum u^2. The basis is a
  partition of unity with non-negative terms (Lorentz, *Bernstein polynomials*, 1953), so one record adds
  entries summing to exactly 1: L1 (and L2) sensitivity 1 for count, sum and sum of squares together, where
  three separate sums would cost 3;
* ``hist``: per group a histogram of a column (a categorical one's codes, or ``bins`` equal-width bins over a
  numeric one's public bounds, the last bin closed);
* ``tree``: per group the hierarchical histogram (:mod:`.tree`, Hay et al. 2010) of a numeric column on the
  public grid of quantiles and medians (``bins`` leaves, default :data:`QUANTILE_GRID`); a grid too small for
  a second level (h = 1) is a plain ``hist`` block, shared with a histogram of the same bins;
* ``table``: per group the two-way contingency table of two categorical columns;
* ``count``: per group the number of records (only when no other block of the same grouping gives it).

Each record adds at most its block's weight to the entries of each block (one group, one cell or one basis
vector) and to each LEVEL of a tree block (one node per level), so with ``levels`` h_b per block the vector's
sensitivities are sum_b h_b W_b (L1) and sqrt(sum_b h_b W_b^2) (L2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from dpfed.algorithms.statistics.tree import tree_cells, tree_levels
from dpfed.data.schema import Schema

__all__ = ["STATS", "LABEL", "QUANTILE_GRID", "MAX_BINS", "MAX_QUERIES", "Query", "Block", "Layout",
           "parse_query", "parse_queries", "default_queries", "check_size"]

STATS = ("count", "sum", "mean", "var", "std", "histogram", "quantile", "median", "table")
LABEL = "class"
QUANTILE_GRID = 256
MAX_BINS = 4096
MAX_QUERIES = 64
_MOMENT_DEGREE = {"count": 1, "sum": 1, "mean": 1, "var": 2, "std": 2}


@dataclass(frozen=True)
class Query:
    """One statistic: ``stat`` of ``column`` (and ``column2`` for a table) per group of ``by`` (None: all)."""

    stat: str
    column: str | None = None
    by: str | None = None
    bins: int | None = None
    q: float | None = None
    column2: str | None = None

    def to_dict(self) -> dict[str, Any]:
        extra = {k: v for k, v in (("bins", self.bins), ("q", self.q), ("column2", self.column2)) if v is not None}
        return {"stat": self.stat, "column": self.column, "by": self.by, **extra}

    @property
    def label(self) -> str:
        """A short public name, e.g. ``quantile(age, 0.9) by sex``."""
        args = [a for a in (self.column, self.column2) if a] + ([f"{self.q:g}"] if self.stat == "quantile" else [])
        args += [f"bins={self.bins}"] if self.stat == "histogram" and self.bins else []
        return f"{self.stat}({', '.join(args)})" + (f" by {self.by}" if self.by else "")


def parse_query(item: Any, group_by: str | None = None) -> Query:
    """A query from its dict or short string form (ValueError with the reason)."""
    if isinstance(item, str):
        parts = item.split(":")
        d: dict[str, Any] = {"stat": parts[0]}
        rest = parts[1:]
        if rest:
            d["column"] = rest.pop(0)
        for arg in rest:
            key, eq, val = arg.partition("=")
            if eq:
                d[key] = val
            elif d["stat"] == "table":
                d["column2"] = arg
            else:
                d["q"] = arg
        item = d
    if not isinstance(item, Mapping):
        raise ValueError(f"a query is a string like 'mean:age' or an object, got {type(item).__name__}")
    unknown = sorted(set(item) - {"stat", "column", "by", "bins", "q", "column2"})
    if unknown:
        raise ValueError(f"query has unknown key {unknown[0]!r}")
    stat = item.get("stat")
    if stat not in STATS:
        raise ValueError(f"query statistic must be one of {', '.join(STATS)}, got {stat!r}")
    try:
        bins = None if item.get("bins") is None else int(item["bins"])
        q = 0.5 if stat == "median" else (None if item.get("q") is None else float(item["q"]))
    except (TypeError, ValueError):
        raise ValueError(f"query {stat}: bins must be an integer and q a number") from None
    if stat == "quantile" and (q is None or not 0.0 < q < 1.0):
        raise ValueError("a quantile query needs q in (0, 1), e.g. 'quantile:age:0.9'")
    if bins is not None and not 1 <= bins <= MAX_BINS:
        raise ValueError(f"query bins must lie in [1, {MAX_BINS}]")
    by = item.get("by", group_by)
    col = item.get("column")
    if stat != "count" and not isinstance(col, str):
        raise ValueError(f"query {stat} needs a column")
    col2 = item.get("column2")
    if stat == "table" and not isinstance(col2, str):
        raise ValueError("a table query needs two categorical columns, e.g. 'table:sex:race'")
    return Query(str(stat), None if col is None else str(col), None if by in (None, "") else str(by), bins,
                 None if stat not in ("quantile", "median") else q, None if stat != "table" else str(col2))


def parse_queries(items: Sequence[Any], group_by: str | None = None) -> tuple[Query, ...]:
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError("a statistics job needs a non-empty list of queries")
    if len(items) > MAX_QUERIES:
        raise ValueError(f"at most {MAX_QUERIES} queries per job")
    return tuple(parse_query(x, group_by) for x in items)


def default_queries(schema: Schema) -> list[str]:
    """The queries of a job that names none: the count and the mean of every numeric column."""
    return ["count"] + [f"mean:{f.name}" for f in schema.features if f.kind == "numeric"]


@dataclass(frozen=True)
class Block:
    """One block of the released vector: ``groups`` x ``cells`` entries from ``offset``, weight per record."""

    kind: str                 # "moments", "hist", "tree", "table", "count"
    column: int               # feature index (-1 for count)
    column2: int              # second feature of a table (-1 otherwise)
    by: int                   # grouping feature index, -1 none, -2 the label
    groups: int
    cells: int
    degree: int = 0           # moments: 1 or 2
    bins: int = 0             # hist of a numeric column: equal-width bins; tree: its leaves
    offset: int = 0

    @property
    def size(self) -> int:
        return self.groups * self.cells

    def key(self) -> tuple:
        return (self.kind, self.column, self.column2, self.by, self.bins)

    @property
    def levels(self) -> int:
        """Entries one record adds to per group, in units of the weight (a tree: one node per level)."""
        return len(tree_levels(self.bins)) if self.kind == "tree" else 1


@dataclass(frozen=True)
class Layout:
    """The queries, their blocks and where each query reads (``source[i]``: block index of query i)."""

    queries: tuple[Query, ...]
    blocks: tuple[Block, ...]
    source: tuple[int, ...]
    length: int

    @classmethod
    def build(cls, queries: Sequence[Query], schema: Schema) -> "Layout":
        names = {f.name: i for i, f in enumerate(schema.features)}

        def feature(name: str | None, kind: str | None, what: str) -> int:
            if name not in names:
                raise ValueError(f"{what}: no column {name!r} in the schema")
            j = names[name]
            if kind is not None and schema.features[j].kind != kind:
                raise ValueError(f"{what}: column {name!r} is {schema.features[j].kind}, needs {kind}")
            return j

        def grouping(q: Query) -> tuple[int, int]:
            if q.by is None:
                return -1, 1
            if q.by == LABEL or (q.by == schema.label and schema.n_classes > 0):
                if schema.n_classes < 1:
                    raise ValueError(f"{q.label}: the schema has no label classes to group by")
                return -2, int(schema.n_classes)
            j = feature(q.by, "categorical", f"{q.label} (group by)")
            return j, int(schema.features[j].categories)

        wanted: list[Block] = []
        for q in queries:
            by, g = grouping(q)
            if q.stat in _MOMENT_DEGREE and q.column is not None:
                c = feature(q.column, "numeric", q.label)
                d = _MOMENT_DEGREE[q.stat]
                wanted.append(Block("moments", c, -1, by, g, d + 1, degree=d))
            elif q.stat == "count":
                wanted.append(Block("count", -1, -1, by, g, 1))
            elif q.stat == "table":
                a, b = feature(q.column, "categorical", q.label), feature(q.column2, "categorical", q.label)
                wanted.append(Block("table", a, b, by, g, int(schema.features[a].categories)
                                    * int(schema.features[b].categories)))
            else:  # histogram, quantile, median
                c = feature(q.column, None, q.label)
                f = schema.features[c]
                if f.kind == "categorical":
                    if q.stat != "histogram":
                        raise ValueError(f"{q.label}: quantiles need a numeric column")
                    wanted.append(Block("hist", c, -1, by, g, int(f.categories)))
                else:
                    bins = q.bins or (QUANTILE_GRID if q.stat != "histogram" else 10)
                    if q.stat != "histogram" and len(tree_levels(bins)) > 1:
                        wanted.append(Block("tree", c, -1, by, g, tree_cells(bins), bins=bins))
                    else:
                        wanted.append(Block("hist", c, -1, by, g, bins, bins=bins))
        return cls.assemble(tuple(queries), wanted)

    @classmethod
    def assemble(cls, queries: tuple[Query, ...], wanted: list[Block]) -> "Layout":
        """Share blocks: moments of one column and grouping take the highest degree; a count reads any block
        of its grouping (moments first) before it gets its own."""
        blocks: list[Block] = []
        index: dict[tuple, int] = {}
        for b in wanted:
            if b.kind == "count":
                continue
            k = b.key()
            if k in index:
                old = blocks[index[k]]
                if b.degree > old.degree:
                    blocks[index[k]] = Block(**{**old.__dict__, "degree": b.degree, "cells": b.cells})
            else:
                index[k] = len(blocks)
                blocks.append(b)
        for b in wanted:
            if b.kind == "count" and not any(x.by == b.by for x in blocks):
                index[b.key()] = len(blocks)
                blocks.append(b)
        order = sorted(range(len(blocks)), key=lambda i: ({"moments": 0, "count": 1}.get(blocks[i].kind, 2), i))
        at, placed = 0, []
        for i in range(len(blocks)):
            b = blocks[i]
            placed.append(Block(**{**b.__dict__, "offset": at}))
            at += b.size
        source = []
        for b in wanted:
            if b.kind == "count":
                source.append(next(i for i in order if placed[i].by == b.by))
            else:
                source.append(index[b.key()])
        return cls(queries, tuple(placed), tuple(source), at)

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    @property
    def levels(self) -> tuple[int, ...]:
        """Each block's :attr:`Block.levels` (the plan's sensitivities: module docstring)."""
        return tuple(b.levels for b in self.blocks)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Each block's entries in the vector, in order."""
        return tuple(b.size for b in self.blocks)

    @property
    def counts(self) -> tuple[bool, ...]:
        """Which blocks hold whole counts (every kind but ``moments``: weight 1 under Laplace, :mod:`.plan`)."""
        return tuple(b.kind != "moments" for b in self.blocks)


def check_size(layout: Layout, cap: int) -> None:
    if layout.length > cap:
        raise ValueError(f"the statistics would release {layout.length} numbers, more than the cap {cap}; "
                         "use fewer bins, groups or queries")
    if not math.isfinite(layout.length):  # pragma: no cover - lengths are integers
        raise ValueError("bad layout")
