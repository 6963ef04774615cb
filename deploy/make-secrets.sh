#!/usr/bin/env bash
# The secrets deploy/docker-compose.yml needs (issue 12): a local CA and one certificate per
# instance for mutual TLS between them, and a random password for the admin user that each
# instance puts in its users file at its first start.
#
#   deploy/make-secrets.sh [DIR]      (default deploy/secrets; compose reads AMPS_SECRETS)
#
# Writes DIR/ca.pem, DIR/amps-N.pem and DIR/amps-N.key (deploy/make-certs.sh), DIR/amps.env
# (AMPS_ADMIN_USER and AMPS_ADMIN_PASSWORD, the env-file of the instances) and
# DIR/admin-password (Prometheus's password file). Kept when present: run it again to add what
# is missing, delete DIR to start over. DIR itself is readable by its owner only; the files
# compose mounts one by one into the containers (certificates, keys, the password file) are
# readable by all inside it, because the containers' user (uid 10001) is not this host's user
# and a mount of one file does not pass through DIR. ca.key never leaves DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/secrets}
mkdir -p "$dir"
chmod 700 "$dir"
missing=()
for name in amps-1 amps-2 amps-3; do
    [[ -s "$dir/$name.pem" && -s "$dir/$name.key" ]] || missing+=("$name")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    "$here/make-certs.sh" "$dir" "${missing[@]}" >/dev/null
fi
chmod 644 "$dir"/amps-[123].key
if [[ ! -s "$dir/amps.env" ]]; then
    password=$(openssl rand -base64 33 | tr -d '/+=\n' | cut -c1-32)
    (
        umask 077
        printf 'AMPS_ADMIN_USER=admin\nAMPS_ADMIN_PASSWORD=%s\n' "$password" >"$dir/amps.env"
        printf '%s' "$password" >"$dir/admin-password"
    )
fi
chmod 600 "$dir/amps.env"
chmod 644 "$dir/admin-password"
echo "$dir: ca.pem, amps-1..3 certificates and keys, amps.env (admin password), admin-password"
