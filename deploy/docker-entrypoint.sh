#!/bin/sh
# The image's entrypoint: `amps server` with the arguments given (the image's CMD by default),
# after making the users file at the first start (issue 12). An instance listening beyond
# loopback needs users: with AMPS_ADMIN_PASSWORD set (compose passes deploy/secrets/amps.env)
# and no users file yet at AMPS_USERS_FILE, it adds AMPS_ADMIN_USER (default admin) with read
# and write on every topic and the administrator's rights. The file lives in the data volume,
# so later `amps users add|remove --file` inside the container apply without a restart. The
# password travels on stdin, never as an argument.
set -eu

users_file=${AMPS_USERS_FILE:-/var/lib/amps/users.toml}
if [ -n "${AMPS_ADMIN_PASSWORD:-}" ] && [ ! -e "$users_file" ]; then
    printf '%s' "$AMPS_ADMIN_PASSWORD" | amps users add "${AMPS_ADMIN_USER:-admin}" \
        --file "$users_file" --read '.*' --write '.*' --admin --password-stdin >/dev/null
    echo "amps: made $users_file with user ${AMPS_ADMIN_USER:-admin} (AMPS_ADMIN_PASSWORD)" >&2
fi
unset AMPS_ADMIN_PASSWORD
exec amps server "$@"
