"""The checks of the validation suite, one module each with NAME, TITLE and run(ctx); the order they run in is
specbuild/validate/checks/order.py (this package imports none of them, so a check's helpers may be borrowed, as
validate/mix.py borrows the bad-input cases, without a circle)."""
