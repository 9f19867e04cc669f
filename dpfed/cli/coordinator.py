"""Operator commands: ``dpfed coordinator serve``, ``status``, ``job submit|wait|cancel|resume``,
``model get`` (``certs``: :mod:`dpfed.cli.certs`).

Commands that talk to a running coordinator take ``--coordinator HOST:PORT`` and an operator
certificate ``--cert FILE`` (key: same path with ``.key``, CA: ``ca.crt`` beside it, or ``--key``/
``--ca``); the environment variables ``DPFED_COORDINATOR``, ``DPFED_CERT``, ``DPFED_KEY`` and
``DPFED_CA`` give defaults. ``--insecure`` talks plain text (loudly warned).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
from typing import Any

import grpc

from dpfed.algorithms import add_algorithm_arguments

__all__ = ["add_commands", "format_status"]


def _admin_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection")
    g.add_argument("--coordinator", default=os.environ.get("DPFED_COORDINATOR", "127.0.0.1:50051"),
                   metavar="HOST:PORT", help="coordinator address (env DPFED_COORDINATOR; default %(default)s)")
    g.add_argument("--cert", default=os.environ.get("DPFED_CERT"),
                   help="operator certificate (env DPFED_CERT), from 'dpfed certs issue operator --ca DIR'")
    g.add_argument("--key", default=os.environ.get("DPFED_KEY"), help="its private key (default: CERT with .key)")
    g.add_argument("--ca", default=os.environ.get("DPFED_CA"), help="CA certificate (default: ca.crt beside CERT)")
    g.add_argument("--insecure", action="store_true", help="plain text without TLS (debugging only)")


def _client(args: argparse.Namespace):
    from coordinator.client import AdminClient

    if not args.insecure and not args.cert:
        raise SystemExit("dpfed: error: an operator certificate is required: --cert FILE (or DPFED_CERT), "
                         "or --insecure")
    return AdminClient(args.coordinator, cert=args.cert, key=args.key, ca=args.ca, insecure=args.insecure)


def _rpc_error(exc: grpc.RpcError, what: str) -> int:
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        msg = (f"cannot reach the coordinator ({exc.details()}); check the address, that it is running, and "
               "that your certificate is signed by its CA")
    else:
        msg = f"{code.name}: {exc.details()}"
    print(f"dpfed {what}: error: {msg}", file=sys.stderr)
    return 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register coordinator, status, job and model commands (``certs``: :mod:`dpfed.cli.certs`)."""
    _add_coordinator(sub)
    _add_status(sub)
    _add_job(sub)
    _add_model(sub)


def _add_coordinator(sub: argparse._SubParsersAction) -> None:
    """``dpfed coordinator serve``."""
    co = sub.add_parser("coordinator", help="run the coordinator daemon")
    cosub = co.add_subparsers(dest="coordinator_command", metavar="{serve}")
    co.set_defaults(func=lambda a: (co.print_help(), 2)[1])
    serve = cosub.add_parser("serve", help="serve parties and operators (runs until interrupted)")
    serve.add_argument("--config", required=True, help="coordinator.toml (see coordinator/config.py)")
    serve.add_argument("--insecure", action="store_true", help="override the config: plain text, no TLS")
    serve.add_argument("--log-level", default="INFO")
    serve.add_argument("--ray-address", default=None, metavar="ADDR",
                       help="run the parties' data path on this Ray cluster (HOST:PORT of its head, 'auto', or 'local' "
                            "for a one-machine cluster): ingress shards as Ray actors merge each round's answers; "
                            "overrides ray_address in the config")
    serve.add_argument("--shards", type=int, default=None, help="ingress shards on the Ray cluster (config: shards)")
    serve.add_argument("--max-concurrent-jobs", type=int, default=None,
                       help="jobs that run at once (config: max_concurrent_jobs, default 4)")
    serve.set_defaults(func=_cmd_serve)


def _add_status(sub: argparse._SubParsersAction) -> None:
    """``dpfed status``."""
    st = sub.add_parser("status", help="parties, jobs and per-party privacy budget of a coordinator")
    _admin_args(st)
    st.add_argument("--json", action="store_true", help="print the status as one JSON object")
    st.set_defaults(func=_cmd_status)


