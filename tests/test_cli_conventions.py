"""Command-line conventions (issue 24, item 5): no prefix matching, a subcommand's own usage on
its errors with a "did you mean", a --help that says the default suite set, mutate's --list,
--mb-src and -q."""

from __future__ import annotations

import pytest

from harness import cli
from harness.mutations import load_catalogue
from harness.suiterun import runner


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


def test_a_prefix_is_no_option_and_the_near_miss_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """``--suites packing_algorithms`` was silently taken as ``--suites-dir``."""
    err = _fails(capsys, ["run", "--suites", "packing_algorithms"])
    assert "harness run: error: unrecognized arguments: --suites packing_algorithms" in err
    assert "did you mean --suite or --suites-dir?" in err


def test_a_subcommands_error_shows_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    err = _fails(capsys, ["fixtures", "record", "--yess"])
    assert err.startswith("usage: harness fixtures record") and "did you mean --yes?" in err


def test_help_says_the_default_suite_set(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default every golden suite: " + ", ".join(runner.golden_suites()) + ";" in text
    assert "also available: upstream" in text


def test_mutate_lists_its_catalogue_and_takes_a_source_tree(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert cli.main(["mutate", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [f.id for f in load_catalogue()]
    assert cli.main(["mutate", "--mb-src", str(tmp_path), "--fault", "fix_all", "-q"]) == 2
    assert "no megatron/bridge package under it" in capsys.readouterr().err
