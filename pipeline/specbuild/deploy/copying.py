"""copy-models.sh: the one step that runs where the recipe was compiled, and the only file of a bundle that names
folders of that machine. It fills the deployment's tree `<name>/` — the Kubernetes claim (through the loader pod)
or a folder (the Slurm job's models folder, locally or over ssh) — with the repository as the containers read it
(the bundle's repository/) and the engines or checkpoints and the tokenizer.

Every folder is sent as a tar stream created with `tar -h` (GNU, BSD and busybox tar: follow symlinks), so a
Hugging Face hub-cache snapshot, whose files are relative links into ../../blobs/, arrives as the files themselves;
a dangling link fails the copy. Paths are embedded with shlex.quote; the remote folder of HOST:DEST is checked
by the script against an allow-list before it reaches the remote shell.
"""

from __future__ import annotations

import shlex

from specbuild.deploy.context import DeployContext
from specbuild.deploy.kubernetes import LOADER_ROOT
from specbuild.deploy.repository import FOLDER

COPY_SCRIPT = "copy-models.sh"

_HEAD = r"""#!/usr/bin/env bash
# Fill the storage of deployment {name} (written by specbuild; run it where the recipe was compiled) with the
# repository as the containers read it (this bundle's repository/) and the {what}, as the folder {name}/ of:
#   bash {script} kubernetes   the claim {claim}, through the pod {loader} (kubectl apply -f loader-pod.yaml first)
#   bash {script} DEST         DEST/{name}/ on this machine (a shared filesystem), or HOST:DEST over ssh
#                                  (Slurm: the bundle's models/ folder on the cluster, or the job's $MODELS_DIR)
# Symlinks are followed (tar -h): a Hugging Face hub-cache snapshot links each file into ../../blobs/, and the
# storage must hold the files themselves; a link to nothing stops the copy before it starts. Each folder is
# unpacked beside its place and renamed into it once complete.
set -euo pipefail
BUNDLE="$(cd "$(dirname "$0")" && pwd)"
NAMESPACE={namespace}
LOADER={loader_q}
LOADER_ROOT={loader_root}
DEST="${{1:?usage: bash {script} kubernetes | DEST | HOST:DEST}}"
case "$DEST" in
  kubernetes) ;;
  *:*)
    case "${{DEST#*:}}" in
      '' | *[!A-Za-z0-9_./+-]*)
        echo "{script}: the remote folder of HOST:DEST may hold only letters, digits and _ . / + -" >&2
        exit 2 ;;
    esac ;;
esac

# sh -c UNPACK sh FOLDER: the tar stream on stdin becomes FOLDER, replacing it once complete
UNPACK='rm -rf "$1.partial" && mkdir -p "$1.partial" && tar -x -f - -C "$1.partial" && rm -rf "$1" && mv "$1.partial" "$1"'

unpack() {{  # unpack SUB: the tar stream on stdin becomes the folder SUB of the destination
  local sub="$1"
  case "$DEST" in
    kubernetes)
      kubectl exec -i -n "$NAMESPACE" "$LOADER" -- sh -c "$UNPACK" sh "$LOADER_ROOT/$sub" ;;
    *:*)
      ssh -- "${{DEST%%:*}}" "sh -c '$UNPACK' sh '${{DEST#*:}}/$sub'" ;;
    *)
      sh -c "$UNPACK" sh "$DEST/$sub" ;;
  esac
}}

copy() {{  # copy SOURCE SUB
  local source="$1" sub="$2"
  if [ ! -d "$source" ]; then
    echo "{script}: $source is missing — compile the recipe first" >&2
    exit 2
  fi
  local broken
  broken="$(find -L "$source" -type l -print -quit)"  # (with -L only a link to nothing is still a link)
  if [ -n "$broken" ]; then
    echo "{script}: $broken links to nothing: the storage would lack that file — fix $source" >&2
    exit 2
  fi
  echo "{script}: $source -> $sub"
  tar -h -c -f - -C "$source" . | unpack "$sub"
}}

"""


def copy_script(ctx: DeployContext) -> str:
    loader = f"{ctx.name}-loader"
    text = _HEAD.format(
        name=ctx.name,
        what=ctx.flavour.paths_read,
        script=COPY_SCRIPT,
        claim=ctx.claim,
        loader=loader,
        namespace=shlex.quote(ctx.namespace),
        loader_q=shlex.quote(loader),
        loader_root=shlex.quote(LOADER_ROOT),
    )
    lines = []
    for m in ctx.mounts:
        source = f'"$BUNDLE"/{FOLDER}' if m.bundled else shlex.quote(str(m.source))
        lines.append(f"copy {source} {shlex.quote(m.sub_path)}  # {m.what}")
    return text + "\n".join(lines) + "\n"
