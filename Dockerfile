# One small image for both entry points: `gpuwise operator` and `gpuwise sidecar`.
# No torch: training code brings its own; the instrumentation it needs is copied into the
# pod by the sidecar at start-up (see core/gpuwise/wiring.py).
#
#   docker build -t gpuwise:dev .
#   docker run --rm gpuwise:dev --help

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY core core
COPY operator operator
COPY sidecar sidecar
RUN python -m venv /opt/gpuwise \
 && /opt/gpuwise/bin/pip install . \
 && find /opt/gpuwise -name '__pycache__' -prune -exec rm -rf {} +

FROM python:3.11-slim
LABEL org.opencontainers.image.title="gpuwise" \
      org.opencontainers.image.description="Kubernetes GPU-efficiency operator and telemetry sidecar" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/gpuwise /opt/gpuwise
ENV PATH=/opt/gpuwise/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A numeric non-root user, so Kubernetes can verify runAsNonRoot without an /etc/passwd entry.
USER 65532:65532
ENTRYPOINT ["gpuwise"]
CMD ["--help"]
