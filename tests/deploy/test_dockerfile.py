"""watcher/Dockerfile checked statically (tests/deploy/test_watcher_image.py builds and runs it): multi-stage, slim
base pinned by digest, hash-pinned dependencies, non-root numeric user, read-only-root friendly, only the needed
files copied, and those files really are enough to start the watcher."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path

import pytest

from tests.deploy.conftest import REPO

DOCKERFILE = REPO / "watcher/Dockerfile"
Instruction = tuple[str, str]


def parse(text: str) -> list[Instruction]:
    """(INSTRUCTION, arguments) with comments dropped and continuation lines joined."""
    out: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, args = line.partition(" ")
        out.append((word.upper(), args.strip()))
    return out


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def copies(stage: list[Instruction]) -> list[tuple[list[str], str]]:
    """(sources, destination) of the COPY instructions that read the build context (not --from=)."""
    out = []
    for word, args in stage:
        if word == "COPY" and "--from=" not in args:
            *sources, dest = [a for a in args.split() if not a.startswith("--")]
            out.append((sources, dest))
    return out


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse(DOCKERFILE.read_text())


def test_multi_stage_with_a_base_pinned_by_digest(instructions: list[Instruction]) -> None:
    froms = [args for word, args in instructions if word == "FROM"]
    assert len(froms) >= 2 and all(" AS " in f.upper() for f in froms)
    args = dict(a.split("=", 1) for w, a in instructions if w == "ARG" and "=" in a)
    images = [args.get(f.split()[0].strip("${}"), f.split()[0]) for f in froms]
    # The runtime stage starts from scratch and copies the slimmed base as one layer (the deletions then shrink the
    # image instead of hiding files under a whiteout); every other stage is the pinned base.
    assert images[-1] == "scratch" and "scratch" not in images[:-1]
    assert ("COPY", "--from=slim / /") in stages(instructions)[-1]
    for image in images[:-1]:
        assert "latest" not in image
        # A full patch version on a slim variant, and the digest: a re-pushed tag cannot change what is built.
        assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim(-\w+)?@sha256:[0-9a-f]{64}", image), image
    runtime = stages(instructions)[-1]
    assert any(w == "COPY" and "--from=build" in a for w, a in runtime)
    # Nothing is installed in the runtime stage: no compilers, package caches or pip there.
    assert not any(w == "RUN" for w, _ in runtime)


def test_runs_as_a_numeric_non_root_user(instructions: list[Instruction]) -> None:
    runtime = stages(instructions)[-1]
    users = [a for w, a in runtime if w == "USER"]
    assert users, "the runtime stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0
    last_user = max(i for i, (w, _) in enumerate(runtime) if w == "USER")
    assert last_user < next(i for i, (w, _) in enumerate(runtime) if w == "ENTRYPOINT")


def test_friendly_to_a_read_only_root_filesystem(instructions: list[Instruction]) -> None:
    env = " ".join(a for w, a in stages(instructions)[-1] if w == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "PYTHONUNBUFFERED=1" in env
    # Bytecode is compiled at build time, so nothing wants to write __pycache__ at run time.
    build = stages(instructions)[0]
    assert any(w == "RUN" and "compileall" in a and "/app" in a for w, a in build)
    assert not any(w == "VOLUME" for w, _ in instructions)


def test_health_check_and_entrypoint(instructions: list[Instruction]) -> None:
    runtime = dict((w, a) for w, a in stages(instructions)[-1])
    assert "/healthz" in runtime["HEALTHCHECK"] and "WATCHER_HEALTH_PORT=8080" in runtime["ENV"]
    assert runtime["EXPOSE"] == "8080"
    assert json.loads(runtime["ENTRYPOINT"]) == ["python", "-m", "watcher"]  # exec form: SIGTERM reaches Python


def ccm_modules_the_watcher_imports() -> set[str]:
    """The ccm layer files reachable from watcher/*.py through ccm imports (lazy, indented ones too), with the
    packages' __init__.py files: what the image must hold."""
    layer = REPO / "layers/ccm"
    found: set[str] = set()
    todo = list((REPO / "watcher").glob("*.py"))
    while todo:
        text = todo.pop().read_text()
        modules = re.findall(r"^\s*(?:from|import) (ccm(?:\.\w+)*)", text, re.M)
        for package, names in re.findall(r"^\s*from (ccm(?:\.\w+)*) import ([\w, ]+)", text, re.M):
            modules += [f"{package}.{name.strip()}" for name in names.split(",")]
        for module in modules:
            parts = module.split(".")
            candidates = [layer / ("/".join(parts) + ".py"), layer / "/".join(parts) / "__init__.py"]
            candidates += [layer / "/".join(parts[:i]) / "__init__.py" for i in range(1, len(parts))]
            files = [c for c in candidates if c.is_file()]  # `from ccm.contracts.messages import Delta`: no file Delta
            for file in files:
                rel = str(file.relative_to(REPO))
                if rel not in found:
                    found.add(rel)
                    todo.append(file)
    return found


def test_only_what_the_watcher_imports_is_copied_and_the_context_is_filtered(
    instructions: list[Instruction],
) -> None:
    sources = [s for stage in stages(instructions) for srcs, _ in copies(stage) for s in srcs]
    ccm_imports = ccm_modules_the_watcher_imports()
    # The delta contract, the endpoint and Service-ownership rules the hints follow (pure), and the small Kubernetes
    # client: nothing of the reconcilers.
    assert ccm_imports == {
        f"layers/ccm/ccm/{m}.py"
        for m in [
            "__init__",
            "contracts/__init__",
            "contracts/messages",
            "contracts/endpoints",
            "contracts/kube",
            "contracts/provider_id",
            "deadline",
            "k8s/__init__",
            "k8s/rest",
            "k8s/kubeconfig",
            "k8s/watch",
        ]
    }
    assert set(sources) == {"watcher/requirements.txt", "watcher/*.py", *ccm_imports}
    # BuildKit's <Dockerfile>.dockerignore: everything excluded except the copied sources.
    ignore = [line for line in (REPO / "watcher/Dockerfile.dockerignore").read_text().splitlines() if line.strip()]
    patterns = [line for line in ignore if not line.startswith("#")]
    assert patterns[0] == "*" and {p.removeprefix("!") for p in patterns[1:]} == set(sources)
    assert fnmatch.fnmatch("watcher/app.py", "watcher/*.py") and not fnmatch.fnmatch(
        "watcher/README.md", "watcher/*.py"
    )


def pins(path: Path) -> dict[str, str]:
    """name -> version of the `name==version` lines (continuations and comments skipped), names canonicalised."""
    found = re.findall(r"^([A-Za-z0-9][A-Za-z0-9_.\[\]-]*)==([^\s;\\]+)", path.read_text(), re.M)
    return {re.sub(r"[-_.]+", "-", name.split("[")[0]).lower(): version for name, version in found}


def test_requirements_cover_the_imports_with_the_project_pins() -> None:
    direct = pins(REPO / "watcher/requirements.in")
    project = pins(REPO / "requirements-dev.txt") | pins(REPO / "layers/ccm/requirements.txt")
    assert direct and {k: project[k] for k in direct} == direct
    third_party = {
        m.split(".")[0]
        for path in [*(REPO / "watcher").glob("*.py"), *(REPO / f for f in ccm_modules_the_watcher_imports())]
        for m in re.findall(r"^\s*(?:from|import) (\w+)", path.read_text(), re.M)  # lazy imports too
        if m not in sys.stdlib_module_names and m not in ("watcher", "ccm", "__future__")
    }
    distribution_of = {"yaml": "pyyaml"}
    assert {distribution_of.get(m, m.replace("_", "-")) for m in third_party} <= set(direct), third_party
    assert "kubernetes" not in direct  # the official client (158 MiB with what only it pulls in) stays out


def test_the_image_installs_a_hash_pinned_lock_of_the_tested_versions(instructions: list[Instruction]) -> None:
    """watcher/requirements.txt (scripts/lock_watcher_requirements.py) pins every package of the image with its
    hashes, at the versions this test environment runs, and the Dockerfile refuses anything else."""
    lock_text = (REPO / "watcher/requirements.txt").read_text()
    lock = pins(REPO / "watcher/requirements.txt")
    direct = pins(REPO / "watcher/requirements.in")
    assert {k: lock.get(k) for k in direct} == direct, "run scripts/lock_watcher_requirements.py"
    hashed = re.findall(r"^(\S+)==\S+(?: \\\n    --hash=sha256:[0-9a-f]{64})+$", lock_text, re.M)
    assert len(hashed) == len(lock), f"entries without a hash: {set(lock) - set(hashed)}"
    # The tested versions ship: what this environment has installed is what the lock pins (transitive ones too).
    installed = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in distributions()}
    assert {k: installed.get(k) for k in lock} == lock
    install = [a for w, a in stages(instructions)[0] if w == "RUN" and "pip install" in a]
    assert len(install) == 1 and "--require-hashes" in install[0] and "/tmp/requirements.txt" in install[0]
    assert "--only-binary=:all:" in install[0]


def test_the_copied_files_alone_start_the_watcher(instructions: list[Instruction], tmp_path: Path) -> None:
    """Lay out /app as the COPY lines do and import the watcher from there only (repo paths removed)."""
    app = tmp_path / "app"
    for srcs, dest in copies(stages(instructions)[0]):
        if dest.startswith("/tmp/"):
            continue
        target = app / dest.removeprefix("/app/")
        target.mkdir(parents=True, exist_ok=True)
        for pattern in srcs:
            for path in REPO.glob(pattern):
                shutil.copy(path, target / path.name)
    keep = f"not p.startswith({str(REPO)!r}) or 'site-packages' in p"  # the venv stays; repo source paths go
    probe = (
        "import sys\n"
        f"sys.path = [{str(app)!r}] + [p for p in sys.path if {keep}]\n"
        "import watcher.__main__, watcher.app\n"
        "mods = [m.__file__ for n, m in sys.modules.items() if n.split('.')[0] in ('watcher', 'ccm')]\n"
        f"assert all(f.startswith({str(app)!r}) for f in mods), mods\n"
        "print(len(mods))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path, env={"PATH": "/bin"}
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 10
