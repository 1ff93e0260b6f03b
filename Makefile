# checkpointed-jobs: everything a newcomer or CI runs goes through these targets.
# The virtualenv lives in .venv; slow-to-build tools are cached under ~/.cache.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
CRDS := checkpointedjob.yaml checkpointedjobsnapshot.yaml
CHART_CRDS := charts/checkpointed-jobs/crds

.PHONY: help host-packages install crds chart-crds chart-readme run lint test test-unit test-spark test-cluster \
	test-kafka test-postgres test-e2e test-chaos tests-without-builds server-tests-spark \
	cluster-tests-process-node cluster-tests-real-node cluster-tests-nodes \
	server-tests-services builds kafka-jars lake-reader controlplane images cluster cluster-down e2e-kind bench bench-throughput \
	bench-overhead bench-barriers bench-state-size bench-recovery bench-operator \
	bench-recovery-operator bench-kafka bench-windows bench-timers bench-joins bench-realistic clean

help:
	@echo "make run      install, then run the embedded demo with a driver kill and verify it"
	@echo "make test     host packages, lint, the builds, then every test"
	@echo "make test T=tests/<package>   the tests of one folder or file (no lint, no builds)"
	@echo "make test-unit / test-spark / test-cluster / test-kafka / test-postgres / test-e2e   one tier"
	@echo "make test-chaos   ten minutes of random kills on the real node, then a lost node on kind (not in make test)"
	@echo "make cluster  a local cluster: control plane, real node, images, S3, the chart"
	@echo "make e2e-kind the real node's scenarios on a kind cluster (Docker, or a private dockerd)"
	@echo "make lint     ruff, mypy (strict) and import-linter"
	@echo "make crds     write our CRDs into crds/ from cjob_spec/schema, then copy crds/ into the chart"
	@echo "make chart-crds  copy crds/*.yaml into the chart"
	@echo "make chart-readme  write the chart README's table of values from values.yaml"
	@echo "make bench    every benchmark (see bench/README.md)"

# Host packages are checked first, before anything long: as root the missing ones are
# installed, otherwise they are named in one line (scripts/host-packages.sh).
host-packages:
	@bash scripts/host-packages.sh

# pip's output goes to .venv/install.log and is shown only when the install fails: the
# build backend's notes on a successful editable install are noise to a newcomer.
$(STAMP): pyproject.toml constraints.txt
	@bash scripts/host-packages.sh run
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing the project and its Python packages into $(VENV) (a few minutes the first time)"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]' >$(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	@rm -rf .cjob/output/running-sum
	$(BIN)/cjob run examples/running_sum/running-sum.yaml --fresh --kill-driver-after 8
	$(BIN)/python examples/running_sum/verify.py --output .cjob/output/running-sum --count 200000

# Our CRDs are generated from their schemas (cjob_spec/schema, the job's defaults and
# bounds from cjob_spec/defaults.py): edit those, run this and commit the files it
# writes. A unit test fails while a committed CRD differs from its schema.
crds: $(STAMP)
	$(BIN)/python -m cjob_spec.schema crds
	@$(MAKE) --no-print-directory chart-crds

# Helm installs the CRDs of the chart's own crds/ folder, so the chart carries a copy
# of each CRD; this refreshes them from crds/ (and leaves an identical copy
# untouched). Lint, the tests and the cluster run it first; commit the copies it
# updates.
chart-crds:
	@for crd in $(CRDS); do \
		cmp -s crds/$$crd $(CHART_CRDS)/$$crd || { cp crds/$$crd $(CHART_CRDS)/$$crd \
			&& echo "updated $(CHART_CRDS)/$$crd from crds/$$crd"; }; \
	done

# The chart README's table of values is written from the comments of values.yaml; a
# unit test fails while it is stale.
chart-readme: $(STAMP)
	$(BIN)/python scripts/chart_values.py

lint: $(STAMP) chart-crds
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

controlplane:
	bash e2e/controlplane/build.sh

kafka-jars: $(STAMP)
	$(BIN)/python -m e2e.kafka jars

# The Spark that reads our Delta and Iceberg tables back in the Spark tier: PySpark of
# the release the connectors are built for, in a virtualenv of its own, and the
# connectors' jars, both cached (e2e/lakereader/reader_env.py says why).
lake-reader: $(STAMP)
	$(BIN)/python -m e2e.lakereader install

# The Go binaries (CPU-bound) start at once; the virtualenv's install, the images
# (mostly debootstrap's downloads) and the Kafka jars happen beside them.
builds: chart-crds
	@$(MAKE) --no-print-directory -j4 controlplane images kafka-jars

# The runtime and operator images (docker/*.Dockerfile on a Debian base), cached by a
# hash of their inputs; the real-node scenarios import them into the node.
images: $(STAMP)
	$(BIN)/python -m e2e.images build

