"""``dpfed stats``: private statistics over parties in ONE job (one plan, one charge per party).

With ``--dataset`` the records are split across ``--parties`` simulated parties (``--transport inproc``, or
``grpc``: one party process each, mutual TLS); with ``--coordinator`` the job is submitted to a running
coordinator and its parties answer from their own data (as ``dpfed job submit --algorithm statistics``).
Queries: ``--count``, ``--sum/--mean/--variance/--std COL``, ``--median COL``, ``--quantile COL:Q``,
``--histogram COL[:bins=K]``, ``--table COL:COL2``, or ``--query STAT:COL[:ARG]``; ``--group-by COL`` (a
categorical column, or ``class``) answers each per group. Every value is printed with its standard error and
confidence interval; ``--json`` prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

__all__ = ["add_commands", "queries_from_args", "format_results"]

_FLAGS = (("sum", "sum"), ("mean", "mean"), ("variance", "var"), ("var", "var"), ("std", "std"),
          ("median", "median"), ("quantile", "quantile"), ("histogram", "histogram"), ("table", "table"))


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stats", help="private counts, means, variances, quantiles, histograms over parties",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("data (one of)")
    src.add_argument("--dataset", help="bundled or --data-dir name (adult, ...), or a .npz path: simulated parties")
    src.add_argument("--coordinator", metavar="HOST:PORT", help="submit the job to this coordinator instead")
    p.add_argument("--parties", nargs="+", default=None, metavar="N|NAME",
                   help="with --dataset: the number of parties (default 5); with --coordinator: their names")
    p.add_argument("--epsilon", type=float, required=True, help="per-party epsilon of the whole job")
    p.add_argument("--delta", type=float, default=1e-6, help="per-party delta (default 1e-6; 0: pure DP, Laplace)")
    p.add_argument("--noise", choices=("local", "distributed"), default="local",
                   help="local: every party adds the full noise; distributed: noise shares under secure "
                        "aggregation, Polya shares summing to a discrete Laplace or discrete Gaussian shares "
                        "(--mechanism; the sum carries the noise of one party holding all the data)")
    p.add_argument("--mechanism", choices=("auto", "laplace", "gaussian"), default="auto")
    p.add_argument("--confidence", type=float, default=0.95, help="level of the intervals (default 0.95)")
    p.add_argument("--group-by", default=None, metavar="COL", help="categorical column, or 'class' (the label)")
    q = p.add_argument_group("queries (repeatable)")
    q.add_argument("--count", action="store_true", help="the number of records")
    for flag, _ in _FLAGS:
        q.add_argument(f"--{flag}", action="append", default=[], metavar="COL" if flag not in (
            "quantile", "histogram", "table") else {"quantile": "COL:Q", "histogram": "COL[:bins=K]",
                                                     "table": "COL:COL2"}[flag])
    q.add_argument("--query", action="append", default=[], metavar="STAT:COL[:ARG]", help="any query, raw")
    p.add_argument("--transport", choices=("inproc", "grpc"), default="inproc",
                   help="with --dataset: inproc (the party sessions in this process, default) or grpc (processes)")
    p.add_argument("--seed", type=int, default=None, help="reproducible split and noise (simulation only)")
    p.add_argument("--data-dir", default=None, help="folder searched first for the dataset")
    p.add_argument("--cert", default=None, help="with --coordinator: operator certificate")
    p.add_argument("--key", default=None)
    p.add_argument("--ca", default=None)
    p.add_argument("--insecure", action="store_true", help="with --coordinator: plain text (testing only)")
    p.add_argument("--records", type=int, default=None, metavar="N",
                   help="with --coordinator and --noise distributed: a public bound on the total number of records "
                        "over the parties (the secure-aggregation modulus; from their documentation, not their data; "
                        "default: the sum of the public_records the parties registered with)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_main)


def queries_from_args(args: argparse.Namespace) -> list[str]:
    """The query strings of the command line, in a stable order (count first)."""
    out = ["count"] if args.count else []
    for flag, stat in _FLAGS:
        out += [f"{stat}:{v}" for v in getattr(args, flag, [])]
    out += list(args.query)
    if not out:
        raise ValueError("name at least one query (--count, --mean COL, --median COL, ...; see dpfed stats -h)")
    return out


def _fmt(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, (int, float)) else str(x)


def format_results(results: list[dict[str, Any]], confidence: float) -> str:
    """One line per query and group (histogram and table cells on their own lines)."""
    lines = [f"{'query':<34} {'group':<8} {'value':>12} {'std err':>10}   {100 * confidence:g}% interval"]
    for r in results:
        groups = r["groups"] if r["groups"] is not None else ["all"]
        vals = r["value"] if r["groups"] is not None else [r["value"]]
        for gi, g in enumerate(groups):
            v, se, lo, hi = ((r[k][gi] if r["groups"] is not None else r[k]) for k in ("value", "se", "lower", "upper"))
            if isinstance(vals[gi], list):  # histogram / table cells
                for c, (vc, sc, lc, hc) in enumerate(zip(v, se, lo, hi, strict=True)):
                    lines.append(f"{r['query'] + f' [{c}]':<34} {str(g):<8} {_fmt(vc):>12} {_fmt(sc):>10}   "
                                 f"[{_fmt(lc)}, {_fmt(hc)}]")
            else:
                lines.append(f"{r['query']:<34} {str(g):<8} {_fmt(v):>12} {_fmt(se):>10}   [{_fmt(lo)}, {_fmt(hi)}]")
    return "\n".join(lines)


def _simulate(args: argparse.Namespace, queries: list[str]) -> dict[str, Any]:
    from dpfed import stats
    from dpfed.data.datasets import load_dataset, split_parties

    ds = load_dataset(args.dataset, args.data_dir)
    n = int(args.parties[0]) if args.parties else 5
    if n < 1:
        raise ValueError("--parties must be >= 1")
    data = split_parties(ds.X, ds.y, n, "iid", np.random.default_rng(args.seed))
    out = stats.run(queries, data, ds.schema, epsilon=args.epsilon, delta=args.delta, group_by=args.group_by,
                    noise=args.noise, mechanism=args.mechanism, confidence=args.confidence,
                    transport=args.transport, seed=args.seed)
    return {"dataset": args.dataset, **out}


def _submit(args: argparse.Namespace, queries: list[str]) -> dict[str, Any]:
    """Submit the job to ``--coordinator`` and wait for it. ``--noise distributed`` without ``--records``: the
    bound is the sum of the ``public_records`` the roster's parties registered with (the coordinator's status,
    asked once; no ``--parties``: the connected parties), as ``dpfed job submit``."""
    from coordinator.client import AdminClient
    from dpfed.cli.job_params import registered_record_bound

    names = list(args.parties or [])
    ask = args.noise == "distributed" and args.records is None
    params: dict[str, Any] = {} if ask else _job_params(args, queries, names, args.records)  # before connecting
    if not args.insecure and not args.cert:
        raise ValueError("--coordinator needs an operator certificate: --cert FILE (or --insecure)")
    with AdminClient(args.coordinator, cert=args.cert, key=args.key, ca=args.ca, insecure=args.insecure) as c:
        if ask:
            bound = registered_record_bound(c.status()["parties"], names)
            if isinstance(bound, str):
                raise ValueError(bound)
            records, names = bound
            params = _job_params(args, queries, names, records)
        job_id = c.submit_job("statistics", params, parties=names)
        rec = c.wait(job_id, raise_on_failure=False)
    if rec.get("state") != "done":
        raise ValueError(f"job {job_id} ended {rec.get('state')}: {rec.get('reason', '')}")
    summary = rec.get("summary") or {}
    return {"job_id": job_id, "epsilon": args.epsilon, "delta": args.delta, "noise": args.noise,
            "mechanism": summary.get("mechanism"), "confidence": args.confidence, "transport": "coordinator",
            "party_epsilon": rec.get("party_epsilon"), "results": summary.get("results", [])}


def _job_params(args: argparse.Namespace, queries: list[str], names: list[str],
                records: int | None) -> dict[str, Any]:
    """The statistics job's validated parameters (``records``: the public bound of a distributed-noise job)."""
    from dpfed import stats

    secure = {"records": int(records)} if args.noise == "distributed" and records is not None else {}
    params = stats.job_params(queries, epsilon=args.epsilon, delta=args.delta, group_by=args.group_by,
                              noise=args.noise, mechanism=args.mechanism, confidence=args.confidence,
                              parties=max(len(names), 2), **secure)
    if args.noise == "distributed" and not names:
        params.pop("min_survivors", None)  # every party of the roster
    return params


def _main(args: argparse.Namespace) -> int:
    from dpfed.core.errors import DpfedError

    try:
        queries = queries_from_args(args)
        if (args.dataset is None) == (args.coordinator is None):
            raise ValueError("give exactly one of --dataset (simulated parties) and --coordinator")
        out = _simulate(args, queries) if args.dataset else _submit(args, queries)
    except (ValueError, FileNotFoundError, DpfedError) as exc:
        print(f"dpfed stats: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['mechanism']} noise, epsilon {out['epsilon']:g}, delta {out['delta']:g}, noise {out['noise']}"
              f" ({out.get('parties', '')} parties)")
        print(format_results(out["results"], out["confidence"]))
    return 0
