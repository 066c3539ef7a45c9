"""A stand-in for Open MPI's `mpirun`, for the CPU rehearsal of a bundle's container command only.

There is no MPI on the CPU machines specbuild is tested on. This stand-in accepts the mpirun options specbuild's
launch scripts and NVIDIA's multi-node launch use (and refuses any other, so a misspelt option fails), splits
the command line into its `:`-separated app contexts, checks each starts with `-n 1`, and execs the FIRST one
(rank 0: the process that serves HTTP/gRPC/metrics). Ranks 1.. are not started: a real run needs real mpirun.
"""

from __future__ import annotations

import os
import sys

FLAGS = {"--allow-run-as-root", "--oversubscribe", "--report-bindings", "--debug-devel"}
WITH_VALUE = {"-np", "--np", "-H", "--host", "--hostfile", "-x"}
WITH_TWO = {"-mca", "--mca"}


def split(argv: list[str]) -> tuple[list[str], list[list[str]]]:
    options: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-n",):
        arg = argv[i]
        if arg in FLAGS:
            i += 1
        elif arg in WITH_VALUE:
            i += 2
        elif arg in WITH_TWO:
            i += 3
        else:
            raise SystemExit(f"mpirun (specbuild rehearsal stand-in): unknown option {arg!r}")
        options.append(arg)
    contexts: list[list[str]] = [[]]
    for arg in argv[i:]:
        if arg == ":":
            contexts.append([])
        else:
            contexts[-1].append(arg)
    for n, ctx in enumerate(contexts):
        if ctx[:2] != ["-n", "1"] or len(ctx) < 3:
            raise SystemExit(
                f"mpirun (specbuild rehearsal stand-in): app context {n} does not start with '-n 1 "
                f"<program>': {ctx[:4]}"
            )
    return options, [ctx[2:] for ctx in contexts]


def main() -> None:
    options, contexts = split(sys.argv[1:])
    if "--allow-run-as-root" not in options and os.geteuid() == 0:
        raise SystemExit(
            "mpirun (specbuild rehearsal stand-in): running as root needs --allow-run-as-root, "
            "as Open MPI's mpirun does"
        )
    sys.stderr.write(f"mpirun stand-in: {len(contexts)} rank(s); exec rank 0 only: {contexts[0][0]}\n")
    sys.stderr.flush()
    os.execvp(contexts[0][0], contexts[0])


if __name__ == "__main__":
    main()
