"""Option defaults from ./harness.toml or [tool.harness] in ./pyproject.toml: the same option
means the same everywhere, flags win, and a wrong key or value is a one-line error."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness import cli, config
from harness.errors import UsageError


def parse(tmp_path: Path, argv: list[str]) -> argparse.Namespace:
    parser = cli.build_parser()
    applied = config.apply(parser, config.load(tmp_path))
    return applied.finish(parser.parse_args(argv))


PYPROJECT = """
[project]
name = "my-nightly"

[tool.harness]
jobs = 2
timeout = 900
cache-dir = "~/scratch/harness-cache"
mb_src = "/src/Megatron-Bridge"

[tool.harness.nightly]
auto-bisect = true
repo = "/src/Megatron-Bridge"
suite = ["packing_algorithms", "forward_cpu"]
"""


def test_no_file_changes_nothing(tmp_path: Path) -> None:
    args = parse(tmp_path, ["run"])
    assert args.jobs == 1 and args.timeout == 1800.0 and args.cache_dir is None and args.suite is None


def test_pyproject_defaults_apply_to_every_command_that_has_the_option(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    run = parse(tmp_path, ["run"])
    assert (run.jobs, run.timeout, run.mb_src) == (2, 900.0, "/src/Megatron-Bridge")
    assert run.cache_dir == Path.home() / "scratch" / "harness-cache"
    assert run.suite is None, "[nightly] is the nightly's only"
    night = parse(tmp_path, ["nightly"])
    assert night.auto_bisect is True and night.repo == Path("/src/Megatron-Bridge") and night.jobs == 2
    assert night.suite == ["packing_algorithms", "forward_cpu"]
    bisect = parse(tmp_path, ["bisect", "a..b", "--repo", "."])
    assert bisect.timeout == 900.0 and bisect.jobs == 2 and bisect.suite is None
    assert parse(tmp_path, ["fixtures", "verify"]).fixtures is None


def test_flags_win(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    night = parse(tmp_path, ["nightly", "-j", "4", "--timeout", "60", "--suite", "cp_constraints"])
    assert (night.jobs, night.timeout) == (4, 60.0)
    assert night.suite == ["cp_constraints"], "a repeatable flag replaces the configured list"
    night = parse(tmp_path, ["nightly", "--suite", "packing_algorithms"])
    assert night.suite == ["packing_algorithms"]


def test_a_flag_turns_off_the_configured_option_it_excludes(tmp_path: Path) -> None:
    (tmp_path / "harness.toml").write_text("quiet = true\n")
    assert parse(tmp_path, ["run"]).quiet is True
    run = parse(tmp_path, ["run", "-v"])
    assert run.verbose is True and run.quiet is False, "-v on the command line wins over quiet = true"


def test_harness_toml_comes_first(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "harness.toml").write_text('jobs = 3\n\n[run]\nimport = "light"\nallow-changed = true\n')
    run = parse(tmp_path, ["run"])
    assert run.jobs == 3 and run.timeout == 1800.0, "pyproject.toml is not read when harness.toml exists"
    assert run.import_mode == "light" and run.allow_changed is True


@pytest.mark.parametrize(
    "text, message",
    [
        ("jbos = 2", "harness.toml: unknown key 'jbos' (no command has --jbos)"),
        ("[run]\nrepo = '/x'", "harness.toml: unknown key 'repo' in [run] ('harness run' has no --repo)"),
        ("[nigthly]\njobs = 2", "harness.toml: unknown table [nigthly]; commands: "),
        ("jobs = 0", "harness.toml: jobs: must be at least 1, not 0"),
        ("timeout = 'soon'", "harness.toml: timeout: not a number of seconds: 'soon'"),
        ("[nightly]\nauto-bisect = 'yes'", "harness.toml: [nightly] auto-bisect: expected true or false, not 'yes'"),
        ("[run]\nimport = 'heavy'", "harness.toml: [run] import: 'heavy' is not one of auto, light, full"),
        ("yes = true", "harness.toml: unknown key 'yes'"),
        ("jobs = [1, 2]", "harness.toml: jobs: expected a single value"),
        ("jobs = ", "harness.toml: not valid TOML"),
    ],
)
def test_a_wrong_key_or_value_is_one_line(tmp_path: Path, monkeypatch, capsys, text: str, message: str) -> None:
    (tmp_path / "harness.toml").write_text(text + "\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["fixtures", "verify"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error: ") and message in err[0], err


def test_pyproject_without_a_harness_table_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.ruff]\nline-length = 100\n')
    assert config.load(tmp_path) == config.HarnessConfig()


@dataclass(frozen=True)
class Slurm:
    """What a concern's typed record looks like (the SLURM integration defines its own)."""

    partition: str = "batch"
    nodes: int = 1
    time_limit_min: float = 60.0
    workdir: Path | None = None
    extra: list[str] = field(default_factory=list)


