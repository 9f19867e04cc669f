"""Fill in deploy/k8s/*.yaml for one site: the output is for `kubectl apply -f` and `podman kube play` alike.

    python deploy/k8s/render.py secret dpfed-coordinator-certs ca.crt=certs/coordinator/ca.crt \\
        coordinator.crt=certs/coordinator/coordinator.crt coordinator.key=certs/coordinator/coordinator.key
    python deploy/k8s/render.py coordinator [--host-port 50051]
    python deploy/k8s/render.py party party-a --coordinator dpfed-coordinator:50051 \\
        --schema data/schema.json --data /data/party-a.npz

``secret`` prints a Secret (``stringData``: PEM files are text) for ``kubectl apply -f -`` or
``podman secret create NAME FILE`` (podman's kube play reads a secret volume from such a Secret).
``party`` renames every object of party.yaml after the party (``dpfed-NAME``, ``dpfed-NAME-ledger``,
``dpfed-NAME-data``, ``dpfed-NAME-certs``) so that several parties can run on one host, and sets the
party's name, coordinator address, data file and public schema. ``coordinator`` adds a host port
(podman publishes it on 127.0.0.1) when asked. ``--secrets-as-volumes`` (podman 4.3, whose kube play
writes Secret volumes base64-encoded) mounts each certificate Secret's named volume instead: fill it
with ``podman volume import``. ``--no-claims`` leaves the PersistentVolumeClaims out (podman 4.3's kube
play refuses a claim whose volume exists: create the volumes once with ``podman volume create``).
``--seed`` is for tests only (reproducible noise).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent


class _Literal(str):
    """A multi-line string dumped as a YAML block (``|``), as the manifests are written."""


def _literal(dumper: yaml.SafeDumper, data: _Literal) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")


yaml.SafeDumper.add_representer(_Literal, _literal)


def _dump(docs: list[dict[str, Any]]) -> str:
    for d in docs:
        for k, v in (d.get("data") or {}).items():
            if isinstance(v, str) and "\n" in v:
                d["data"][k] = _Literal(v)
        for k, v in (d.get("stringData") or {}).items():
            d["stringData"][k] = _Literal(v) if "\n" in v else v
    return yaml.safe_dump_all(docs, sort_keys=False, width=120)


def _load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((HERE / name).read_text()) if d]


def secret(name: str, namespace: str, items: list[str]) -> str:
    data = {}
    for item in items:
        key, _, path = item.partition("=")
        if not key or not path:
            raise SystemExit(f"render.py secret: expected KEY=FILE, got {item!r}")
        data[key] = Path(path).read_text()
    return _dump([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                   "type": "Opaque", "stringData": data}])


def _secrets_as_volumes(docs: list[dict[str, Any]]) -> None:
    """Secret volumes -> the named volumes of the same name (podman 4.3 writes a Secret volume's files
    base64-encoded and ignores ``stringData``; the files go into the volume with ``podman volume import``)."""
    for d in docs:
        if d["kind"] == "Deployment":
            for vol in d["spec"]["template"]["spec"]["volumes"]:
                if "secret" in vol:
                    vol["persistentVolumeClaim"] = {"claimName": vol.pop("secret")["secretName"], "readOnly": True}


def coordinator(host_port: int | None, secrets_as_volumes: bool = False, no_claims: bool = False) -> str:
    docs = _load("coordinator.yaml")
    if no_claims:
        docs = [d for d in docs if d["kind"] != "PersistentVolumeClaim"]
    if secrets_as_volumes:
        _secrets_as_volumes(docs)
    if host_port is not None:
        dep = next(d for d in docs if d["kind"] == "Deployment")
        for port in dep["spec"]["template"]["spec"]["containers"][0]["ports"]:
            port.update(hostPort=host_port, hostIP="127.0.0.1")
    return _dump(docs)


def _toml_set(text: str, key: str, value: str) -> str:
    """Replace the top-level ``key = ...`` line of a TOML text (keys before the first table)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("["):
            lines.insert(i, f"{key} = {value}")
            break
        if line.split("=")[0].strip() == key:
            lines[i] = f"{key} = {value}"
            break
    return "\n".join(lines) + "\n"


def party(name: str, address: str, schema: Path, data: str, seed: int | None, secrets_as_volumes: bool = False,
          no_claims: bool = False, public_records: int | None = None) -> str:
    docs = _load("party.yaml")
    if no_claims:
        docs = [d for d in docs if d["kind"] != "PersistentVolumeClaim"]
    prefix = f"dpfed-{name}"
    for d in docs:
        d["metadata"]["name"] = d["metadata"]["name"].replace("dpfed-party", prefix)
        if d["kind"] == "ConfigMap":
            toml = d["data"]["party.toml"]
            for key, value in (("name", json.dumps(name)), ("coordinator", json.dumps(address)),
                               ("data", json.dumps(data))):
                toml = _toml_set(toml, key, value)
            if seed is not None:
                toml = _toml_set(toml, "seed", str(seed))
            if public_records is not None:  # PUBLIC: the bound this site agrees to publish (party/config.py)
                toml = _toml_set(toml, "public_records", str(public_records))
            d["data"]["party.toml"] = toml
            d["data"]["schema.json"] = json.dumps(json.loads(schema.read_text()), indent=1) + "\n"
        if d["kind"] == "Deployment":
            d["metadata"]["labels"] = {"app": prefix}
            d["spec"]["selector"] = {"matchLabels": {"app": prefix}}
            pod = d["spec"]["template"]
            pod["metadata"]["labels"] = {"app": prefix}
            for vol in pod["spec"]["volumes"]:
                for src in vol.values():
                    if isinstance(src, dict):
                        for field in ("name", "secretName", "claimName"):
                            if field in src:
                                src[field] = src[field].replace("dpfed-party", prefix)
    if secrets_as_volumes:
        _secrets_as_volumes(docs)
    return _dump(docs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("secret", help="a Secret of text files")
    s.add_argument("name")
    s.add_argument("items", nargs="+", metavar="KEY=FILE")
    s.add_argument("--namespace", default="dpfed")
    c = sub.add_parser("coordinator", help="coordinator.yaml, optionally with a host port")
    c.add_argument("--host-port", type=int)
    p = sub.add_parser("party", help="party.yaml for one party")
    p.add_argument("name")
    p.add_argument("--coordinator", required=True, help="HOST:PORT the party dials")
    p.add_argument("--schema", type=Path, required=True, help="the public schema (JSON)")
    p.add_argument("--data", required=True, help="the data file's path inside the container (/data/...)")
    p.add_argument("--seed", type=int, help="TESTS ONLY: reproducible noise (no privacy)")
    p.add_argument("--public-records", type=int, metavar="N",
                   help="a PUBLIC bound on the party's record count, sent with its registration (party.toml "
                        "public_records): `dpfed job submit --noise distributed` without --records sums them")
    for sp in (c, p):
        sp.add_argument("--secrets-as-volumes", action="store_true",
                        help="podman 4.3: mount the certificates from named volumes instead of Secrets")
        sp.add_argument("--no-claims", action="store_true",
                        help="leave out the PersistentVolumeClaims (podman 4.3 refuses one whose volume exists)")
    a = ap.parse_args(argv)
    if a.what == "secret":
        out = secret(a.name, a.namespace, a.items)
    elif a.what == "coordinator":
        out = coordinator(a.host_port, a.secrets_as_volumes, a.no_claims)
    else:
        out = party(a.name, a.coordinator, a.schema, a.data, a.seed, a.secrets_as_volumes, a.no_claims,
                    a.public_records)
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
