#!/usr/bin/env bash
# Make a local certificate authority and one certificate per instance (or client) name, for TLS
# on the client and admin ports and mutual TLS between instances (issue 12).
#
#   deploy/make-certs.sh DIR NAME...     e.g. deploy/make-certs.sh deploy/certs amps-1 amps-2 amps-3
#
# Writes DIR/ca.pem and DIR/ca.key (the CA; made once, kept if present), and for each NAME
# DIR/NAME.pem and DIR/NAME.key: CN=NAME, subject alternative names DNS:NAME, DNS:localhost and
# IP:127.0.0.1, usable as server and client certificate, valid 825 days. Keys are EC P-256 and
# readable by their owner only. Needs only the `openssl` command. Keep ca.key off the instances:
# whoever holds it can mint a certificate for any instance name.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 DIR NAME..." >&2
    exit 2
fi
dir=$1
shift
mkdir -p "$dir"
umask 077
days=825

if [[ ! -f "$dir/ca.pem" ]]; then
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/ca.key" -out "$dir/ca.pem" -days "$days" -subj "/CN=amps local CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

for name in "$@"; do
    if [[ ! "$name" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
        echo "$0: $name: expected a name of letters, digits, '.', '_' and '-'" >&2
        exit 2
    fi
    extensions=$(mktemp)
    trap 'rm -f "$extensions"' EXIT
    cat >"$extensions" <<CONF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:$name,DNS:localhost,IP:127.0.0.1
CONF
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -out "$dir/$name.pem" -days "$days" -extfile "$extensions" 2>/dev/null
    rm -f "$dir/$name.csr" "$extensions"
    echo "$dir/$name.pem $dir/$name.key"
done
chmod 644 "$dir/ca.pem" "$dir"/*.pem