# The Go build is the long, CPU-bound part of a first `make test` (about 20 minutes):
# the tests that need none of its binaries or images (unit, spark, kafka, postgres, soak) run
# beside it, after lint; the cluster and end-to-end tests run once it is done. The unit
# tests take four workers (see test-unit); the tiers that start servers then run in two
# streams side by side, each one test at a time (they wait on processes, sockets and
# pauses more than they compute): the runtime's Spark tests; and the broker's, the
# database's and the soak, then the benchmarks' Spark smoke runs and the joins' Spark tests
# (about the same time).
tests-without-builds: lint kafka-jars
	$(BIN)/python -m pytest -m unit -n 4 $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory -j2 --output-sync=line server-tests-spark server-tests-services

# Spark tests that run in the second stream, after the broker's and the database's, to
# keep the two streams about as long as each other.
SPARK_BESIDE_SERVICES := tests/bench tests/job_runtime/spark/test_joins_spark.py

server-tests-spark: lake-reader
	$(BIN)/python -m pytest -m "spark and not cluster and not e2e" \
		$(addprefix --ignore=,$(SPARK_BESIDE_SERVICES)) $(PYTEST_ARGS)

server-tests-services:
	$(BIN)/python -m pytest -m "not unit and not spark and not cluster and not e2e" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m spark $(SPARK_BESIDE_SERVICES) $(PYTEST_ARGS)

cluster: host-packages chart-crds builds
	$(BIN)/python -m e2e.realnode up

cluster-down: $(STAMP)
	$(BIN)/python -m e2e.realnode down

# The real node's scenarios on a one-node kind cluster (tests/e2e/kind/): a Docker
# engine that answers is used, otherwise (as root) the project's private dockerd from
# Debian's docker.io; the node image is built here (e2e/kind/README.md).
e2e-kind: host-packages chart-crds builds
	$(BIN)/python -m pytest -m "kind and not chaos" $(PYTEST_ARGS)

# The tier of a test is the folder it lives in (tests/<package>/<tier>/, see the root
# conftest.py); each slice below selects one tier by its derived marker.
ifdef T
test: $(STAMP) chart-crds
	$(BIN)/python -m pytest $(T) $(PYTEST_ARGS)
else
test: host-packages chart-crds
	@$(MAKE) --no-print-directory -j6 controlplane images kafka-jars lake-reader tests-without-builds
	@$(MAKE) --no-print-directory -j2 --output-sync=line cluster-tests-process-node \
		cluster-tests-nodes
endif

# After the builds, the control plane's tier (pods as processes on the process node)
# runs beside the real node's scenarios and then the kind tier's: each starts its own
# control plane, and both streams spend most of their time waiting on pods and paced
# sources, not computing. The kind tier follows the real node's in one stream, never
# beside it: its node shares the host's network with the real node's (the host lease
# refuses a second holder).
cluster-tests-process-node:
	$(BIN)/python -m pytest -m "cluster and not e2e and not chaos" $(PYTEST_ARGS)

cluster-tests-nodes: cluster-tests-real-node
	$(BIN)/python -m pytest -m "kind and not chaos" $(PYTEST_ARGS)

cluster-tests-real-node:
	$(BIN)/python -m pytest -m "e2e and not chaos and not kind" $(PYTEST_ARGS)

# The unit tests wait on child processes, sockets and timeouts more than they compute:
# four workers (pytest-xdist) finish them in about half the time even on two cores.
test-unit: $(STAMP) chart-crds
	$(BIN)/python -m pytest -m unit -n 4 $(PYTEST_ARGS)

test-spark: $(STAMP) chart-crds
	$(BIN)/python -m pytest -m spark $(PYTEST_ARGS)

test-cluster: host-packages $(STAMP) chart-crds controlplane
	$(BIN)/python -m pytest -m "cluster and not e2e and not chaos" $(PYTEST_ARGS)

test-kafka: host-packages kafka-jars
	$(BIN)/python -m pytest -m kafka $(PYTEST_ARGS)

test-postgres: host-packages $(STAMP)
	$(BIN)/python -m pytest -m postgres $(PYTEST_ARGS)

test-e2e: host-packages builds
	$(BIN)/python -m pytest -m "e2e and not chaos and not kind" $(PYTEST_ARGS)

# The chaos run (tests/e2e/realnode/chaos/) kills pods at random for ten minutes,
# then kind with a worker node (tests/e2e/kind/chaos/) loses the node a job runs on:
# longer than the budget of `make test` allows, so they run only here, one after the
# other (both take the host lease). CJOB_CHAOS_SECONDS shortens the first,
# CJOB_CHAOS_SEED repeats its draws.
test-chaos: host-packages chart-crds builds
	$(BIN)/python -m pytest -m "chaos and not kind" -s $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m "chaos and kind" -s $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench all

bench-throughput bench-overhead bench-barriers bench-state-size bench-recovery bench-operator \
	bench-recovery-operator bench-kafka bench-windows bench-timers bench-joins bench-realistic: $(STAMP)
	$(BIN)/python -m bench $(patsubst bench-%,%,$@)

clean:
	rm -rf .cjob .pytest_cache .mypy_cache .ruff_cache bench/work
