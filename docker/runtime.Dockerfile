# syntax=docker/dockerfile:1
# The job runtime: Python 3.11, Java 17, Spark (from the pinned pyspark wheel) and the
# checkpointed-jobs package with its runtime extra. One image for every role:
#   - the driver pod: the operator sets the command `python -m job_runtime run ...`;
#   - Spark's executor pods (spark.kubernetes.container.image): Spark starts them with
#     the single argument `executor` and the SPARK_* environment, which
#     docker/spark-entrypoint.sh turns into the executor JVM;
#   - `spec.image` of a CheckpointedJob: build your job's image FROM this one and copy
#     your modules in (pythonPath), for example under /opt/cjob/jobs.
# Build from the repository root:
#   docker build -f docker/runtime.Dockerfile -t checkpointed-jobs/runtime:0.1.0 .
# The base is Debian bookworm (Python 3.11) built from Debian packages by
# docker/base/mkrootfs.sh; build it first with `docker/build.sh base --engine docker`
# (see docker/README.md). The tag ends with a hash of docker/base/ (`docker/build.sh
# base-tag` prints the current one), so a changed base never hides behind an old tag.
ARG BASE_IMAGE=checkpointed-jobs/base:bookworm-py3.11-11f4c0daede2

# Layers from the least to the most often changed: Debian packages, the Python
# dependencies (the big layer), then the project's code. A code change rebuilds only
# the small layers at the end, and so does not copy Spark around again.
FROM ${BASE_IMAGE} AS deps
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
# Java 17 for Spark 4, tini as PID 1 (forwards signals, reaps Spark's Python workers),
# procps because Spark's scripts call ps. The JDK's packaging links its man pages, a
# folder the slim base drops.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
    && rm -rf /var/lib/apt/lists/* /tmp/hsperfdata_root \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java
# A folder holding a wheel for every requirement, bind-mounted by docker/build.sh so
# that pip installs offline; without it pip downloads from the package index.
ARG WHEELHOUSE=
# The dependencies of the runtime extra, from the metadata alone.
COPY pyproject.toml constraints.txt /tmp/deps/
RUN python -m venv /opt/venv \
    && python -c 'import sys, tomllib; p = tomllib.load(open(sys.argv[1], "rb"))["project"]; \
print(*p["dependencies"], *p["optional-dependencies"][sys.argv[2]], sep="\n")' \
       /tmp/deps/pyproject.toml runtime >/tmp/deps/requirements.txt \
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
    --no-deps --wheel-dir /dist ".[runtime]"

FROM deps
LABEL org.opencontainers.image.title="checkpointed-jobs runtime" \
      org.opencontainers.image.description="PySpark with barrier snapshots: driver and executor image of CheckpointedJobs" \
      org.opencontainers.image.licenses="Apache-2.0"
# uid 185 is the Spark images' convention; executors need a home and writable dirs.
RUN groupadd --system --gid 185 spark \
    && useradd --system --uid 185 --gid spark --home-dir /home/spark --create-home \
       --shell /usr/sbin/nologin spark \
    && mkdir -p /opt/spark/conf /opt/spark/work-dir /opt/cjob \
    && chown -R spark:spark /opt/spark/work-dir
# pip checks, offline, that every dependency is there, and adds the project.
COPY --from=build /dist/ /tmp/dist/
RUN /opt/venv/bin/pip install --no-index --find-links /tmp/dist "checkpointed-jobs[runtime]" \
    && rm -rf /tmp/dist
COPY --chmod=0755 docker/spark-entrypoint.sh /opt/cjob/entrypoint.sh
COPY examples/ /opt/cjob/examples/
ENV JAVA_HOME=/opt/java \
    PATH=/opt/venv/bin:/opt/java/bin:$PATH \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    SPARK_CONF_DIR=/opt/spark/conf \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/spark/work-dir
USER 185:185
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/opt/cjob/entrypoint.sh"]
CMD ["python", "-m", "job_runtime", "--help"]
