"""Pure pieces of the control plane harness, checked without a cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from e2e.controlplane.binaries import (
    MissingBinariesError,
    default_bin_dir,
    ensure_binaries,
    read_versions,
)
from e2e.controlplane.container_launch import expand_references
from e2e.controlplane.container_run import exit_code_of
from e2e.controlplane.kubelet_api import tail_lines
from e2e.controlplane.pytest_plugin import namespace_name_for
from e2e.controlplane.waiting import plural_of


class TestEnvironmentExpansion:
    def test_defined_variables_are_expanded(self) -> None:
        assert expand_references("--out=$(DIR)/x", {"DIR": "/data"}) == "--out=/data/x"

    def test_unknown_variables_stay_literal(self) -> None:
        assert expand_references("$(MISSING)-$(DIR)", {"DIR": "d"}) == "$(MISSING)-d"

    def test_a_double_dollar_escapes_a_reference(self) -> None:
        assert expand_references("$$(DIR)", {"DIR": "d"}) == "$(DIR)"


class TestExitCodes:
    def test_a_signal_maps_to_128_plus_its_number(self) -> None:
        assert exit_code_of(-9) == (137, 9)
        assert exit_code_of(-15) == (143, 15)

    def test_a_plain_exit_code_has_no_signal(self) -> None:
        assert exit_code_of(3) == (3, None)


class TestLogTails:
    def test_the_last_lines_are_kept_with_their_newlines(self) -> None:
        assert tail_lines(b"a\nb\nc\n", 2) == b"b\nc\n"

    def test_zero_lines_is_empty_and_more_lines_than_exist_is_everything(self) -> None:
        assert tail_lines(b"a\nb\n", 0) == b""
        assert tail_lines(b"a\nb", 10) == b"a\nb"


class TestNames:
    @pytest.mark.parametrize(
        ("kind", "plural"),
        [("Pod", "pods"), ("NetworkPolicy", "networkpolicies"), ("Ingress", "ingresses")],
    )
    def test_kinds_become_resource_names(self, kind: str, plural: str) -> None:
        assert plural_of(kind) == plural

    def test_namespace_names_are_valid_and_unique_for_long_parametrized_tests(self) -> None:
        name = "test_something_with_a_very_long_name_indeed[param-ÄÖ/x-" + "y" * 80 + "]"
        first, second = namespace_name_for(name), namespace_name_for(name)
        for ns in (first, second):
            assert len(ns) <= 63
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", ns)
        assert first != second


class TestBinaries:
    def test_the_bin_dir_names_every_pinned_version(self) -> None:
        versions = read_versions()
        name = default_bin_dir(versions=versions).name
        for version in (versions.kubernetes, versions.etcd, versions.helm, versions.kwok):
            assert version in name

    def test_a_missing_binary_is_reported_with_how_to_build_it(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("CJOB_BIN_DIR", str(tmp_path))

        with pytest.raises(MissingBinariesError) as missing:
            ensure_binaries(names=("etcd",))

        assert missing.value.missing == ["etcd"]
        assert "build.sh" in str(missing.value)
