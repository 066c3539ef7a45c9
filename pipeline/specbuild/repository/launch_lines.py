"""The lines both flavours' launch_triton.sh start with: strict bash, the repository's own folder, and the server
binary and ports, each overridable from the environment (docs/deploying.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specbuild.recipe.schema import TritonSection


def server_settings(triton: TritonSection) -> list[str]:
    """Shell lines setting REPO, TRITONSERVER, HTTP_PORT, GRPC_PORT and METRICS_PORT (the recipe's ports unless
    the environment names others)."""
    return [
        "set -euo pipefail",
        'REPO="$(cd "$(dirname "$0")" && pwd)"',
        'TRITONSERVER="$(printenv TRITONSERVER || echo /opt/tritonserver/bin/tritonserver)"',
        f'HTTP_PORT="$(printenv HTTP_PORT || echo {triton.http_port})"',
        f'GRPC_PORT="$(printenv GRPC_PORT || echo {triton.grpc_port})"',
        f'METRICS_PORT="$(printenv METRICS_PORT || echo {triton.metrics_port})"',
    ]
