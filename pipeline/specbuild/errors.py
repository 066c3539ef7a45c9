"""Errors a user can cause and fix. The CLI prints them without a traceback and exits 2."""

from __future__ import annotations

from dataclasses import dataclass


class UserError(Exception):
    """A problem the user can fix: bad recipe, missing file, wrong version, bad request.

    The message must name the file, field or value at fault and say what to do.
    """

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One located problem in a recipe: `file:line:col: field: message`."""

    file: str
    line: int | None
    col: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.col is not None:
                where += f":{self.col}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class RecipeError(UserError):
    """One or more problems found while loading or checking a recipe."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
