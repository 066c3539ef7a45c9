"""Engine reuse on the GPU path, through the TensorRT-LLM double: a second compile of an unchanged recipe runs no
`trtllm-build`, a change of `triton.*` or `validation.*` none either, a change of `build.max_batch_size` rebuilds
every engine, and an engine folder deleted comes back from the build cache. Builds are counted by a
`trtllm-build` launcher that logs each run (this proves specbuild's reuse logic, not the real GPU build)."""

from __future__ import annotations

import json
import shutil

from specbuild.cli import main
from trtllm_helpers import leftovers


def test_trtllm_builds_run_only_when_what_the_engines_read_changed(machine, write_recipe, tmp_path, capsys):
    log = tmp_path / "builds.log"
    machine.add_tool(
        "trtllm-build",
        "import sys\n"  # a build names its checkpoint; `--help` probes do not
        f"if '--checkpoint_dir' in sys.argv: open({str(log)!r}, 'a').write('build\\n')\n"
        "from tensorrt_llm.commands.build import main\nmain()\n",
    )
    engines = tmp_path / "engines"

    def compile_(**sections) -> tuple[dict, int]:
        recipe = write_recipe("eagle", **sections)
        before = len(log.read_text().splitlines()) if log.exists() else 0
        code = main(
            [
                "compile",
                str(recipe),
                "--no-validate",
                "--json",
                "--engines-dir",
                str(engines),
                "--repo-dir",
                str(tmp_path / "triton_repo"),
                "--cache-dir",
                str(tmp_path / "cache"),
            ]
        )
        out, err = capsys.readouterr()
        assert code == 0, err
        steps = {s["name"].split(" ")[0]: s["status"] for s in json.loads(out)["steps"]}
        return steps, len(log.read_text().splitlines()) - before

    steps, builds = compile_()
    assert steps["engines"] == "done" and builds == 2  # the eagle target and the baseline
    assert compile_() == ({"engines": "reused", "repository": "reused", "deployment": "done"}, 0)
    steps, builds = compile_(triton={"max_queue_delay_microseconds": 500}, validation={"max_tokens": 8})
    assert (steps["engines"], steps["repository"], builds) == ("reused", "done", 0)
    steps, builds = compile_(build={"max_batch_size": 2})
    assert (steps["engines"], builds) == ("done", 2)
    assert json.loads((engines / "eagle" / "target" / "config.json").read_text())["build_config"]["max_batch_size"] == 2

    shutil.rmtree(engines / "eagle" / "target")  # deleted: restored from the cache, not rebuilt
    steps, builds = compile_(build={"max_batch_size": 2})
    assert (steps["engines"], builds) == ("reused", 0)
    assert json.loads((engines / "eagle" / "target" / "config.json").read_text())["build_config"]["max_batch_size"] == 2
    assert compile_(build={"max_batch_size": 4})[1] == 0  # the first build's engines, from the cache
    assert leftovers(tmp_path) == []
