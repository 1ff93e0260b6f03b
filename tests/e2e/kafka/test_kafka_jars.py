"""The Kafka jars are fetched by Maven once: a complete cache is used without Maven, an
interrupted fetch is done again, and a first fetch without Maven names the package.

Maven is replaced by a stand-in script on ``PATH`` that records its calls, so these
tests say whether Maven ran without waiting for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.kafka.jars import MARKER, MissingToolError, ensure_jars, is_complete, jar_dir

FAKE_MVN = """#!/bin/sh
echo "$@" >> "{calls}"
for arg in "$@"; do
  case "$arg" in
    -DoutputDirectory=*) dir="${{arg#-DoutputDirectory=}}"; mkdir -p "$dir";
                         echo jar > "$dir/fetched-1.0.jar";;
  esac
done
"""


def _fake_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a recording ``mvn`` first on PATH; returns the file its calls are written to."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    calls = tmp_path / "mvn-calls"
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN.format(calls=calls))
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return calls


def test_a_complete_jar_cache_is_used_without_running_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cached = ensure_jars()  # the real cache, fetched by Maven if this is the first run
    calls = _fake_maven(tmp_path, monkeypatch)

    assert ensure_jars() == cached
    assert is_complete(cached)
    assert any(cached.glob("kafka_2.13-*.jar"))
    assert not calls.exists()


def test_an_interrupted_fetch_is_fetched_again_and_then_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CJOB_CACHE_DIR", str(tmp_path / "cache"))
    interrupted = jar_dir()
    interrupted.mkdir(parents=True)
    (interrupted / "half-written.jar").write_text("")  # jars, but no marker
    calls = _fake_maven(tmp_path, monkeypatch)

    fetched = ensure_jars()
    ensure_jars()

    assert fetched == interrupted
    assert (fetched / MARKER).exists()
    assert sorted(p.name for p in fetched.glob("*.jar")) == ["fetched-1.0.jar"]
    assert len(calls.read_text().splitlines()) == 1


def test_a_first_fetch_without_maven_names_the_package_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CJOB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(MissingToolError) as raised:
        ensure_jars()

    assert "`mvn` not found" in str(raised.value)
    assert "Debian package `maven`" in str(raised.value)
    assert "\n" not in str(raised.value)
