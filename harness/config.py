"""Defaults for command-line options (and settings of concerns like SLURM) from a configuration file.

Read from the nearest directory, the current one or a parent, that has ``harness.toml`` (its
top level is the harness table; ``[tool.harness]`` in it works too, so a pyproject snippet can
be copied as is) or a ``pyproject.toml`` with ``[tool.harness]``; ``harness.toml`` wins in a
directory that has both. None found: no defaults. So a nightly does not repeat ten flags::

    [tool.harness]                    # every command that has the option
    mb-src = "~/Megatron-Bridge"
    jobs = 2
    timeout = 900
    cache-dir = "/scratch/harness-cache"

    [tool.harness.nightly]            # one command (fixtures: record and verify)
    auto-bisect = true
    repo = "~/Megatron-Bridge"
    suite = ["packing_algorithms", "forward_cpu"]

    [tool.harness.slurm]              # a concern of its own, read with HarnessConfig.section()
    partition = "batch"

Keys are the long options without the dashes in front (``cache-dir``; ``cache_dir`` too). A value
goes through the option's own type and checks (``jobs = 0`` fails as ``-j 0`` would). Flags
given on the command line win; a repeatable option's list (``suite``) is replaced, not extended,
by the flags. An unknown key, a top-level key no command has, or a value of the wrong type is a
one-line usage error naming the file and the key.

A concern that is not a command option (SLURM submission...) gets a sub-table and a typed
record: list its name in :data:`SECTIONS`, then ``load().section("slurm", SlurmOptions)``
turns ``[tool.harness.slurm]`` into that dataclass, with the same one-line errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.errors import UsageError

#: Sub-tables that configure a concern rather than a command (read through ``section``).
SECTIONS = ("slurm",)
#: Options that never come from a file: one-off answers, not settings.
NOT_CONFIGURABLE = frozenset({"help", "version", "yes"})

T = TypeVar("T")


@dataclass(frozen=True)
class HarnessConfig:
    """What the configuration file says (empty when there is none)."""

    source: str = ""  # ".../harness.toml" or ".../pyproject.toml [tool.harness]", for messages
    options: dict[str, object] = field(default_factory=dict)  # top level: every command with the option
    commands: dict[str, dict[str, object]] = field(default_factory=dict)  # [tool.harness.<command>]
    sections: dict[str, dict[str, object]] = field(default_factory=dict)  # [tool.harness.<concern>]

    def section(self, name: str, record: type[T], **overrides: object) -> T:
        """``[tool.harness.<name>]`` as the dataclass ``record`` (its defaults where absent), with
        ``overrides`` (the command line's flags; None: not given) over the file."""
        if name not in SECTIONS:
            raise ValueError(f"{name!r} is not a configuration section (add it to config.SECTIONS)")
        table = self.sections.get(name, {})
        hints = typing.get_type_hints(record)
        fields = {f.name for f in dataclasses.fields(record)}  # type: ignore[arg-type]
        values: dict[str, object] = {}
        for key, value in table.items():
            attr = key.replace("-", "_")
            if attr not in fields:
                raise UsageError(f"{self.source}: unknown key {key!r} in [{name}]; known: {', '.join(sorted(fields))}")
            values[attr] = _coerce(value, hints[attr], f"{self.source}: [{name}] {key}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return record(**values)


def _coerce(value: object, hint: object, where: str) -> object:
    """A TOML value as the record field's type (str, int, float, bool, Path, their lists, optionals)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in (a for a in args if a is not type(None)):
            return _coerce(value, arg, where)
    if origin is tuple and args and typing.get_origin(args[0]) is tuple:  # pairs: a table of name = value
        if not isinstance(value, dict):
            raise UsageError(f"{where}: expected a table of name = value, not {value!r}")
        return tuple((str(k), str(v)) for k, v in value.items())
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise UsageError(f"{where}: expected a list, not {value!r}")
        items = [_coerce(v, args[0] if args else Any, where) for v in value]
        return items if origin is list else tuple(items)
    if hint is Path:
        if not isinstance(value, str):
            raise UsageError(f"{where}: expected a path, not {value!r}")
        return Path(value).expanduser()
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (str, int, float, bool) and (type(value) is not hint):
        raise UsageError(f"{where}: expected {hint.__name__}, not {value!r}")
    return value


def load(directory: Path | None = None) -> HarnessConfig:
    """The configuration that applies in ``directory`` (default: the current one): the nearest
    directory upwards with a ``harness.toml`` or a ``pyproject.toml`` that has ``[tool.harness]``."""
    start = Path.cwd() if directory is None else directory
    for folder in [start, *start.parents]:
        own, project = folder / "harness.toml", folder / "pyproject.toml"
        if own.is_file():
            doc = _read(own)
            tool = doc.pop("tool", None)
            if isinstance(tool, dict) and isinstance(tool.get("harness"), dict):
                doc.update(tool["harness"])
            elif tool is not None:
                doc["tool"] = tool  # reported as an unknown table
            return _split(doc, str(own))
        if project.is_file():
            tool = _read(project).get("tool", {})
            if isinstance(tool, dict) and isinstance(tool.get("harness"), dict):
                return _split(tool["harness"], f"{project} [tool.harness]")
    return HarnessConfig()


def _read(path: Path) -> dict[str, object]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None


def _split(table: dict[str, object], source: str) -> HarnessConfig:
    options: dict[str, object] = {}
    commands: dict[str, dict[str, object]] = {}
    sections: dict[str, dict[str, object]] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            if key in SECTIONS:
                sections[key] = value
            else:
                commands[key] = value  # checked against the parser in apply()
        else:
            options[key] = value
    return HarnessConfig(source, options, commands, sections)


# ------------------------------------------------------------------------------ the parser side


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its path: "run", "fixtures record"..."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}".strip()
                found[path] = sub
                found.update(_commands(sub, path))
    return found


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Configurable options of one parser, keyed by the long name without its dashes."""
    out = {}
    for action in parser._actions:
        for flag in action.option_strings:
            name = flag[2:]
            if flag.startswith("--") and name not in NOT_CONFIGURABLE:
                out[name] = action
    return out


def _value(action: argparse.Action, value: object, where: str) -> Any:
    """A TOML value through the option's own conversion and checks, as argparse would apply them."""
    if action.nargs == 0:  # store_true / store_false / store_const
        if not isinstance(value, bool):
            raise UsageError(f"{where}: expected true or false, not {value!r}")
        return action.const if value else action.default
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        return [_one(action, v, where) for v in items]
    return _one(action, value, where)


def _one(action: argparse.Action, value: object, where: str) -> object:
    if isinstance(value, (dict, list, bool)):
        raise UsageError(f"{where}: expected a single value, not {value!r}")
    convert = action.type if callable(action.type) else str
    try:
        converted = convert(str(value))
    except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from None
    if isinstance(converted, Path):
        converted = converted.expanduser()
    if action.choices is not None and converted not in action.choices:
        raise UsageError(f"{where}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return converted


@dataclass
class Applied:
    """The defaults a configuration set, kept to give command-line flags the last word."""

    appended: dict[str, list[object]] = field(default_factory=dict)  # dest -> the configured list
    # a configured option of a mutually exclusive group, its own default, the group's other options
    exclusive: list[tuple[argparse.Action, Any, list[argparse.Action]]] = field(default_factory=list)

    def finish(self, args: argparse.Namespace) -> argparse.Namespace:
        """A repeatable option given on the command line replaces the configured list (argparse
        appends to its default); an option given on the command line turns off the configured
        value of the options it excludes (``-v`` on the command line, ``quiet = true`` configured)."""
        for dest, configured in self.appended.items():
            given = getattr(args, dest, None)
            if isinstance(given, list) and len(given) > len(configured) and given[: len(configured)] == configured:
                setattr(args, dest, given[len(configured) :])
        for action, original, others in self.exclusive:
            if any(hasattr(args, o.dest) and getattr(args, o.dest) != o.default for o in others):
                setattr(args, action.dest, original)
        return args


def apply(parser: argparse.ArgumentParser, config: HarnessConfig) -> Applied:
    """Set the configured values as the defaults of every command that has the option."""
    applied = Applied()
    commands = _commands(parser)
    by_command = {path: _options(sub) for path, sub in commands.items()}
    known = set().union(*by_command.values()) if by_command else set()
    top_level = {k.replace("_", "-"): v for k, v in config.options.items()}
    for key in top_level:
        if key not in known:
            raise UsageError(f"{config.source}: unknown key {key!r} (no command has --{key})")
    for name, table in config.commands.items():
        targets = [p for p in commands if p == name or p.startswith(name + " ")]
        if not targets:
            raise UsageError(
                f"{config.source}: unknown table [{name}]; commands: {', '.join(sorted(commands))}; "
                f"sections: {', '.join(SECTIONS)}"
            )
        for key in table:
            flag = key.replace("_", "-")
            if not any(flag in by_command[p] for p in targets):
                raise UsageError(f"{config.source}: unknown key {key!r} in [{name}] ('harness {name}' has no --{flag})")
    for path, options in by_command.items():
        own = {k.replace("_", "-"): v for k, v in _own_table(config, path).items()}
        groups = {a: g._group_actions for g in commands[path]._mutually_exclusive_groups for a in g._group_actions}
        for key, value in {**top_level, **own}.items():
            action = options.get(key)
            if action is None:
                continue
            where = f"{config.source}: {key}" if key not in own else f"{config.source}: [{path.split()[0]}] {key}"
            default = _value(action, value, where)
            if action in groups:
                applied.exclusive.append((action, action.default, [a for a in groups[action] if a is not action]))
            action.default = default
            if isinstance(action, argparse._AppendAction):
                applied.appended[action.dest] = default
    return applied


def _own_table(config: HarnessConfig, path: str) -> dict[str, object]:
    """``[tool.harness.<command>]`` for a command path ("fixtures record" reads [fixtures])."""
    return config.commands.get(path.split()[0], {})