def _add_job(sub: argparse._SubParsersAction) -> None:
    """``dpfed job submit|wait|cancel|resume``."""
    from dpfed.algorithms import algorithm_names

    job = sub.add_parser("job", help="submit, wait for, cancel or resume jobs")
    jsub = job.add_subparsers(dest="job_command", metavar="{submit,wait,cancel,resume}")
    job.set_defaults(func=lambda a: (job.print_help(), 2)[1])
    sb = jsub.add_parser("submit", help="queue a job on the coordinator", conflict_handler="resolve")
    sb.add_argument("--algorithm", required=True,
                    help=f"one of {', '.join(algorithm_names())} (or a plugin algorithm of the coordinator)")
    sb.add_argument("--epsilon", type=float, required=True, help="per-party epsilon of the whole job")
    sb.add_argument("--delta", type=float, default=None, help="per-party delta (default: the algorithm's)")
    sb.add_argument("--parties", nargs="+", default=[], metavar="NAME",
                    help="parties taking part (default: every connected party); algorithm options that need the number "
                         "of parties (LVQ's distributed-noise share) use how many are named here, else 1")
    sb.add_argument("--job-id", default=None, help="job id (default: a fresh one)")
    sb.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="extra job parameter (VALUE parsed as JSON when it can be; repeatable)")
    sb.add_argument("--wait", action="store_true", help="wait for the job to end and print its record")
    _admin_args(sb)
    add_algorithm_arguments(sb)
    g = sb.add_argument_group("secure aggregation (jobs with --noise distributed)")
    g.add_argument("--secure-aggregation", choices=("on", "off"), default="on",
                   help="on (default): distributed noise runs under SecAgg, as a deployment requires")
    g.add_argument("--records", type=int, default=None, metavar="N",
                   help="a PUBLIC bound on the total number of records over the parties (the modulus headroom); "
                        "required with --noise distributed")
    g.add_argument("--min-survivors", type=int, default=None, metavar="P_MIN",
                   help="noise planned for P_MIN survivors (default: every party of the roster)")
    g.add_argument("--colluders", type=int, default=None, help="parties that may collude with the coordinator (default 0)")
    g.add_argument("--bits", type=int, default=None, metavar="B", help="SecAgg arithmetic mod 2^B (default 16)")
    sb.set_defaults(func=_cmd_submit)
    for name, fn, hlp in (("wait", _cmd_wait, "wait for a job to end"), ("cancel", _cmd_cancel, "cancel a job"),
                          ("resume", _cmd_resume, "continue a failed, cancelled or refused job from its last "
                                                  "completed round (same id and parameters: no new charge)")):
        p = jsub.add_parser(name, help=hlp)
        p.add_argument("job_id", metavar="JOB")
        if name == "resume":
            p.add_argument("--wait", action="store_true", help="wait for the job to end and print its record")
        _admin_args(p)
        p.set_defaults(func=fn)


def _add_model(sub: argparse._SubParsersAction) -> None:
    """``dpfed model get|predict|evaluate`` (the last two in :mod:`dpfed.cli.model`)."""
    from dpfed.cli.model import add_model_actions

    model = sub.add_parser("model", help="fetch trained models, predict and evaluate with them")
    msub = model.add_subparsers(dest="model_command", metavar="{get,predict,evaluate}")
    model.set_defaults(func=lambda a: (model.print_help(), 2)[1])
    get = msub.add_parser("get", help="save a finished job's model as a self-contained model file (.npz: the "
                                      "arrays, the algorithm, its public parameters and schema)")
    get.add_argument("job_id", metavar="JOB")
    get.add_argument("-o", "--output", required=True, help="output .npz file")
    _admin_args(get)
    get.set_defaults(func=_cmd_model_get)
    add_model_actions(msub)


