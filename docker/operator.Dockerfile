# syntax=docker/dockerfile:1
# The checkpointed-jobs operator: `python -m cjob_operator` (kopf), nothing else.
# Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t checkpointed-jobs/operator:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
WORKDIR /src
# Metadata first, so the dependency layer is reused while only the code changes.
COPY pyproject.toml README.md constraints.txt ./
COPY cjob_spec/ cjob_spec/
COPY job_runtime/ job_runtime/
COPY cjob/ cjob/
COPY operator/ operator/
# The operator extra only: kopf, the Kubernetes client and prometheus-client, no Spark.
RUN /opt/venv/bin/pip install --constraint constraints.txt ".[operator]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="checkpointed-jobs operator" \
      org.opencontainers.image.description="Kubernetes operator restarting PySpark jobs from their latest checkpoint" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 cjob \
    && useradd --system --uid 10001 --gid cjob --home-dir /home/cjob --create-home \
       --shell /usr/sbin/nologin cjob
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /home/cjob
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "cjob_operator"]
