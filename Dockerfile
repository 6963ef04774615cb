# The amps broker image: `docker build -t amps .`
#
# BASE_IMAGE needs python3 (>= 3.11) with venv. Offline sites and machines whose builds cannot
# verify the package index put wheels in ./wheelhouse first (`pip wheel . -w wheelhouse`); the
# build then installs from there alone (--no-index). Without a wheelhouse it installs from the index.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
# Lets a test run remove this stage's leftover image (docker image prune --filter label=...).
LABEL org.amps.stage=build
WORKDIR /src
# The wheelhouse* glob may match nothing: pyproject.toml always matches, so COPY never fails.
COPY pyproject.toml README.md wheelhouse* /src/wheels/
COPY pyproject.toml README.md /src/
COPY amps /src/amps
COPY replication /src/replication
RUN python3 -m venv /opt/amps \
 && if ls /src/wheels/*.whl >/dev/null 2>&1; then \
        /opt/amps/bin/pip install --no-cache-dir --no-index --find-links /src/wheels amps; \
    else \
        /opt/amps/bin/pip install --no-cache-dir /src; \
    fi \
 && /opt/amps/bin/amps server --print-default-config >/dev/null
# pip and setuptools are not needed to run; the bytecode is compiled once here, not at each start.
RUN /opt/amps/bin/pip uninstall --yes --quiet pip setuptools wheel \
 && /opt/amps/bin/python3 -m compileall -q /opt/amps/lib

FROM ${BASE_IMAGE}
# A fixed uid, so a volume's owner is the same whichever image version mounts it.
RUN (getent group amps || groupadd --system --gid 10001 amps) \
 && (getent passwd amps || useradd --system --uid 10001 --gid amps --home-dir /var/lib/amps \
        --shell /usr/sbin/nologin amps) \
 && mkdir -p /var/lib/amps /etc/amps \
 && chown amps:amps /var/lib/amps
COPY --from=build /opt/amps /opt/amps
COPY deploy/image-config.xml /etc/amps/config.xml
COPY deploy/docker-entrypoint.sh /usr/local/bin/amps-entrypoint
ENV PATH=/opt/amps/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    AMPS_BIND=0.0.0.0 \
    AMPS_DATA_DIR=/var/lib/amps
USER amps
WORKDIR /var/lib/amps
VOLUME ["/var/lib/amps"]
EXPOSE 9007 8085
# The admin HTTP port answers once the instance is ready (journal recovered, ports listening);
# /health needs no credentials (statistics do when authentication is on).
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python3", "-c", "import os,sys,urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('AMPS_ADMIN_PORT', '8085') + '/health', timeout=2).status == 200 else 1)"]
# The server is PID 1 (the entrypoint execs it) and handles SIGTERM itself (a clean stop:
# checkpoint, fsync, exit 0). The entrypoint makes the users file at the first start.
STOPSIGNAL SIGTERM
ENTRYPOINT ["amps-entrypoint"]
CMD ["--config", "/etc/amps/config.xml"]
