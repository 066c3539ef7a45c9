"""Child processes that never outlive specbuild, their watchdog, and SIGTERM turned into clean-up."""
