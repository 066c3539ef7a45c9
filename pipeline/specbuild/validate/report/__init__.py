"""Exports of a validation result (the third piece: stats -> aggregate -> report): report.json, junit.xml,
report.md, PNG plots, and the rich tables printed on the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specbuild.files import atomic
from specbuild.validate.report.json_report import write_json
from specbuild.validate.report.junit import write_junit
from specbuild.validate.report.markdown import write_markdown
from specbuild.validate.report.plots import write_plots

if TYPE_CHECKING:
    from specbuild.validate.result import ValidationResult


def write_reports(result: ValidationResult, folder: Path) -> list[Path]:
    """Write every report file into `folder`, atomically (specbuild.files.atomic): an older report there is replaced,
    its server logs (*.log, written beside it by `compile`) are kept. Returns the final paths."""
    folder = Path(folder).absolute()
    with atomic.atomic_folder(folder, carry=("*.log",)) as partial:
        plots = write_plots(result, partial)
        names = [
            write_json(result, partial),
            write_junit(result, partial),
            write_markdown(result, partial, [p.name for p in plots]),
        ] + plots
    return [folder / p.name for p in names]
