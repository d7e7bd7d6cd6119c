"""Suites run under the harness plugin (also when invoked as plain ``pytest suites/``).

The plugin is also a ``pytest11`` entry point of the installed harness; naming it here keeps
``pytest suites/`` working where the harness is only on ``PYTHONPATH`` (or autoloading is
disabled). ``pytest suites/ --harness-regen`` rewrites changed goldens in place.
"""

pytest_plugins = ["harness.suite.plugin"]
