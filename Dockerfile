# Sightscreen daemon container image.
#
#   docker build -t sightscreen .
#   docker run --rm -v /etc/sightscreen:/etc/sightscreen:ro \
#     -e SIGHTSCREEN_APNS__PRIVATE_KEY_FILE=/run/secrets/apns.p8 \
#     -e SIGHTSCREEN_SPORTMONKS__API_TOKEN_FILE=/run/secrets/sportmonks-token sightscreen
#   docker exec <container> sightscreen ctl status
#
# `docker stop` sends SIGTERM: the daemon hands its matches back, releases its locks and exits within
# [instance].shutdown_grace_s (default 8 s), inside docker's default 10 s before SIGKILL (raise both
# together, e.g. `docker run --stop-timeout 40` with shutdown_grace_s = 30).

# --- builder: a virtualenv with the daemon and its dependencies ---------------------------------------
FROM python:3.11-slim-bookworm AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY daemon ./daemon
COPY actors ./actors

# The wheel first, then the venv from it: the runtime image gets no source tree and no build tools.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/sightscreen/venv \
 && /opt/sightscreen/venv/bin/pip install --no-cache-dir /wheels/*.whl

# --- runtime: slim, non-root ---------------------------------------------------------------------------
FROM python:3.11-slim-bookworm

LABEL org.opencontainers.image.title="sightscreen" \
      org.opencontainers.image.description="Sightscreen real-time engine: live cricket to iOS Live Activities and pushes"

# A fixed uid/gid so volume permissions and the admin socket's group are predictable across hosts.
RUN groupadd --system --gid 10001 sightscreen \
 && useradd --system --uid 10001 --gid sightscreen --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin sightscreen \
 && mkdir -p /run/sightscreen /etc/sightscreen \
 && chown sightscreen:sightscreen /run/sightscreen \
 && chmod 0750 /run/sightscreen

COPY --from=builder /opt/sightscreen/venv /opt/sightscreen/venv
COPY config/sightscreen.example.toml /etc/sightscreen/sightscreen.toml

ENV PATH=/opt/sightscreen/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SIGHTSCREEN_ADMIN__SOCKET_PATH=/run/sightscreen/admin.sock \
    SIGHTSCREEN_ADMIN_SOCKET=/run/sightscreen/admin.sock

USER 10001:10001
WORKDIR /run/sightscreen

# Descriptors: an image cannot set its own limit; run it with one (docker run --ulimit nofile=65536:65536,
# ECS "ulimits": [{"name": "nofile", "softLimit": 65536, "hardLimit": 65536}]). The daemon lifts its soft
# limit to the hard one at start-up and caps the API's connections at it less [api].fd_reserve
# (docs/operations.md "Connections and descriptors").
# The daemon itself is PID 1 (exec form, no shell in between), so SIGTERM reaches its handler directly.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["sightscreen", "ctl", "--timeout", "4", "health"]
ENTRYPOINT ["sightscreen", "run"]
CMD ["--config", "/etc/sightscreen/sightscreen.toml"]