# ---------------------------------------------------------------------- commands
def _cmd_serve(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from coordinator.config import ConfigError, CoordinatorConfig
    from coordinator.server import serve
    from coordinator.state import StateError

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        cfg = CoordinatorConfig.load(args.config)
        if args.insecure:
            cfg = replace(cfg, insecure=True)
        over = {k: v for k, v in (("ray_address", args.ray_address), ("shards", args.shards),
                                  ("max_concurrent_jobs", args.max_concurrent_jobs)) if v is not None}
        if over:
            cfg = replace(cfg, **over)
        running = serve(cfg)
    except (ConfigError, StateError, FileNotFoundError, OSError, ConnectionError) as exc:
        print(f"dpfed coordinator: error: {exc}", file=sys.stderr)
        return 2
    from dpfed.federation.shutdown import STOP_SECONDS, stop_on_signals

    stop = threading.Event()
    stop_on_signals(stop.set, running.coordinator.store.close, "the coordinator")
    shards = running.coordinator.pool
    print(f"dpfed coordinator listening on port {running.port} (state in {cfg.state_dir})"
          + (f"; {len(shards.addresses)} ingress shard(s) on Ray: {', '.join(shards.addresses)}" if shards else ""),
          flush=True)
    stop.wait()
    running.stop(grace=STOP_SECONDS, join_seconds=STOP_SECONDS)  # calls in flight and job runners: 1 s
    logging.shutdown()
    os._exit(0)  # not `return`: the interpreter would wait for a planner thread still deciding an offer


def _ago(now: float, t: float | None) -> str:
    if t is None or not isinstance(t, (int, float)) or math.isnan(t):
        return "never"
    d = max(now - t, 0.0)
    if d < 2:
        return "now"
    if d < 120:
        return f"{d:.0f}s ago"
    if d < 7200:
        return f"{d / 60:.0f}m ago"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths))] +
                     [fmt.format(*map(str, r)) for r in rows])


def _num(x: Any) -> str:
    return "?" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"


def _over(p: dict[str, Any]) -> bool:
    """Whether the coordinator's record or the party's own report of its spend exceeds its limit."""
    limit = p.get("epsilon_limit")
    if not isinstance(limit, (int, float)) or math.isnan(limit):
        return False
    return any(isinstance(v, (int, float)) and v > limit for v in (p.get("epsilon_spent"), p.get("party_reported_spent")))


def budget_warning(p: dict[str, Any]) -> str:
    """One line: a party's spend exceeds its limit (by the coordinator's record or its own report)."""
    return (f"WARNING: party {p['name']} is over its budget: spent {_num(p.get('epsilon_spent'))} (coordinator's "
            f"record), {_num(p.get('party_reported_spent'))} (party's ledger) against a limit of "
            f"{_num(p.get('epsilon_limit'))}")


def format_status(status: dict[str, Any]) -> str:
    """The status as readable tables (parties with budget, then jobs)."""
    now = status.get("now", time.time())
    prow = [[p["name"], "yes" if p["connected"] else "no", _ago(now, p.get("last_seen")),
             f"{_num(p.get('epsilon_spent'))} / {_num(p.get('epsilon_limit'))}" + (" OVER" if _over(p) else ""),
             _num(p.get("party_reported_spent")), _num(p.get("delta_limit"))]
            for p in status["parties"]]
    jrow = []
    for j in status["jobs"]:
        reason = j.get("reason", "")
        jrow.append([j["job_id"], j["algorithm"], j["state"], f"{100 * j.get('progress', 0):.0f}%", j.get("rounds", 0),
                     _num(j["params"].get("epsilon")), reason if len(reason) < 100 else reason[:97] + "..."])
    warn = [budget_warning(p) for p in status["parties"] if _over(p)]
    out = warn + ["Parties", _table(prow, ["party", "connected", "last seen", "epsilon spent / limit",
                                           "party reports", "delta limit"])
           if prow else "(none registered)", "", "Jobs",
           _table(jrow, ["job", "algorithm", "state", "progress", "rounds", "epsilon", "reason"]) if jrow else "(none)"]
    return "\n".join(out)


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        with _client(args) as c:
            st = c.status()
    except grpc.RpcError as exc:
        return _rpc_error(exc, "status")
    print(json.dumps(st, indent=1) if args.json else format_status(st))
    return 0


def _print_record(rec: dict[str, Any]) -> None:
    print(json.dumps({k: rec.get(k) for k in ("job_id", "algorithm", "state", "progress", "rounds", "reason",
                                              "refusals", "party_epsilon", "summary")}, indent=1))


def _refused(refusal: str | None, algo: Any, params: dict[str, Any]) -> bool:
    """Print a job's one-line refusal and say so; else check the declared ranges the coordinator and the parties
    check (a ValueError with the reason)."""
    if refusal:
        print(f"dpfed job submit: error: {refusal}", file=sys.stderr)
        return True
    if algo is not None:
        from dpfed.algorithms.params import validate

        validate(algo, params)
    return False


