"""Double of `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` (NVIDIA driver tool).

SPECBUILD_DOUBLE_GPUS: ";"-separated "name,major.minor" entries, e.g. "NVIDIA H200,9.0;NVIDIA H200,9.0".
  unset or "none"   -> the driver is not loaded (exit 9, the real message)
  "empty"           -> "No devices were found" (exit 6)
  "old-driver:..."  -> a driver that does not know the compute_cap field (exit 2 for that query)
Output format: one "name, major.minor" line per GPU (csv, noheader). Not verified against a real H200 here.
"""

import os
import sys


def main() -> int:
    spec = os.environ.get("SPECBUILD_DOUBLE_GPUS", "none")
    query = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--query-gpu=")), None)
    if spec == "none":
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
            "latest NVIDIA driver is installed and running."
        )
        return 9
    if spec == "empty":
        print("No devices were found")
        return 6
    old = spec.startswith("old-driver:")
    if old:
        spec = spec.split(":", 1)[1]
    fields = (query or "name").split(",")
    if old and "compute_cap" in fields:
        print('Field "compute_cap" is not a valid field to query.')
        return 2
    for entry in spec.split(";"):
        name, cc = entry.split(",")
        values = {"name": name, "compute_cap": cc}
        print(", ".join(values[f] for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main())
