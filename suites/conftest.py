"""Suites run under the harness plugin (also when invoked as plain ``pytest suites/``)."""

pytest_plugins = ["harness.plugin"]
