"""Command-line options declared once, on the fields of a config dataclass, and read back into one."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["add_options", "from_args", "option"]

C = TypeVar("C")

_OPTION = "option"


def option(
    help: str | None = None,
    *,
    flag: str | None = None,
    parse: Callable[[str], Any] | None = None,
    none_flag: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The metadata that makes a dataclass field a command-line option: `field(default=..., metadata=option(...))`.

    The flag is `--` and the field's name with dashes; argparse's type, the default and the action come from the
    field: `int`, `float`, `str` and `Path` take a value (a path stays text on the namespace), `bool` is a switch (a
    field defaulting to True needs a `flag` that turns it off), `list[str]` takes comma-separated names. A `str` or
    `Path` field without a default is a value the run must have: the option's default is None, and `from_args`
    refuses a namespace where it is still None (a command may fill it first, e.g. from a setting).

    Args:
        help: The help text; `%(default)s` in it shows the field's default.
        flag: The flag when it is not the field's name.
        parse: Makes the field's value from the option's text (`list[str]`: comma-separated names, blanks dropped).
            It runs when the config is made, so its ValueError reaches the command, not argparse.
        none_flag: (flag, help) of a switch that sets an `X | None` field to None.
    """
    return {_OPTION: True, "help": help, "flag": flag, "parse": parse, "none_flag": none_flag}


def _options(config: type[Any]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(config) if f.metadata.get(_OPTION)]


def _required(f: dataclasses.Field[Any]) -> bool:
    """Whether the field has no default: the run must give it."""
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None  # a required value (a `str` or `Path` field): `add_options` refuses any other type


def _base(hint: Any) -> Any:
    """`X` of `X | None`; any other hint as it is."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _comma_separated(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _flag(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata["flag"] or "--" + f.name.replace("_", "-"))


def _dest(flag: str) -> str:
    """The namespace attribute argparse gives a flag's value (the flag's own name), as the parser always did."""
    return flag.lstrip("-").replace("-", "_")


def add_options(parser: argparse.ArgumentParser, config: type[Any]) -> None:
    """Add an option to `parser` for each field of the dataclass `config` declared with `option()`, in field order.

    Raises:
        TypeError: a field's type has no command-line form, a switch defaulting to True names no flag, or a field
            without a default is not a `str` or `Path`.
    """
    hints = typing.get_type_hints(config)
    for f in _options(config):
        meta, default, kind, flag = f.metadata, _default(f), _base(hints[f.name]), _flag(f)
        if _required(f) and kind not in (str, Path):
            raise TypeError(f"option {f.name!r} needs a default")
        if kind is bool:
            if default and not meta["flag"]:
                raise TypeError(f"switch {f.name!r} defaults to True: name the `flag` that turns it off")
            parser.add_argument(flag, action="store_true", help=meta["help"])
        elif typing.get_origin(kind) is list:
            parser.add_argument(flag, default=",".join(default), help=meta["help"])
        elif kind in (str, Path):  # a path stays text on the namespace, as argparse gives it; the config holds a Path
            parser.add_argument(flag, default=None if default is None else str(default), help=meta["help"])
        elif kind in (int, float):
            parser.add_argument(flag, type=kind, default=default, help=meta["help"])
        else:
            raise TypeError(f"option {f.name!r}: no command-line form for {kind!r}")
        if meta["none_flag"]:
            none, none_help = meta["none_flag"]
            parser.add_argument(none, action="store_true", help=none_help)


def from_args(config: type[C], args: argparse.Namespace, **values: Any) -> C:
    """The config made from the options `add_options` added (and `values`, for fields that are not options).

    Raises:
        ValueError: a field's `parse` refused the option's text, or a field without a default has no value.
    """
    hints = typing.get_type_hints(config)
    for f in _options(config):
        value, kind = getattr(args, _dest(_flag(f))), _base(hints[f.name])
        if value is None and _required(f):
            raise ValueError(f"{_flag(f)} is required")
        if f.metadata["none_flag"] and getattr(args, _dest(f.metadata["none_flag"][0])):
            value = None
        elif kind is bool:
            value = value != _default(f)  # the switch turns the default over
        elif f.metadata["parse"] is not None:
            value = f.metadata["parse"](value)
        elif typing.get_origin(kind) is list:
            value = _comma_separated(value)
        elif kind is Path and value is not None:
            value = Path(value)
        values[f.name] = value
    return config(**values)
