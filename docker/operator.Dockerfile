# syntax=docker/dockerfile:1
# The checkpointed-jobs operator: `python -m cjob_operator` (kopf), nothing else.
# Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t checkpointed-jobs/operator:0.1.0 .
# The base is Debian bookworm (Python 3.11) built from Debian packages by
# docker/base/mkrootfs.sh; build it first with `docker/build.sh base --engine docker`
# (see docker/README.md). The tag ends with a hash of docker/base/ (`docker/build.sh
# base-tag` prints the current one), so a changed base never hides behind an old tag.
ARG BASE_IMAGE=checkpointed-jobs/base:bookworm-py3.11-11f4c0daede2

# The Python dependencies first (the big layer), the project's code last: a code
# change rebuilds only the small layers at the end.
FROM ${BASE_IMAGE} AS deps
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
# A folder holding a wheel for every requirement, bind-mounted by docker/build.sh so
# that pip installs offline; without it pip downloads from the package index.
ARG WHEELHOUSE=
# The operator extra only: kopf, the Kubernetes client, prometheus-client and boto3
# (deleting a job prunes its s3:// checkpoints), no Spark. From the metadata alone.
COPY pyproject.toml constraints.txt /tmp/deps/
RUN python -m venv /opt/venv \
    && python -c 'import sys, tomllib; p = tomllib.load(open(sys.argv[1], "rb"))["project"]; \
print(*p["dependencies"], *p["optional-dependencies"][sys.argv[2]], sep="\n")' \
       /tmp/deps/pyproject.toml operator >/tmp/deps/requirements.txt \
    && /opt/venv/bin/pip install ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} \
       --constraint /tmp/deps/constraints.txt --requirement /tmp/deps/requirements.txt \
    && rm -rf /tmp/deps

# The project itself, as a wheel (the final stage installs it, not its sources).
FROM deps AS build
# (an ARG is scoped to its stage)
ARG WHEELHOUSE=
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY cjob_spec/ cjob_spec/
COPY cjob_checkpoint/ cjob_checkpoint/
COPY cjob_lifecycle/ cjob_lifecycle/
COPY job_runtime/ job_runtime/
COPY cjob/ cjob/
COPY operator/ operator/
RUN /opt/venv/bin/pip wheel ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} \
    --no-deps --wheel-dir /dist ".[operator]"

FROM deps
LABEL org.opencontainers.image.title="checkpointed-jobs operator" \
      org.opencontainers.image.description="Kubernetes operator restarting PySpark jobs from their latest checkpoint" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 cjob \
    && useradd --system --uid 10001 --gid cjob --home-dir /home/cjob --create-home \
       --shell /usr/sbin/nologin cjob
# pip checks, offline, that every dependency is there, and adds the project.
COPY --from=build /dist/ /tmp/dist/
RUN /opt/venv/bin/pip install --no-index --find-links /tmp/dist "checkpointed-jobs[operator]" \
    && rm -rf /tmp/dist
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /home/cjob
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "cjob_operator"]
