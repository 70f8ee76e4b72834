#!/usr/bin/env bash
# scripts/make_dev_ca.sh OUTDIR [SAN...]
#
# A development cluster CA and one cluster certificate for internal mutual
# TLS (docs/security.md), made with the openssl CLI:
#
#   OUTDIR/ca.pem       the cluster CA certificate (trust anchor of every member)
#   OUTDIR/ca.key       its key (0600); only needed to issue certificates
#   OUTDIR/cluster.pem  the cluster certificate, signed by the CA, usable as
#                       server and client (extendedKeyUsage serverAuth,clientAuth)
#   OUTDIR/cluster.key  its key (0600)
#
# SANs: the addresses peers dial, as IP:1.2.3.4, DNS:name, or bare (an IP
# address or a name, told apart by its form). Default: 127.0.0.1 ::1
# localhost. Idempotent: existing files are kept (delete OUTDIR to re-issue);
# a certificate whose key is missing is an error. Keys are EC P-256; the CA is
# valid 10 years, the certificate 825 days.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: $0 OUTDIR [SAN...]   (default SANs: 127.0.0.1 ::1 localhost)" >&2
  exit 2
fi
out=$1
shift
sans=("$@")
if [[ ${#sans[@]} -eq 0 ]]; then
  sans=(127.0.0.1 ::1 localhost)
fi
san_list=""
for s in "${sans[@]}"; do
  case "$s" in
    IP:* | DNS:*) entry=$s ;;
    *:* | [0-9]*.[0-9]*.[0-9]*.[0-9]*) entry="IP:$s" ;;
    *) entry="DNS:$s" ;;
  esac
  san_list="${san_list:+$san_list,}$entry"
done

mkdir -p "$out"
umask 077
cd "$out"

for pair in "ca.pem ca.key" "cluster.pem cluster.key"; do
  set -- $pair
  if [[ -e $1 && ! -e $2 ]]; then
    echo "$0: $out/$1 exists but its key $out/$2 does not; delete $out to re-issue" >&2
    exit 1
  fi
done

if [[ ! -e ca.pem ]]; then
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout ca.key -out ca.pem -days 3650 -subj "/CN=tandem dev cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  chmod 600 ca.key
  chmod 644 ca.pem
  rm -f cluster.pem cluster.key  # a new CA invalidates the old certificate
fi

if [[ ! -e cluster.pem ]]; then
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout cluster.key -out cluster.csr -subj "/CN=tandem cluster member" 2>/dev/null
  cat > cluster.ext <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san_list
EXT
  openssl x509 -req -in cluster.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out cluster.pem -days 825 -extfile cluster.ext 2>/dev/null
  rm -f cluster.csr cluster.ext ca.srl
  chmod 600 cluster.key
  chmod 644 cluster.pem
fi
echo "$out: ca.pem cluster.pem cluster.key (SANs: $(openssl x509 -in cluster.pem -noout -ext subjectAltName | tail -n +2 | sed 's/^ *//'))"
