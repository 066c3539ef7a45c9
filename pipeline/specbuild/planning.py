"""The whole plan of a resolved recipe: the plan's steps (specbuild.plan) with the step that writes its deployment
bundle (specbuild.deploy), composed here, above both, so that the plan does not reach the deploy package.

    plan = plan_build(build, layout)    # what `specbuild plan` prints and `specbuild compile` executes
"""

from __future__ import annotations

from specbuild.deploy.bundle import deploy_step
from specbuild.plan import Layout, Plan, make_plan
from specbuild.runtimes.build import Build


def plan_build(build: Build, layout: Layout) -> Plan:
    return make_plan(build, layout, deploy_step(build, layout))


__all__ = ["plan_build"]
