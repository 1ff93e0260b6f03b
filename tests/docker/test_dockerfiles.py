"""The Dockerfiles and .dockerignore, checked without Docker: what they copy exists and
reaches the build context, what they run exists, and they follow the usual hygiene
rules (pinned bases, non-root user, no remote ADD, lean apt layers)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILES = {
    "operator": DOCKER / "operator.Dockerfile",
    "runtime": DOCKER / "runtime.Dockerfile",
}


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    line: int


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Instructions with their continuation lines joined, comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, arguments = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
    return instructions


def build_args(instructions: list[Instruction]) -> dict[str, str]:
    args: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "ARG" and "=" in ins.arguments:
            name, _, default = ins.arguments.partition("=")
            args[name.strip()] = default.strip()
    return args


def copy_sources(ins: Instruction) -> list[str]:
    """Source paths of a COPY (not those copied from another stage)."""
    words = shlex.split(ins.arguments)
    if any(w.startswith("--from=") for w in words):
        return []
    paths = [w for w in words if not w.startswith("--")]
    return paths[:-1]


def docker_ignore_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(f"^{out}$")


def is_in_build_context(relative: str) -> bool:
    """Docker's rule: the last .dockerignore pattern matching the path or one of its
    parent folders decides; ``!`` patterns re-include."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    parts = relative.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    included = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = docker_ignore_regex(pattern.lstrip("!").strip("/"))
        if any(regex.match(c) for c in candidates):
            included = negated
    return included


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
                 "job_runtime/__pycache__/x.pyc", "tests/helm/test_chart_files.py"):  # fmt: skip
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
    assert f'".[{extra}]"' in runs
    assert f"[{absent}]" not in runs and "[dev]" not in runs
    assert "--constraint constraints.txt" in runs


def test_the_operator_image_user_matches_the_charts_pod_security_context() -> None:
    values = yaml.safe_load((REPO / "charts/checkpointed-jobs/values.yaml").read_text())
    users = [i.arguments for i in parse_dockerfile(DOCKERFILES["operator"])
             if i.keyword == "USER"]  # fmt: skip
    uid, _, gid = users[-1].partition(":")
    assert int(uid) == values["podSecurityContext"]["runAsUser"]
    assert int(gid) == values["podSecurityContext"]["runAsGroup"]


# --- hygiene (what hadolint would flag) --------------------------------------------------


def test_base_images_are_pinned_to_a_version(
    dockerfile: tuple[str, list[Instruction]],
) -> None:
    _, instructions = dockerfile
    args = build_args(instructions)
    stages: set[str] = set()
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
        name, _, tag = image.rpartition(":")
        assert name and tag, f"line {ins.line}: {image} has no tag"
        assert tag != "latest", f"line {ins.line}: {image} uses latest"
        assert re.match(r"^\d+\.\d+\.\d+", tag), f"line {ins.line}: {image} is not pinned"


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
    assert "python:3.11" in text
