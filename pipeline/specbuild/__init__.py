"""specbuild: one YAML recipe in; speculative-decoding engines, a Triton repository and a validation report out."""

from importlib.metadata import PackageNotFoundError, version

try:
    # The installed distribution's version: pyproject.toml's [project] version, the one place it is written.
    __version__ = version("specbuild")
except PackageNotFoundError:  # a source tree run without installing it (PYTHONPATH=pipeline)
    __version__ = "0+unknown"
