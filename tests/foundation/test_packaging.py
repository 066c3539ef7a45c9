"""The sdist and the wheel hold what specbuild opens at run time, and the wheel runs on its own.

What the package opens through `__file__` (specbuild.repository.engine.writer SOURCES, specbuild.standalone, the reference runtimes'
core models, specbuild.recipe.prompts BUNDLED, specbuild.deploy.crds, specbuild.deploy.rehearse SHIM) all lies
inside the package folder, so the rule tested here is the package tree itself: every file git tracks under
pipeline/specbuild is in the sdist and in the wheel built from that sdist, as `python -m build` builds it (CI's
.ci/run builds, checks and installs it too). The zoo (checkpoints/) and the tests stay in the repository.
"""

from __future__ import annotations

import email
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline" / "specbuild"

# Rendered from the unpacked wheel: between them they copy every Triton model source (checked below).
RENDERED = ["recipes/reference/eagle.yaml", "recipes/reference/llmapi_eagle3.yaml", "recipes/tensorrt-llm/eagle.yaml"]


def tracked_files() -> list[Path]:
    """The repository's files as a clean clone has them (git's list), relative to the root."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    return [Path(f) for f in out.decode().split("\0") if f and (ROOT / f).is_file()]


def package_tree() -> list[str]:
    """Every file of the package folder, relative to pipeline/."""
    files = sorted(f.relative_to("pipeline").as_posix() for f in tracked_files() if f.parts[:2] == PACKAGE.parts[-2:])
    assert any(f.startswith("specbuild/repository/engine/models/") for f in files)
    return files


def _build(hook: str, source: Path, out: Path) -> Path:
    """Run setuptools' PEP 517 hook in `source` (what `python -m build` calls, without its isolated env)."""
    code = f"import sys; from setuptools import build_meta; print(build_meta.{hook}(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{hook} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """The sdist of a clean copy of this tree (its tracked files: no build leftovers such as an egg-info, whose
    file list setuptools would reuse), and the wheel built from that sdist."""
    tmp = tmp_path_factory.mktemp("dist")
    for f in tracked_files():
        (tmp / "clone" / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, tmp / "clone" / f)
    sdist = _build("build_sdist", tmp / "clone", tmp)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "unpacked", filter="data")
        sdist_names = tar.getnames()
    wheel = _build("build_wheel", tmp / "unpacked" / sdist.name.removesuffix(".tar.gz"), tmp)
    with zipfile.ZipFile(wheel) as zf:
        wheel_names = zf.namelist()
        dist_info = next(n.split("/")[0] for n in wheel_names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(zf.read(f"{dist_info}/METADATA"))
        zf.extractall(tmp / "site")
    prefix = sdist.name.removesuffix(".tar.gz") + "/"
    return {
        "sdist": sdist,
        "wheel": wheel,
        "site": tmp / "site",
        "metadata": metadata,
        "dist_info": dist_info,
        "sdist_names": {n.removeprefix(prefix) for n in sdist_names if n.startswith(prefix)},
        "wheel_names": set(wheel_names),
    }


def test_the_wheel_holds_every_file_of_the_package_tree(built):
    missing = [f for f in package_tree() if f not in built["wheel_names"]]
    assert not missing, (
        f"not in {built['wheel'].name}: {missing} — add their pattern to "
        "[tool.setuptools.package-data] in pyproject.toml"
    )


def test_the_wheel_holds_the_package_and_its_metadata_only(built):
    tops = {name.split("/")[0] for name in built["wheel_names"]}
    assert tops == {"specbuild", built["dist_info"]}, "the zoo, tests and recipes stay in the repository"
    assert not [n for n in built["wheel_names"] if "__pycache__" in n or n.endswith(".pyc")]


def test_the_sdist_holds_what_a_build_needs(built):
    # (the wheel fixture was built from this sdist alone)
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= built["sdist_names"]
    missing = [f for f in package_tree() if f"pipeline/{f}" not in built["sdist_names"]]
    assert not missing, f"not in {built['sdist'].name}: {missing}"
    assert not [n for n in built["sdist_names"] if n.startswith(("tests/", "checkpoints/"))]


def test_the_version_is_the_distributions(built):
    import specbuild

    assert built["metadata"]["Version"] == specbuild.__version__
    assert built["wheel"].name.startswith(f"specbuild-{specbuild.__version__}-")


def test_the_wheel_declares_the_cli_and_the_client_extra(built):
    assert (
        "[console_scripts]\nspecbuild = specbuild.cli:main"
        in zipfile.ZipFile(built["wheel"]).read(f"{built['dist_info']}/entry_points.txt").decode()
    )
    requires = built["metadata"].get_all("Requires-Dist")
    extra = {}
    for line in requires:
        spec, _, marker = line.partition(";")
        name = marker.split("extra ==")[-1].strip().strip("'\"") if "extra ==" in marker else ""
        extra.setdefault(name, set()).add(spec.strip())
    assert extra["client"], "the Containerfile installs specbuild[client]"
    assert extra["client"] <= extra["triton"], (
        f"the client extra is the triton extra without nvidia-pytriton: {extra['client'] - extra['triton']} "
        "differ from the triton extra's lines"
    )
    names = {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() for r in extra["client"]}
    assert not names & {"torch", "transformers", "tokenizers", "tensorrt-llm", "tensorrt_llm"}, (
        "the client extra must not ask for what NVIDIA's image pins: its torch, transformers, TensorRT-LLM"
    )


RUN_FROM_WHEEL = r"""
import hashlib, json, sys
from pathlib import Path
import specbuild
from specbuild.cli import main
from specbuild.deploy import crds
from specbuild.recipe import prompts

