"""Engine tests (a package, so this directory's conftest never shadows another directory's `conftest` module)."""
