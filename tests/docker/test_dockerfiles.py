"""The Dockerfiles and .dockerignore, checked without Docker: what they copy exists and
reaches the build context, what they run exists, and they follow the usual hygiene
rules (a pinned local base made from Debian packages, non-root user, no remote ADD,
lean apt layers). The parser and the ignore rules are the image builder's own
(``e2e.images``), so the checks read the files exactly as the build does."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib

import pytest
import yaml
from paths import REPO

from e2e.images.context import DockerIgnore
from e2e.images.dockerfile import Instruction, arg_defaults, copy_sources, parse_dockerfile
from e2e.images.plan import BASE_TAG_PREFIX, NAMESPACE, PYTHON_VERSION, make_plan

DOCKER = REPO / "docker"
DOCKERFILES = {
    "operator": DOCKER / "operator.Dockerfile",
    "runtime": DOCKER / "runtime.Dockerfile",
}


def build_args(instructions: list[Instruction]) -> dict[str, str]:
    return arg_defaults(instructions)


def is_in_build_context(relative: str) -> bool:
    """Docker's rule: the last .dockerignore pattern matching the path or one of its
    parent folders decides; ``!`` patterns re-include."""
    return DockerIgnore.load(REPO).includes(relative)


@pytest.fixture(params=sorted(DOCKERFILES), ids=lambda name: f"{name}.Dockerfile")
def dockerfile(request: pytest.FixtureRequest) -> tuple[str, list[Instruction]]:
    name: str = request.param
    return name, parse_dockerfile(DOCKERFILES[name])


# --- what the images copy and run ------------------------------------------------------


def test_every_copied_path_exists_in_the_repository(
    dockerfile: tuple[str, list[Instruction]],
) -> None:
    _, instructions = dockerfile
    sources = [s for ins in instructions if ins.keyword == "COPY" for s in copy_sources(ins)]
    assert sources
    missing = [s for s in sources if not (REPO / s).exists()]
    assert missing == [], f"COPY sources missing from the repository: {missing}"


def test_every_copied_path_reaches_the_build_context(
    dockerfile: tuple[str, list[Instruction]],
) -> None:
    _, instructions = dockerfile
    for ins in instructions:
        if ins.keyword != "COPY":
            continue
        for source in copy_sources(ins):
            path = REPO / source
            files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
            files = [p for p in files if "__pycache__" not in p.parts]
            excluded = [
                str(p.relative_to(REPO)) for p in files if not is_in_build_context(
                    str(p.relative_to(REPO)))
            ]  # fmt: skip
            assert excluded == [], f"{source}: excluded by .dockerignore: {excluded[:5]}"


def test_the_build_context_leaves_out_virtualenvs_caches_and_git() -> None:
    for path in (".venv/bin/python", ".git/config", ".cjob/output/x", "e2e/logs/x",
                 "job_runtime/__pycache__/x.pyc", "tests/charts/test_chart_files.py"):  # fmt: skip
        assert not is_in_build_context(path), path


def test_the_operator_image_runs_the_operator_package() -> None:
    instructions = parse_dockerfile(DOCKERFILES["operator"])
    entrypoint = [i for i in instructions if i.keyword == "ENTRYPOINT"][-1]
    assert entrypoint.arguments == '["python", "-m", "cjob_operator"]'
    main = REPO / "operator" / "cjob_operator" / "__main__.py"
    if not main.exists():
        pytest.skip("operator/cjob_operator/__main__.py is not written yet")
    assert main.is_file()


def test_the_runtime_image_entrypoint_and_driver_module_exist() -> None:
    instructions = parse_dockerfile(DOCKERFILES["runtime"])
    entrypoint = [i for i in instructions if i.keyword == "ENTRYPOINT"][-1]
    assert "/opt/cjob/entrypoint.sh" in entrypoint.arguments
    copies = [i.arguments for i in instructions if i.keyword == "COPY"]
    assert any("docker/spark-entrypoint.sh /opt/cjob/entrypoint.sh" in c for c in copies)
    assert (REPO / "job_runtime" / "__main__.py").is_file()


@pytest.mark.parametrize(("image", "extra", "absent"), [
    ("operator", "operator", "runtime"),
    ("runtime", "runtime", "operator"),
])  # fmt: skip
def test_each_image_installs_only_its_own_extra(image: str, extra: str, absent: str) -> None:
    runs = " ".join(
        i.arguments for i in parse_dockerfile(DOCKERFILES[image]) if i.keyword == "RUN"
    )
    assert f'".[{extra}]"' in runs  # the project's wheel
    assert f'"checkpointed-jobs[{extra}]"' in runs  # installed with its extra
    assert f"/tmp/deps/pyproject.toml {extra} >" in runs  # the extra's dependencies
    assert absent not in runs and "[dev]" not in runs
    assert "--constraint /tmp/deps/constraints.txt" in runs


def test_the_operator_image_user_matches_the_charts_pod_security_context() -> None:
    values = yaml.safe_load((REPO / "charts/checkpointed-jobs/values.yaml").read_text())
    users = [i.arguments for i in parse_dockerfile(DOCKERFILES["operator"])
             if i.keyword == "USER"]  # fmt: skip
    uid, _, gid = users[-1].partition(":")
    assert int(uid) == values["podSecurityContext"]["runAsUser"]
    assert int(gid) == values["podSecurityContext"]["runAsGroup"]


# --- hygiene (what hadolint would flag) --------------------------------------------------


def test_every_stage_starts_from_the_pinned_local_base(
    dockerfile: tuple[str, list[Instruction]],
) -> None:
    """No image is pulled from anywhere: every external FROM is the base made from
    Debian packages by docker/base/, under the tag whose hash matches its inputs."""
    _, instructions = dockerfile
    args = build_args(instructions)
    stages: set[str] = set()
    expected = make_plan().base_reference
    for ins in instructions:
        if ins.keyword != "FROM":
            continue
        words = ins.arguments.split()
        image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)],
                       words[0])  # fmt: skip
        if len(words) >= 3 and words[1].upper() == "AS":
            stages.add(words[2])
        if image in stages:
            continue
        assert image == expected, (
            f"line {ins.line}: FROM {image}; docker/base/ now makes {expected} "
            f"(`docker/build.sh base-tag`): set ARG BASE_IMAGE to it in both Dockerfiles"
        )


def test_the_base_tag_names_the_suite_python_and_a_hash_of_its_inputs() -> None:
    reference = make_plan().base_reference
    name, _, tag = reference.partition(":")
    assert name == f"{NAMESPACE}/base"
    assert re.fullmatch(re.escape(BASE_TAG_PREFIX) + r"[0-9a-f]{12}", tag)
    # a local name: its first component is no host (no dot, no port, not localhost)
    first = name.split("/")[0]
    assert "." not in first and ":" not in first and first != "localhost"


def test_the_base_holds_what_both_images_need_from_debian() -> None:
    lines = (DOCKER / "base" / "packages.txt").read_text().splitlines()
    packages = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    assert {"python3", "python3-venv", "python-is-python3", "ca-certificates"} <= packages
    script = (DOCKER / "base" / "mkrootfs.sh").read_text()
    assert "--variant=minbase" in script and "bookworm" in script


def test_the_runtime_packages_come_from_the_debian_archive_only() -> None:
    text = DOCKERFILES["runtime"].read_text()
    installs = re.findall(r"apt-get install[^&]*", text)
    assert installs and all(
        {"openjdk-17-jre-headless", "tini", "procps"} <= set(i.split()) for i in installs
    )
    for forbidden in ("sources.list", "add-apt-repository", "apt-key", "signed-by"):
        assert forbidden not in text.lower(), f"an extra package source: {forbidden}"


@pytest.mark.parametrize("script", ["base/mkrootfs.sh", "build.sh", "spark-entrypoint.sh"])
def test_the_scripts_are_valid_bash_and_executable(script: str) -> None:
    path = DOCKER / script
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert os.access(path, os.X_OK)


def test_pip_installs_offline_only_when_a_wheelhouse_is_given(
    dockerfile: tuple[str, list[Instruction]],
) -> None:
    """``docker build`` without build arguments uses the package index; the builder
    passes WHEELHOUSE (and mounts it) to install offline. The final stage only adds
    the project's own wheel, offline, to the dependencies copied from the build stage."""
    _, instructions = dockerfile
    assert build_args(instructions).get("WHEELHOUSE") == ""
    last_from = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    pips = [(n, ins.arguments) for n, ins in enumerate(instructions)
            if ins.keyword == "RUN" and "/opt/venv/bin/pip " in ins.arguments]  # fmt: skip
    build = [args for n, args in pips if n < last_from]
    final = [args for n, args in pips if n > last_from]
    assert len(build) == 2 and len(final) == 1
    for install in build:
        assert '${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"}' in install
    # an ARG is scoped to its stage: every stage that runs pip declares WHEELHOUSE
    stage_starts = [n for n, ins in enumerate(instructions) if ins.keyword == "FROM"]
    for n, _ in pips:
        start = max(s for s in stage_starts if s < n)
        declared = [i.arguments for i in instructions[start:n] if i.keyword == "ARG"]
        assert "WHEELHOUSE=" in declared or n > last_from, f"stage at {start}"
    assert "--no-index" in final[0] and "--find-links /tmp/dist" in final[0]


