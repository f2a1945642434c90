# The sluice image: `sluice run` (the scheduler) by default, `sluice controller` with
# `args: [controller]`. Build from the repository root:
#
#   docker build -t sluice:0.1.0 .
#
# Dependencies come only from requirements.lock (exact pins); the project itself is then
# installed without dependencies, so nothing unpinned enters the image.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: a virtualenv with the locked dependencies and the project ----------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/sluice
ENV PATH=/opt/sluice/bin:$PATH

WORKDIR /src
# The lock alone first, so that the dependency layer is reused while only the code changes.
COPY requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock

# The wheel's build (hatchling, in pip's isolated build environment) needs the README and
# the CRDs, which it packages as scheduler/_crds.
COPY pyproject.toml README.md ./
COPY crds ./crds
COPY scheduler ./scheduler
RUN pip install --no-cache-dir --no-deps . \
    && pip check

# ---- final: the virtualenv on a clean slim image, as a non-root user -----------------------
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="A Kubernetes scheduler for batch and AI workloads" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 65532 sluice \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin sluice

COPY --from=builder /opt/sluice /opt/sluice

# The root filesystem is read-only in the manifests: no bytecode is written at run time
# (pip compiled it at install), and HOME points at the /tmp emptyDir.
ENV PATH=/opt/sluice/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp

USER 65532:65532
WORKDIR /tmp

# 10259: /metrics, /healthz, /readyz of the scheduler; 9443: the controller's webhook;
# 8080: the controller's liveness endpoint.
EXPOSE 10259 9443 8080

ENTRYPOINT ["sluice"]
CMD ["run"]
