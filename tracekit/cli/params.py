"""Typed CLI parameters: choices and ranges the parser itself refuses (Typer callbacks), and the
one-line error a refused parameter prints.

Click would print a usage box; tracekit's rule is one line ``error: <option> <value>: <reason>``
(or ``error: <option>: <reason>``) on stderr and exit code 2, which :class:`OneLineErrorsGroup`
gives every command.

Typer 0.28 carries its own copy of Click (``typer._click``), older ones use Click itself: the
exception classes are taken from wherever ``typer.BadParameter`` comes from, and choices are
callbacks rather than Click parameter types, so both work.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, get_type_hints

import typer
from typer.core import TyperGroup

__all__ = ["BadValue", "OneLineErrorsGroup", "choice", "either", "int_range", "option_group", "usage_line"]

_exceptions = sys.modules[typer.BadParameter.__module__]  # click.exceptions, or Typer's copy of it
_UsageError: type[Exception] = _exceptions.UsageError
_MissingParameter: type[Exception] = _exceptions.MissingParameter
_NoArgsIsHelp: tuple[type[Exception], ...] = tuple(
    c for c in [getattr(_exceptions, "NoArgsIsHelpError", None)] if c is not None)

T = TypeVar("T")
R = TypeVar("R")


def either(words: Sequence[str]) -> str:
    """``a, b or c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


class BadValue(typer.BadParameter):
    """A refused parameter value, printed as ``error: <option> <value>: <reason>``."""

    def __init__(self, value: object, reason: str, param: Any = None, ctx: Any = None) -> None:
        super().__init__(reason, ctx=ctx, param=param)
        self.value = value


def choice(*words: str) -> Callable[[T], T]:
    """A Typer callback accepting one of ``words`` (case-sensitive), or for a repeated option each
    value one of them; anything else is refused with ``expected a, b or c``. None passes."""

    def check(value: T) -> T:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if v is not None and v not in words:
                raise BadValue(v, f"expected {either(words)}")
        return value

    return check


def int_range(low: int, high: int | None, reason: str) -> Callable[[int | None], int | None]:
    """A Typer callback refusing an integer outside ``low..high`` (``high`` None: no upper bound)
    with ``reason``; None (the option not given) passes."""

    def check(value: int | None) -> int | None:
        if value is not None and (value < low or (high is not None and value > high)):
            raise BadValue(value, reason)
        return value

    return check


def option_group(param: str, group: type[Any]) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A command decorator: the command's parameter ``param`` (typed ``group``, a NamedTuple whose
    fields are annotated with their ``typer.Option``) stands on the command line as the group's
    options, in its place and in field order; the command gets them as one ``group`` value.

    For options several commands share (``--model``, ``--tp``, ... of ingest, analyze and capture):
    declared once, the same help everywhere."""

    def decorate(command: Callable[..., R]) -> Callable[..., R]:
        sig = inspect.signature(command)
        fields = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation,
                                    default=group._field_defaults.get(name, inspect.Parameter.empty))
                  for name, annotation in get_type_hints(group, include_extras=True).items()]
        params = [p for old in sig.parameters.values() for p in (fields if old.name == param else [old])]

        @functools.wraps(command)
        def run(**options: Any) -> R:
            options[param] = group(**{name: options.pop(name) for name in group._fields})
            return command(**options)

        run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]  # what Typer reads
        run.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        return run

    return decorate


def _param_name(param: Any) -> str:
    opts = [o for o in getattr(param, "opts", []) if o.startswith("-")]
    return max(opts, key=len) if opts else str(param.human_readable_name)  # --format, not -f


def usage_line(exc: Exception) -> str:
    """The one ``error:`` line for a Click usage error."""
    param = getattr(exc, "param", None)
    if isinstance(exc, BadValue) and param is not None:
        return f"error: {_param_name(param)} {exc.value}: {exc.message}"
    if isinstance(exc, typer.BadParameter) and not isinstance(exc, _MissingParameter) and param is not None:
        return f"error: {_param_name(param)}: {exc.message}"
    return f"error: {exc.format_message()}"  # type: ignore[attr-defined]


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except _NoArgsIsHelp:  # `tracekit` alone: the help, as Click prints it
        raise
    except _UsageError as exc:
        sys.stderr.write(usage_line(exc) + "\n")
        raise typer.Exit(2) from None


class OneLineErrorsGroup(TyperGroup):
    """The ``tracekit`` command group: a usage error (an unknown option, a missing argument, a
    value its type refuses) anywhere, in the group's own arguments or a command's, prints one
    :func:`usage_line` and exits 2."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _one_line_usage_errors():
            return super().invoke(ctx)
