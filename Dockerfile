# flower: the run image (`sandbox`) and the service image (`service`).
#
# Nothing is fetched from a package index: the wheels come from a wheelhouse made on the host first
#   python -m sandbox.image            # base (if local) + wheelhouse + `docker build --target sandbox`
# or by hand:
#   pip wheel -w build/wheelhouse '.[service]'
#   docker build --target sandbox -t flower/sandbox .
#   docker build --target service -t flower/service .
# BASE is any Debian-like image with python3 (3.11) and python3-venv; the default is the official one.
# Where nothing can be pulled, `python -m sandbox.image` makes a local base with debootstrap
# (flower/base:bookworm) and passes --build-arg BASE=flower/base:bookworm.
ARG BASE=python:3.11-slim-bookworm
ARG VERSION=0

FROM ${BASE} AS base
LABEL org.flower.build="1"
ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# git for the run's worktree (the official image lacks it); a run's folder belongs to the run's uid
# while the repository's git folder does not, so git must not call that "dubious ownership".
RUN set -eux; \
    if ! command -v git >/dev/null 2>&1; then \
        apt-get update; apt-get install -y --no-install-recommends git ca-certificates; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    printf '[safe]\n\tdirectory = *\n' >> /etc/gitconfig; \
    getent group 10001 >/dev/null || echo 'flower:x:10001:' >> /etc/group; \
    getent passwd 10001 >/dev/null || echo 'flower:x:10001:10001:flower run:/home/flower:/bin/sh' >> /etc/passwd; \
    mkdir -p /home/flower /run/flower; chown 10001:10001 /home/flower

# -- the virtualenvs, from the wheelhouse only --------------------------------------------------------
FROM base AS venv-sandbox
ARG WHEELHOUSE=build/wheelhouse
COPY ${WHEELHOUSE}/ /wheelhouse/
COPY plugin/ /plugin/
# The plugin is not a Python package: it goes where flower looks for it (flower.core.agent.PLUGIN_DIR).
RUN set -eux; \
    python3 -m venv /opt/flower; \
    /opt/flower/bin/pip install --no-index --find-links /wheelhouse flower-agents; \
    cp -r /plugin "$(/opt/flower/bin/python -c 'from flower.core.agent import PLUGIN_DIR; print(PLUGIN_DIR)')"

FROM venv-sandbox AS venv-service
RUN /opt/flower/bin/pip install --no-index --find-links /wheelhouse 'flower-agents[service]'

# -- sandbox: what one run executes in ----------------------------------------------------------------
FROM base AS sandbox
ARG VERSION
LABEL org.opencontainers.image.title="flower sandbox" \
      org.opencontainers.image.description="What one flower run executes in: the runner, the Claude Code CLI, git" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="flower"
COPY --from=venv-sandbox /opt/flower /opt/flower
ENV PATH=/opt/flower/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/home/flower
USER 10001:10001
WORKDIR /home/flower
ENTRYPOINT ["python", "-m", "sandbox.entrypoint"]
# the interpreter and the runner are there (-I: nothing the run wrote in its folder is imported)
HEALTHCHECK --interval=60s --timeout=10s --start-period=10s --retries=3 \
    CMD ["python", "-I", "-c", "import sandbox.entrypoint"]

# -- service: the REST service ----------------------------------------------------------------------------
FROM base AS service
ARG VERSION
LABEL org.opencontainers.image.title="flower service" \
      org.opencontainers.image.description="The flower REST service: runs each tenant's ask in its own sandbox" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="flower"
COPY --from=venv-service /opt/flower /opt/flower
ENV PATH=/opt/flower/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/home/flower
USER 10001:10001
WORKDIR /home/flower
EXPOSE 8080
CMD ["python", "-m", "service"]
# GET /healthz of the service its config names (a fixed port: with port = 0 there is nothing to ask)
HEALTHCHECK --interval=15s --timeout=6s --start-period=30s --retries=3 \
    CMD ["python", "-I", "-m", "service.healthcheck"]