def test_the_dependency_layer_comes_before_the_code(
    dockerfile: tuple[str, list[Instruction]],
) -> None:
    """The big pip layer must not depend on the code, or every change reinstalls Spark."""
    _, instructions = dockerfile
    deps = next(n for n, i in enumerate(instructions) if "--requirement " in i.arguments)
    copied_before = [s for i in instructions[:deps] for s in copy_sources(i)]
    assert sorted(copied_before) == ["constraints.txt", "pyproject.toml"]  # not README.md


@pytest.mark.parametrize("extra", ["runtime", "operator"])
def test_the_image_extras_name_requirements_only(extra: str) -> None:
    """The build stage installs an extra's requirements from pyproject.toml directly,
    so an extra may not refer to the project itself (as ``dev`` does)."""
    with (REPO / "pyproject.toml").open("rb") as f:
        requirements = tomllib.load(f)["project"]["optional-dependencies"][extra]
    assert not [r for r in requirements if r.startswith("checkpointed-jobs")]


def test_the_final_stage_runs_as_a_non_root_user(
    dockerfile: tuple[str, list[Instruction]],
) -> None:
    _, instructions = dockerfile
    last_from = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    users = [ins.arguments for ins in instructions[last_from:] if ins.keyword == "USER"]
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert not user.isdigit() or int(user) >= 100


