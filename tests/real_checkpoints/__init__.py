"""Shape-real, sparse copies of public checkpoints for the test suite (see builder.py)."""
