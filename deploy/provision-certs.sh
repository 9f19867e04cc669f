#!/usr/bin/env bash
# Create a deployment CA and certificates for the coordinator, an operator and the named parties.
#   deploy/provision-certs.sh OUT_DIR COORDINATOR_HOST PARTY [PARTY ...]
# The coordinator's certificate carries COORDINATOR_HOST as a subject alternative name (parties
# verify it). Each party's certificate names it: the coordinator identifies parties by that name.
# Ship each site only its own NAME.crt/NAME.key and ca.crt; keep ca.key offline.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 OUT_DIR COORDINATOR_HOST PARTY [PARTY ...]" >&2
  exit 2
fi
out=$1; host=$2; shift 2
dpfed certs init "$out/ca"
dpfed certs issue coordinator --ca "$out/ca" --out "$out/coordinator" --role coordinator --san "$host"
dpfed certs issue operator --ca "$out/ca" --out "$out/operator" --role operator
for party in "$@"; do
  dpfed certs issue "$party" --ca "$out/ca" --out "$out/$party" --role party
done
for d in coordinator operator "$@"; do cp "$out/ca/ca.crt" "$out/$d/ca.crt"; done
echo "certificates in $out (keep $out/ca/ca.key offline)"
