"""Benchmarks of checkpointed-jobs: throughput, checkpoint overhead, barriers, state size,
recovery and (with a control plane) the operator. See ``bench/README.md``."""
