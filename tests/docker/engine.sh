#!/usr/bin/env bash
# Prepares, idempotently, what the tests marked `docker` need, and says what it did:
#   up    install docker.io, docker-compose, debootstrap (root only, when missing); start a dockerd
#         of our own (socket, data and exec roots under $AMPS_DOCKER_ROOT) unless one answers;
#         make the base image amps-test-base:bookworm (debootstrap + docker import, since no image
#         registry may be reachable) and the Prometheus image amps-test-prometheus from Debian's
#         package; write $AMPS_DOCKER_ROOT/env with the DOCKER_HOST to use.
#   down  stop the dockerd that `up` started (images stay in the data root for the next run).
# Where no engine can be had (no root, say), `up` says why and exits 0: the tests then skip with
# that reason.
set -euo pipefail

ROOT=${AMPS_DOCKER_ROOT:-/tmp/amps-docker}
SOCK=$ROOT/docker.sock
BASE_IMAGE=amps-test-base:bookworm
PROMETHEUS_IMAGE=amps-test-prometheus:latest
export DOCKER_HOST=unix://$SOCK

say() { echo "engine.sh: $*"; }

answers() { timeout 10 docker version >/dev/null 2>&1; }

install_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ]; then
        say "cannot install ${missing[*]} without root: the docker tests will skip"
        exit 0
    fi
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

start_engine() {
    if answers; then
        say "a Docker engine already answers on $DOCKER_HOST"
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        say "no Docker engine answers and starting one needs root: the docker tests will skip"
        exit 0
    fi
    mkdir -p "$ROOT/data" "$ROOT/exec"
    rm -f "$SOCK"
    say "starting dockerd (data root $ROOT/data, log $ROOT/dockerd.log)"
    # setsid: the engine outlives this script and the shell that ran it; `down` stops it.
    setsid dockerd -H "$DOCKER_HOST" --data-root "$ROOT/data" --exec-root "$ROOT/exec" \
        --pidfile "$ROOT/docker.pid" --exec-opt native.cgroupdriver=cgroupfs \
        >"$ROOT/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do
        answers && return 0
        sleep 1
    done
    say "dockerd did not answer within 60 s; last lines of its log:"
    tail -n 20 "$ROOT/dockerd.log" || true
    exit 0
}

debian_mirror() {
    # The machine's own apt source, so the image comes from where this machine's packages do.
    local uri
    uri=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
        | grep -v security | head -n 1 | awk '{ if ($1 == "deb") print $2; else print $2 }')
    echo "${uri:-http://deb.debian.org/debian}"
}

make_base_image() {
    if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        say "$BASE_IMAGE is there"
        return 0
    fi
    local rootfs=$ROOT/rootfs mirror
    mirror=$(debian_mirror)
    rm -rf "$rootfs"
    say "debootstrap bookworm from $mirror (python3, venv, ca-certificates) into $rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" "$mirror" >"$ROOT/debootstrap.log" 2>&1 \
        || { say "debootstrap failed:"; tail -n 20 "$ROOT/debootstrap.log"; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import - "$BASE_IMAGE" >/dev/null
    rm -rf "$rootfs"
    say "imported $BASE_IMAGE"
}

make_prometheus_image() {
    if docker image inspect "$PROMETHEUS_IMAGE" >/dev/null 2>&1; then
        say "$PROMETHEUS_IMAGE is there"
        return 0
    fi
    say "building $PROMETHEUS_IMAGE from Debian's prometheus package"
    local dockerfile
    dockerfile=$(cat <<DOCKERFILE
FROM $BASE_IMAGE
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /prometheus && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
DOCKERFILE
)
    echo "$dockerfile" | docker build -t "$PROMETHEUS_IMAGE" - >"$ROOT/prometheus-build.log" 2>&1 || {
        say "building $PROMETHEUS_IMAGE failed:"
        tail -n 20 "$ROOT/prometheus-build.log"
        exit 1
    }
    say "built $PROMETHEUS_IMAGE"
}

up() {
    mkdir -p "$ROOT"
    install_packages
    start_engine
    make_base_image
    make_prometheus_image
    {
        echo "DOCKER_HOST=$DOCKER_HOST"
        echo "AMPS_BASE_IMAGE=$BASE_IMAGE"
        echo "PROMETHEUS_IMAGE=$PROMETHEUS_IMAGE"
    } >"$ROOT/env"
    say "ready: $(cat "$ROOT/env" | tr '\n' ' ')"
}

down() {
    local pid
    pid=$(cat "$ROOT/docker.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        say "stopping dockerd $pid"
        kill "$pid"
        for _ in $(seq 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
    else
        say "no dockerd of ours is running"
    fi
    rm -f "$ROOT/env"
}

case "${1:-up}" in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
