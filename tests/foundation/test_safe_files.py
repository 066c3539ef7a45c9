"""specbuild.files.safe_files: every way an input file can be unusable is a UserError naming the file and what to do —
never a hang (FIFO), an unbounded read (devices), an internal error, or a read outside the folder it belongs to."""

from __future__ import annotations

import errno
import json
import os
import socket

import pytest

from specbuild.errors import UserError
from specbuild.files.safe_files import UnreadableFile, check_inside, read_json, read_text

pytestmark = pytest.mark.timeout(30)


def _refused(fn, fragment: str) -> UnreadableFile:
    with pytest.raises(UnreadableFile) as info:
        fn()
    assert isinstance(info.value, UserError) and fragment in str(info.value), str(info.value)
    return info.value


def test_a_text_file_is_read_and_a_bom_dropped(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"\xef\xbb\xbfhello\n")
    assert read_text(p, what="prompt file", max_bytes=100) == "hello\n"


def test_special_files_are_refused_without_reading(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    e = _refused(lambda: read_text(fifo, what="prompt file", max_bytes=100), "is a FIFO (named pipe)")
    assert str(e).startswith(f"{fifo}: ") and "give the prompt file as a regular file" in str(e)
    for device in ("/dev/zero", "/dev/urandom"):
        _refused(lambda: read_text(device, what="recipe", max_bytes=100), "is a character device")
    _refused(lambda: read_text(tmp_path, what="recipe", max_bytes=100), "is a folder")
    sock = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
        _refused(lambda: read_text(sock, what="recipe", max_bytes=100), "is a socket")


def test_missing_and_odd_paths(tmp_path):
    _refused(lambda: read_text(tmp_path / "nope", what="recipe", max_bytes=100), "no such file — check the path")
    (tmp_path / "f").write_text("x")
    _refused(lambda: read_text(tmp_path / "f" / "g", what="recipe", max_bytes=100), "a part of the path is a file")
    _refused(lambda: read_text(tmp_path / ("x" * 300), what="recipe", max_bytes=100), "the path is too long")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    _refused(lambda: read_text(loop, what="recipe", max_bytes=100), "loop of symbolic links")


def test_permission_denied(tmp_path, monkeypatch):
    p = tmp_path / "secret.json"
    p.write_text("{}")
    real_open = os.open

    def denied(path, *a, **kw):  # root reads every file: make the kernel's answer for a non-root user
        if str(path) == str(p):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(os, "open", denied)
    _refused(
        lambda: read_json(p, what="checkpoint config", max_bytes=100),
        "permission denied — make the checkpoint config readable",
    )


def test_size_cap_is_checked_before_reading(tmp_path):
    p = tmp_path / "big.json"
    p.write_text("[]")
    os.truncate(p, 10 * 2**30)  # a sparse 10 GiB file: read, it would take minutes and all memory
    _refused(
        lambda: read_json(p, what="tokenizer file", max_bytes=2**20),
        "is 10240.0 MiB; a tokenizer file may have at most 1.0 MiB",
    )


def test_text_and_json_problems(tmp_path):
    p = tmp_path / "x.json"
    p.write_bytes(b'{"a": "caf\xe9"}')
    _refused(lambda: read_json(p, what="config", max_bytes=100), "is not UTF-8 text (byte 11, line 1")
    p.write_text('{"a": }')
    _refused(lambda: read_json(p, what="config", max_bytes=100), "is not valid JSON (line 1, column 7")
    p.write_text("[1, 2]")
    _refused(
        lambda: read_json(p, what="checkpoint config", max_bytes=100),
        "must hold a JSON object ({...}) at the top, not an array",
    )
    assert read_json(p, what="prompt file", max_bytes=100, shape=list) == [1, 2]
    p.write_text("[" * 100_000 + "]" * 100_000)
    _refused(lambda: read_json(p, what="config", max_bytes=10**6), "nested too deeply")
    p.write_text("1" * 5000)
    _refused(lambda: read_json(p, what="config", max_bytes=10**6, shape=None), "is not usable JSON")


def test_symlinks_must_stay_inside_the_root(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    (tmp_path / "outside.json").write_text(json.dumps({"a": 1}))
    (root / "config.json").symlink_to(tmp_path / "outside.json")
    e = _refused(
        lambda: read_json(root / "config.json", what="checkpoint config", max_bytes=100, root=root),
        f"leads out of {root} (to {tmp_path / 'outside.json'})",
    )
    assert "copy the checkpoint config into" in str(e)
    (root / "inner.json").write_text("{}")
    (root / "link.json").symlink_to("inner.json")
    assert read_json(root / "link.json", what="checkpoint config", max_bytes=100, root=root) == {}


def test_hub_cache_layout_is_inside_its_repository_folder(tmp_path):
    """Hugging Face's hub cache: snapshots/<rev>/config.json -> ../../blobs/<hash>. With the repository folder as
    the root the link stays inside; with the snapshot folder as the root it would not."""
    repo = tmp_path / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc123").write_text('{"model_type": "llama"}')
    snapshot = repo / "snapshots" / "0123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/abc123")
    assert read_json(snapshot / "config.json", what="checkpoint config", max_bytes=100, root=repo) == {
        "model_type": "llama"
    }
    assert check_inside(snapshot / "config.json", repo, "file") == repo / "blobs" / "abc123"
    _refused(lambda: check_inside(snapshot / "config.json", snapshot, "checkpoint config"), "leads out of")
