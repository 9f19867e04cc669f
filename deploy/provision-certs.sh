#!/usr/bin/env bash
# Create a deployment CA and certificates for the coordinator, an operator and the named parties,
# with the request/sign flow: each key is made in its own site folder ('dpfed certs request') and
# only its signing request goes to the CA ('dpfed certs sign').
#   deploy/provision-certs.sh OUT_DIR COORDINATOR_HOST PARTY [PARTY ...]
# The coordinator's certificate carries COORDINATOR_HOST as a subject alternative name (parties
# verify it) and is the only one valid for a server. Each party's certificate names it: the
# coordinator identifies parties by that name. In a real deployment run 'dpfed certs request' at each
# site, send NAME.csr to the CA, run 'dpfed certs sign NAME.csr --ca CA_DIR' there and send back
# NAME.crt and ca.crt: no private key ever leaves its site. Keep ca.key offline.
# Revoke with 'dpfed certs revoke NAME --ca OUT_DIR/ca' and copy OUT_DIR/ca/crl.pem beside every ca.crt.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 OUT_DIR COORDINATOR_HOST PARTY [PARTY ...]" >&2
  exit 2
fi
out=$1; host=$2; shift 2
dpfed certs init "$out/ca"
dpfed certs request coordinator --role coordinator --out "$out/coordinator" --san "$host"
dpfed certs request operator --role operator --out "$out/operator"
for party in "$@"; do
  dpfed certs request "$party" --role party --out "$out/$party"
done
for d in coordinator operator "$@"; do
  dpfed certs sign "$out/$d/$d.csr" --ca "$out/ca"
  rm -f "$out/$d/$d.csr"
done
echo "certificates in $out (keep $out/ca/ca.key offline)"