def test_nothing_is_added_from_urls(dockerfile: tuple[str, list[Instruction]]) -> None:
    _, instructions = dockerfile
    adds = [ins for ins in instructions if ins.keyword == "ADD"]
    assert not [a for a in adds if re.search(r"\w+://", a.arguments)]
    runs = " ".join(ins.arguments for ins in instructions if ins.keyword == "RUN")
    assert not re.search(r"\b(curl|wget)\b", runs), "images must not download at build time"


def test_apt_installs_are_lean_and_clean_up_their_lists(
    dockerfile: tuple[str, list[Instruction]],
) -> None:
    _, instructions = dockerfile
    for ins in instructions:
        if ins.keyword != "RUN" or "apt-get install" not in ins.arguments:
            continue
        assert "--no-install-recommends" in ins.arguments, f"line {ins.line}"
        assert re.search(r"apt-get install (-y|--yes)|-y ", ins.arguments), f"line {ins.line}"
        assert "apt-get update" in ins.arguments, f"line {ins.line}: update in the same layer"
        assert "rm -rf /var/lib/apt/lists/*" in ins.arguments, f"line {ins.line}"


def test_pip_keeps_no_cache_in_the_image(dockerfile: tuple[str, list[Instruction]]) -> None:
    _, instructions = dockerfile
    env = " ".join(ins.arguments for ins in instructions if ins.keyword == "ENV")
    assert "PIP_NO_CACHE_DIR=1" in env


def test_the_runtime_image_has_java_17_and_spark_settings() -> None:
    text = DOCKERFILES["runtime"].read_text()
    assert "openjdk-17-jre-headless" in text
    assert "JAVA_HOME=" in text and "SPARK_HOME=" in text
    assert "SPARK_CONF_DIR=/opt/spark/conf" in text  # where Spark mounts executor conf
    # the base's Python (Debian bookworm) is the one the venv paths name
    assert f"SPARK_HOME=/opt/venv/lib/python{PYTHON_VERSION}/site-packages/pyspark" in text


def test_the_runtime_image_installs_the_table_sinks_libraries() -> None:
    """``sinks.delta`` and ``sinks.iceberg`` on a cluster need their libraries in the
    image the driver and executors run: the runtime extra, which the image installs."""
    with (REPO / "pyproject.toml").open("rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    names = {re.split(r"[\[<>=]", r, maxsplit=1)[0] for r in extras["runtime"]}
    assert {"deltalake", "pyiceberg"} <= names
    assert {r for r in extras["runtime"] if r.startswith("pyiceberg")} == set(extras["iceberg"])