def _cmd_submit(args: argparse.Namespace) -> int:
    from dpfed.algorithms import get_algorithm
    from dpfed.algorithms.pca.options import pipeline_name

    args.algorithm = pipeline_name(args.algorithm, args)  # --pca K with another learner: PCA first, one plan
    try:
        algo = get_algorithm(args.algorithm)
    except (ValueError, ModuleNotFoundError):
        algo = None  # not known here: the coordinator's plugins may know it
    params: dict[str, Any] = {"epsilon": args.epsilon}
    if args.delta is not None or algo is not None:
        params["delta"] = algo.default_delta if args.delta is None else args.delta
    if algo is not None and algo.params_from_args is not None:
        # --parties names the parties here; an algorithm's own options read ``parties`` as their number
        # (e.g. the share of distributed noise): the named ones, else 1 (each party adds the full noise)
        params.update(algo.params_from_args(argparse.Namespace(**{**vars(args),
                                                                  "parties": max(len(args.parties), 1)})))
    from dpfed.cli.job_params import needs_registered_bound, parse_param_overrides, secure_defaults, with_overrides

    overrides = parse_param_overrides(args.param)
    if isinstance(overrides, str):
        print(f"dpfed job submit: error: {overrides}", file=sys.stderr)
        return 2
    params = with_overrides(params, overrides)
    # checked before connecting, unless the record bound must come from the parties' registrations
    ask = needs_registered_bound(params, args)
    if not ask and _refused(secure_defaults(params, args), algo, params):
        return 2
    try:
        with _client(args) as c:  # a --noise distributed job without --records: the parties' registered bounds
            if ask and _refused(secure_defaults(params, args, lambda: c.status()["parties"]), algo, params):
                return 2
            job_id = c.submit_job(args.algorithm, params, parties=args.parties, job_id=args.job_id)
            print(job_id, flush=True)
            if args.wait:
                rec = _wait(c, job_id)
                _print_record(rec)
                return 0 if rec.get("state") == "done" else 1
    except grpc.RpcError as exc:
        return _rpc_error(exc, "job submit")
    return 0


def _wait(c: Any, job_id: str) -> dict[str, Any]:
    """The job's final record; on a terminal, with a progress bar on stderr (round r of T, time left)."""
    from dpfed.cli.progress import RoundsBar, wants_bar

    if not wants_bar():
        return c.wait(job_id, raise_on_failure=False)
    bar, rec = RoundsBar(job_id), {}
    try:
        for rec in c.watch(job_id):
            bar(rec)
    finally:
        bar.close()
    return rec


def _cmd_wait(args: argparse.Namespace) -> int:
    try:
        with _client(args) as c:
            rec = _wait(c, args.job_id)
    except grpc.RpcError as exc:
        return _rpc_error(exc, "job wait")
    _print_record(rec)
    return 0 if rec.get("state") == "done" else 1


def _cmd_resume(args: argparse.Namespace) -> int:
    try:
        with _client(args) as c:
            rec = c.resume(args.job_id)
            if args.wait:
                rec = _wait(c, args.job_id)
    except grpc.RpcError as exc:
        return _rpc_error(exc, "job resume")
    _print_record(rec)
    return 0 if rec.get("state") in ("done", "queued") else 1


def _cmd_cancel(args: argparse.Namespace) -> int:
    try:
        with _client(args) as c:
            rec = c.cancel(args.job_id)
    except grpc.RpcError as exc:
        return _rpc_error(exc, "job cancel")
    _print_record(rec)
    return 0


def _cmd_model_get(args: argparse.Namespace) -> int:
    from dpfed.algorithms.model_file import ModelFileError, write_model_file

    try:
        with _client(args) as c:
            model, record = c.get_model(args.job_id)
    except grpc.RpcError as exc:
        return _rpc_error(exc, "model get")
    if not record.get("schema"):
        raise ModelFileError(f"job {args.job_id} has no public schema on record: its model cannot be made usable")
    path = write_model_file(args.output, model, algorithm=str(record.get("algorithm")), params=record.get("params", {}),
                            schema=record["schema"], job_id=args.job_id,
                            extra={"summary": record.get("summary", {}), "party_epsilon": record.get("party_epsilon", {})})
    print(path)
    return 0
