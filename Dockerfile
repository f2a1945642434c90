# The sluice image: `sluice run` (the scheduler) by default, `sluice controller` with
# `args: [controller]`. Built by image/build (docs/: "Building the image"), which makes the
# wheelhouse and both base images from Debian's packages and needs no image registry:
#
#   image/build                          # -> localhost/sluice:VERSION
#
# By hand, with a wheelhouse in .wheelhouse/ (image/build --wheelhouse-only) and any two
# images with the same Python 3.11 (the virtualenv's interpreter is the base's):
#
#   docker build --build-arg BUILD_IMAGE=python:3.11-slim \
#     --build-arg RUNTIME_IMAGE=python:3.11-slim -t sluice:0.1.0 .
#
# Nothing is fetched while building: the dependencies are the wheels of requirements.lock
# (exact pins) and the build backend those of image/build-requirements.lock, installed
# with no index; the project is then installed without dependencies, so nothing unpinned
# enters the image.

ARG BUILD_IMAGE=python:3.11-slim
ARG RUNTIME_IMAGE=python:3.11-slim

# ---- builder: a virtualenv with the locked dependencies and the project ---------------------
FROM ${BUILD_IMAGE} AS builder
ARG WHEELHOUSE=.wheelhouse

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/wheels \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore

# python3.11 by name: the virtualenv's interpreter links to it, and the runtime base has
# that name (and may have no other).
RUN python3.11 -m venv /opt/sluice
WORKDIR /src
COPY ${WHEELHOUSE} /wheels
# The lock alone first, so that the dependency layer is reused while only the code changes.
COPY requirements.lock ./
RUN /opt/sluice/bin/pip install --quiet --requirement requirements.lock

# The wheel's build (hatchling, from the wheelhouse in pip's isolated build environment)
# needs the README, the CRDs and the manifests, which it packages as scheduler/_crds and
# scheduler/_manifests (`sluice doctor` checks a cluster against them).
COPY pyproject.toml README.md ./
COPY crds ./crds
COPY manifests ./manifests
COPY scheduler ./scheduler
# pip compiles every module it installs (the root filesystem is read-only at run time),
# then leaves: no installer in the final image. The dependencies' own test suites and type
# stubs (about 24 MB) are never imported: gone too.
RUN /opt/sluice/bin/pip install --quiet --no-deps . \
    && /opt/sluice/bin/pip check \
    && /opt/sluice/bin/pip uninstall --quiet --yes pip setuptools \
    && rm -f /opt/sluice/bin/activate* /opt/sluice/bin/Activate.ps1 \
    && find /opt/sluice/lib -depth -type d -name tests -path '*/site-packages/*/*' \
         -not -path '*/site-packages/scheduler/*' -exec rm -rf {} + \
    && find /opt/sluice/lib -name '*.pyi' -delete

# ---- final: the virtualenv on the runtime base, as a non-root user --------------------------
FROM ${RUNTIME_IMAGE}

LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="A Kubernetes scheduler for batch and AI workloads" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=builder /opt/sluice /opt/sluice

# The root filesystem is read-only in the manifests: no bytecode is written at run time
# (it was compiled at install), and HOME points at the /tmp emptyDir.
ENV PATH=/opt/sluice/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp

USER 65532:65532
WORKDIR /tmp

# 10259: the scheduler's guarded port (/metrics, /ui; /healthz, /readyz, /livez open);
# 9443: the controller's webhook; 8080: the controller's liveness endpoint.
EXPOSE 10259 9443 8080

ENTRYPOINT ["/opt/sluice/bin/sluice"]
CMD ["run"]
