"""Deployment bundles: Kubernetes manifests and a Slurm script for a compiled repository, validated offline.

    from specbuild.deploy.bundle import write_bundle, deploy_step   # compile / plan (specbuild.planning)
    from specbuild.deploy.checks import deploy_findings             # specbuild check
    from specbuild.deploy.bundle_check import validate_bundle       # strict schema + cross-checks

The recipe's `deploy` section itself is specbuild.recipe.deploy.
"""