def test_a_concern_reads_its_own_table_as_a_typed_record(tmp_path: Path) -> None:
    (tmp_path / "harness.toml").write_text(
        'jobs = 2\n[slurm]\npartition = "gpu"\ntime-limit-min = 30\nworkdir = "~/w"\nextra = ["--exclusive"]\n'
    )
    cfg = config.load(tmp_path)
    slurm = cfg.section("slurm", Slurm)
    assert slurm == Slurm("gpu", 1, 30.0, Path.home() / "w", ["--exclusive"])
    assert parse(tmp_path, ["run"]).jobs == 2, "a section is no command table"
    assert config.HarnessConfig().section("slurm", Slurm) == Slurm(), "no table: the record's defaults"


@pytest.mark.parametrize(
    "text, message",
    [
        ("[slurm]\npartitoin = 'gpu'", "unknown key 'partitoin' in [slurm]; known: extra, nodes, partition"),
        ("[slurm]\nnodes = 'two'", "[slurm] nodes: expected int, not 'two'"),
        ("[slurm]\nextra = '--exclusive'", "[slurm] extra: expected a list"),
    ],
)
def test_a_concerns_wrong_key_or_type_is_a_usage_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "harness.toml").write_text(text + "\n")
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config.load(tmp_path).section("slurm", Slurm)


def test_a_run_takes_its_goldens_from_the_configuration(tmp_path: Path, monkeypatch, capsys) -> None:
    """End to end through main(): a configured --fixtures reaches the command (here: verify)."""
    fixtures = tmp_path / "goldens"
    (fixtures / "s").mkdir(parents=True)
    (tmp_path / "harness.toml").write_text(f'fixtures = "{fixtures}"\n')
    monkeypatch.chdir(tmp_path)
    assert cli.main(["fixtures", "verify"]) == 1
    assert f"no golden files under {fixtures}" in capsys.readouterr().err


def test_shared_options_mean_the_same_everywhere() -> None:
    """-j, --timeout, --cache-dir, -q/-v, --fixtures: one definition (commands/_args.py), so one
    type, one destination and one configuration key wherever a command has them."""
    commands = config._commands(cli.build_parser())
    for flag in ("--jobs", "--timeout", "--cache-dir", "--quiet", "--verbose", "--fixtures", "--suites-dir"):
        having = {path: a for path, sub in commands.items() for a in sub._actions if flag in a.option_strings}
        assert len(having) >= 3, (flag, sorted(having))
        assert len({(a.dest, a.type, a.nargs, type(a)) for a in having.values()}) == 1, (flag, sorted(having))
    suite_commands = ("run", "nightly", "bisect", "fixtures record")
    for path in suite_commands:
        flags = {f for a in commands[path]._actions for f in a.option_strings}
        assert {"-j", "--timeout", "-q", "--suites-dir", "--fixtures", "--suite"} <= flags, path


def test_the_config_file_in_use_is_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24: defaults that came from a file are named, as pytest prints ``configfile:``."""
    (tmp_path / "harness.toml").write_text("[compare]\n")
    monkeypatch.chdir(tmp_path)
    cli.main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")])  # fails: no such runs
    assert f"harness: configfile: {tmp_path / 'harness.toml'}" in capsys.readouterr().err
    (tmp_path / "harness.toml").unlink()
    cli.main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert "configfile" not in capsys.readouterr().err
