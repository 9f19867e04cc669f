#!/usr/bin/env bash
# A coordinator and parties on one host with `podman kube play` of deploy/k8s/coordinator.yaml and
# party.yaml (the manifests `kubectl apply` takes), each party with its own certificate, data volume and
# ledger volume, on a podman network of their own.
#
#   deploy/k8s/podman-play.sh up DIR PARTY [PARTY ...]   # DIR holds certs/ and data/ (see below)
#   deploy/k8s/podman-play.sh down PARTY [PARTY ...] [--volumes]   # --volumes also deletes ledgers and state
#
# DIR/certs: deploy/provision-certs.sh DIR/certs dpfed-coordinator PARTY ...  (the parties dial
#   dpfed-coordinator, a network alias of the coordinator's pod; the operator dials 127.0.0.1)
# DIR/data: PARTY.npz (or .csv) and schema.json per party, e.g. deploy/compose/make_demo_data.py DIR/data
# Environment: DPFED_PORT (host port on 127.0.0.1, default 50051), DPFED_NETWORK (default dpfed),
# DPFED_IMAGE (default dpfed:0.1.0, from deploy/build-image.sh), DPFED_PUBLIC_RECORDS (PUBLIC: each party's
# published bound on its record count, party.toml public_records, so that `dpfed job submit --noise distributed`
# needs no --records; unset: none declared), DPFED_SEED (TESTS ONLY: reproducible noise).
# Volumes: dpfed-coordinator-state and dpfed-PARTY-ledger are the durable ones (the ledger IS the party's
# budget); dpfed-*-certs and dpfed-PARTY-data are filled from DIR; podman 4.3 keeps each ConfigMap in a
# volume named after it (dpfed-coordinator, dpfed-PARTY), filled once: `down` removes those so that an
# edited config is used at the next `up`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
port=${DPFED_PORT:-50051}
net=${DPFED_NETWORK:-dpfed}
image=${DPFED_IMAGE:-dpfed:0.1.0}
python=${PYTHON:-python3}
render() { "$python" "$here/render.py" "$@"; }

fill() {  # VOLUME DIR: a named volume holding DIR's files, owned by the image's user (10001), mode 0400
  podman volume create "$1" >/dev/null
  tar -C "$2" -c --owner=10001 --group=10001 --mode=u=rX,go= . | podman volume import "$1" -
}

play() {  # NETWORK YAML VOLUME: the durable volume is created once and kept (podman 4.3's kube play refuses
          # a PersistentVolumeClaim whose volume exists, so the claims are left out of the YAML: --no-claims)
  podman volume exists "$3" || podman volume create "$3" >/dev/null
  podman kube play --network "$1" "$2" >"$2.out" 2>&1 || { grep -v syslog "$2.out" >&2; exit 1; }
}

up() {
  local dir=$1; shift
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  podman network exists "$net" || podman network create "$net" >/dev/null
  fill dpfed-coordinator-certs "$dir/certs/coordinator"
  render coordinator --host-port "$port" --secrets-as-volumes --no-claims | sed "s|image: dpfed:0.1.0|image: $image|" \
    >"$tmp/coordinator.yaml"
  play "$net:alias=dpfed-coordinator" "$tmp/coordinator.yaml" dpfed-coordinator-state
  for p in "$@"; do
    mkdir -p "$tmp/$p/certs" "$tmp/$p/data"
    cp "$dir/certs/$p/ca.crt" "$tmp/$p/certs/ca.crt"
    cp "$dir/certs/$p/$p.crt" "$tmp/$p/certs/party.crt"
    cp "$dir/certs/$p/$p.key" "$tmp/$p/certs/party.key"
    fill "dpfed-$p-certs" "$tmp/$p/certs"
    local data=
    for f in "$p.npz" "$p.csv"; do if [ -z "$data" ] && [ -e "$dir/data/$f" ]; then data=$f; fi; done
    [ -n "$data" ] || { echo "podman-play.sh: no $dir/data/$p.npz or .csv" >&2; exit 1; }
    cp "$dir/data/$data" "$tmp/$p/data/"
    fill "dpfed-$p-data" "$tmp/$p/data"
    render party "$p" --coordinator dpfed-coordinator:50051 --schema "$dir/data/schema.json" \
      --data "/data/$data" --secrets-as-volumes --no-claims ${DPFED_SEED:+--seed "$DPFED_SEED"} \
      ${DPFED_PUBLIC_RECORDS:+--public-records "$DPFED_PUBLIC_RECORDS"} \
      | sed "s|image: dpfed:0.1.0|image: $image|" >"$tmp/$p.yaml"
    play "$net" "$tmp/$p.yaml" "dpfed-$p-ledger"
  done
  echo "coordinator on 127.0.0.1:$port; parties: $*"
}

down() {
  local volumes=0 names=()
  for a in "$@"; do if [ "$a" = --volumes ]; then volumes=1; else names+=("$a"); fi; done
  for pod in dpfed-coordinator-pod-0 "${names[@]/#/dpfed-}"; do
    pod=${pod%-pod-0}-pod-0
    if podman pod exists "$pod"; then podman pod rm -f -t 2 "$pod" >/dev/null || echo "podman-play.sh: could not remove $pod" >&2; fi
  done
  local vols=(dpfed-coordinator dpfed-coordinator-certs)
  for p in "${names[@]}"; do vols+=("dpfed-$p" "dpfed-$p-certs" "dpfed-$p-data"); done
  if [ "$volumes" = 1 ]; then
    vols+=(dpfed-coordinator-state)
    for p in "${names[@]}"; do vols+=("dpfed-$p-ledger"); done
  fi
  for v in "${vols[@]}"; do
    if podman volume exists "$v"; then podman volume rm -f "$v" >/dev/null || echo "podman-play.sh: could not remove $v" >&2; fi
  done
  if podman network exists "$net" && [ -z "$(podman ps -a -q --filter "network=$net")" ]; then
    podman network rm "$net" >/dev/null
  fi
  return 0
}

case ${1:-} in
  up) shift; [ $# -ge 2 ] || { sed -n '2,9p' "$0" >&2; exit 2; }; up "$@" ;;
  down) shift; down "$@" ;;
  *) sed -n '2,19p' "$0" >&2; exit 2 ;;
esac
