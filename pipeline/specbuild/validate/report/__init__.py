"""Exports of a validation result (the third piece: stats -> aggregate -> report): report.json, junit.xml,
report.md, PNG plots, and the rich tables printed on the terminal."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specbuild.validate.suite import ValidationResult


def write_reports(result: ValidationResult, folder: Path) -> list[Path]:
    """Write every report file into `folder`, atomically: a sibling `.<name>.partial-<pid>` folder is filled and
    then renamed into place (an older report there is replaced). Returns the final paths."""
    from specbuild.validate.report.json_report import write_json
    from specbuild.validate.report.junit import write_junit
    from specbuild.validate.report.markdown import write_markdown
    from specbuild.validate.report.plots import write_plots

    folder = Path(folder).absolute()
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = folder.parent / f".{folder.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        plots = write_plots(result, partial)
        names = [write_json(result, partial), write_junit(result, partial),
                 write_markdown(result, partial, [p.name for p in plots])] + plots
        if folder.exists():
            old = folder.parent / f".{folder.name}.old-{os.getpid()}"
            os.replace(folder, old)
            os.replace(partial, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(partial, folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return [folder / p.name for p in names]
