"""specbuild.serve.binary: which tritonserver runs, and how the nvidia-pytriton one is set up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specbuild.errors import UserError
from specbuild.serve import binary as sb


@pytest.fixture(scope="module")
def binary():
    return sb.find_tritonserver(None)


def test_explicit_binary_must_exist(tmp_path):
    with pytest.raises(UserError, match="--tritonserver"):
        sb.find_tritonserver(tmp_path / "no-such-tritonserver")


def test_bundled_binary_setup(binary):
    if binary.source != "nvidia-pytriton":
        pytest.skip("a system tritonserver is used here")
    stub = binary.backend_dir / "python" / "triton_python_backend_stub"
    assert stub.is_file() and os.access(stub, os.X_OK)
    assert "nvidia_pytriton.libs" in binary.env["LD_LIBRARY_PATH"]
    assert binary.env["PATH"].split(os.pathsep)[0] == str(Path(os.sys.prefix) / "bin")
    assert str(sb.specbuild_source_root()) in binary.env["PYTHONPATH"].split(os.pathsep)
