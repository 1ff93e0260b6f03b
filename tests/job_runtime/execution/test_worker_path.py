"""The worker daemon imports the installed PySpark rather than Spark's zip of it, and
only when the zip is the installed package's own."""

from __future__ import annotations

from importlib.machinery import ModuleSpec
from pathlib import Path

from job_runtime.execution.subtask.worker_path import installed_first


def installed_at(package: Path) -> ModuleSpec:
    spec = ModuleSpec("pyspark", loader=None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    return spec


def test_the_zips_inside_the_installed_package_go_behind_it(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    zips = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    path = [*zips, "/work/job", str(site)]
    seen: list[list[str]] = []

    def find(name: str, where: list[str]) -> ModuleSpec:
        seen.append(where)
        return installed_at(site / "pyspark")

    assert installed_first(path, find=find) == ["/work/job", str(site), *zips]
    assert seen == [["/work/job", str(site)]], "the package is looked for without the zips"


def test_a_distributions_zip_with_no_installed_pyspark_stays_first(tmp_path: Path) -> None:
    path = ["/opt/spark/python/lib/pyspark.zip", "/opt/spark/python/lib/py4j-src.zip", "/x"]
    assert installed_first(path, find=lambda name, where: None) == path


def test_another_pyspark_installed_beside_a_distribution_is_not_taken(tmp_path: Path) -> None:
    path = ["/opt/spark/python/lib/pyspark.zip", str(tmp_path)]
    other = installed_at(tmp_path / "pyspark")
    assert installed_first(path, find=lambda name, where: other) == path


def test_a_path_without_sparks_zips_is_left_alone() -> None:
    path = ["/a", "/b/other.zip"]
    assert installed_first(path, find=lambda name, where: None) == path