out = {"file": specbuild.__file__, "version": specbuild.__version__, "renders": {}}
for recipe in sys.argv[2:]:
    out["renders"][recipe] = main(["compile", "--render-only", str(Path(sys.argv[1]) / recipe)])
out["prompts"] = len(prompts.load_prompt_file(prompts.BUNDLED))
out["crds"] = {kind: bool(crds.schema_for(api, kind)) for api, kind in crds.CRDS}
out["rendered"] = sorted({hashlib.sha256(p.read_bytes()).hexdigest() for p in Path("render").rglob("*.py")})
print(json.dumps(out))
"""


def test_the_unpacked_wheel_renders_repositories_with_its_own_files(built, tmp_path):
    """Run from the wheel's files alone (not pipeline/): every path the code builds from `__file__` resolves, and
    the repositories get the wheel's Triton model sources byte for byte."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(built["site"])
    done = subprocess.run(
        [sys.executable, "-c", RUN_FROM_WHEEL, str(ROOT), *RENDERED],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).is_relative_to(built["site"]), out["file"]
    assert out["version"] == built["metadata"]["Version"]
    assert out["renders"] == {recipe: 0 for recipe in RENDERED}
    assert out["prompts"] > 0
    assert out["crds"] and all(out["crds"].values()), out["crds"]
    package = built["site"] / "specbuild"
    sources = sorted(
        [
            *(p for p in (package / "repository" / "engine" / "models").rglob("*") if p.is_file()),
            *(p for p in (package / "reference" / "core_models").rglob("*") if p.is_file()),
            *(p for p in (package / "standalone").glob("*.py") if p.name != "__init__.py"),
        ]
    )
    assert sources
    not_copied = [
        p.relative_to(built["site"]).as_posix()
        for p in sources
        if hashlib.sha256(p.read_bytes()).hexdigest() not in out["rendered"]
    ]
    assert not not_copied, f"no rendered repository of {RENDERED} holds {not_copied}: render a recipe that uses them"


# --- the Containerfile (not built here: no container engine, no registry; these keep it from rotting) ---

CONTAINERFILE = ROOT / "Containerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Containerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_containerfile_builds_on_the_image_the_bundles_run_in():
    from specbuild.deploy.images import (
        NGC_REPOSITORY,
        TAG_SUFFIX,
        newest_supported,
        serves_llmapi,
        supported,
        tag_for,
        trtllm_of_tag,
    )

    steps = instructions()
    args = dict(arg.split("=", 1) for kind, arg in steps[: [k for k, _ in steps].index("FROM")] if kind == "ARG")
    base = next(arg for kind, arg in steps if kind == "FROM")
    assert base == f"{NGC_REPOSITORY}:${{TRITON_RELEASE}}{TAG_SUFFIX}"
    tag = base.split(":", 1)[1].replace("${TRITON_RELEASE}", args["TRITON_RELEASE"])
    trtllm = trtllm_of_tag(tag)
    assert trtllm, f"{tag}: not a container specbuild/deploy/images.py knows"
    assert supported(trtllm) and serves_llmapi(trtllm), f"{tag} (TensorRT-LLM {trtllm}) does not serve both flavours"
    assert tag == tag_for(newest_supported()), (
        f"the Containerfile builds on {tag}, the deployment bundles run in {tag_for(newest_supported())} by default: "
        "set ARG TRITON_RELEASE to its <yy.mm>"
    )


def test_the_containerfile_installs_the_wheel_ci_builds_with_the_client_extra(built):
    steps = instructions()
    copy = next(arg for kind, arg in steps if kind == "COPY").split()
    assert fnmatch.fnmatch(built["wheel"].name, copy[0]), f"COPY {copy[0]} does not take {built['wheel'].name}"
    assert "--outdir dist" in (ROOT / ".ci" / "run").read_text(), "CI builds the wheel into dist/, the build context"
    run = next(arg for kind, arg in steps if kind == "RUN" and "pip install" in arg)
    install = run[run.index("pip install") :].split(";")[0].split()
    assert install[-1] == '"$1[client]"' and install[-3:-1] == ["--constraint", "/tmp/specbuild/image-packages.txt"]
    assert "client" in built["metadata"].get_all("Provides-Extra")
    assert "specbuild --version" in run
    entry = json.loads(next(arg for kind, arg in steps if kind == "ENTRYPOINT"))
    assert entry[-1] == "specbuild" and entry[0] == "/opt/nvidia/nvidia_entrypoint.sh"


def test_the_containerfile_pins_every_package_of_the_image_pip_accepts(tmp_path):
    """Its pin filter, run as written: NVIDIA's local versions are pinned, a Debian version pip refuses is not."""
    run = next(arg for kind, arg in instructions() if kind == "RUN" and "image-packages.txt" in arg)
    code = re.search(r"python3 -c '([^']*)'", run).group(1)
    listed = [
        "torch==2.9.0a0+145a3a7bda.nv25.10",
        "tensorrt_llm==1.2.1",
        "numpy==1.26.4",
        "distro-info==1.1build1",
        "transformers==4.57.1",
    ]
    done = subprocess.run(
        [sys.executable, "-c", code],
        input="\n".join(listed) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines() == [line for line in listed if line != "distro-info==1.1build1"]
