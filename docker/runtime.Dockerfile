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
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY cjob_spec/ cjob_spec/
COPY job_runtime/ job_runtime/
COPY cjob/ cjob/
COPY operator/ operator/
RUN /opt/venv/bin/pip install --constraint constraints.txt ".[runtime]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="checkpointed-jobs runtime" \
      org.opencontainers.image.description="PySpark with barrier snapshots: driver and executor image of CheckpointedJobs" \
      org.opencontainers.image.licenses="Apache-2.0"
# Java 17 for Spark 4, tini as PID 1 (forwards signals, reaps Spark's Python workers),
# procps because Spark's scripts call ps. The JDK's packaging links its man pages, a
# folder the slim image drops.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java
# uid 185 is the Spark images' convention; executors need a home and writable dirs.
RUN groupadd --system --gid 185 spark \
    && useradd --system --uid 185 --gid spark --home-dir /home/spark --create-home \
       --shell /usr/sbin/nologin spark \
    && mkdir -p /opt/spark/conf /opt/spark/work-dir /opt/cjob \
    && chown -R spark:spark /opt/spark/work-dir
COPY --from=build /opt/venv /opt/venv
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
