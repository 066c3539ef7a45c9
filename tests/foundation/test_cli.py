import json
import subprocess
import sys

import pytest

from specbuild import __version__
from specbuild.cli import cli, main


def test_version(capsys):
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_every_help_has_an_example(command, capsys):
    assert main([command, "--help"]) == 0
    assert "Example" in capsys.readouterr().out


def test_schema_is_json_schema_of_the_recipe(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "Recipe"
    assert {"name", "runtime", "model", "speculation", "build", "triton", "validation"} <= set(schema["properties"])
    assert "model" in schema["required"] and "name" in schema["required"]


def test_missing_recipe_file_is_a_usage_error(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert "nope.yaml" in err and "no such file" in err and "Traceback" not in err


def test_unknown_command_exits_2(capsys):
    assert main(["compiel"]) == 2


def test_light_modules_do_not_import_heavy_libraries():
    code = (
        "import sys, specbuild.cli, specbuild.plan, specbuild.recipe, specbuild.methods; "
        "heavy = [m for m in ('torch', 'transformers', 'tritonclient', 'tensorrt_llm') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
