"""Model flags for click commands, generated from ubepsim.model.params.PARAMS (one name per
concept)."""

from __future__ import annotations

from typing import Any, Callable

import click

from ..errors import InputError
from ..model.params import (GATED, PARAM_BY_NAME, PARAMS, TUNED, coerce, default_sync,
                             make_config)
from ..model.profile import load_profile


def warn_about(dataset: str) -> None:
    """What `scan` leaves out of a sweep's directory (stray files, missing rows), on stderr:
    an answer over part of a dataset must not look like one over all of it."""
    from ..sweep.engine import shortfall

    for warning in shortfall(dataset):
        click.echo(f"warning: {warning}", err=True)


def model_options(lists: tuple[str, ...] = (), hidden: tuple[str, ...] = ()) -> Callable:
    """Add one flag per model parameter, plus --profile. Flags named in `lists` take
    comma-separated values; those in `hidden` stay out of --help (a command that sets the
    parameter itself still takes them, to say why it refuses them). Values arrive as strings
    and are checked by `parse_value`, so a bad one is reported with its flag and what is
    allowed."""
    def decorate(f: Callable) -> Callable:
        for p in reversed(PARAMS):
            help_text = p.described
            if p.choices:
                help_text += f" [{'|'.join(p.choices)}]"
            if p.default is not None and p.stated_default is None:   # else its help says it
                help_text += f" (default: {'none' if p.default == '' else p.default})"
            if p.name in lists:
                help_text += " Comma-separated list allowed."
            f = click.option(p.flag, p.name, type=str, default=None, metavar=_metavar(p),
                             help=help_text, hidden=p.name in hidden)(f)
        f = click.option("--profile", "profile", default="cm384", metavar="NAME|FILE.toml",
                         help="Hardware profile: built-in name or a TOML file with [hardware] "
                              "(default: cm384).")(f)
        return f
    return decorate


def _metavar(p) -> str:
    if p.choices:
        return "NAME"
    if p.tunable:
        return f"INT|{TUNED}"
    return {int: "INT", float: "NUM", list: "INT,INT,..."}.get(p.kind, "FILE")


def parse_value(name: str, text: str) -> Any:
    """A flag's text as the parameter's type, within its bounds; InputError names the flag on
    failure. (Names stay text: make_config checks them against the choices.)"""
    p = PARAM_BY_NAME[name]
    try:
        if p.kind is int:
            return coerce(name, int(text))
        if p.kind is float:
            return coerce(name, float(text))
    except ValueError as e:
        if isinstance(e, InputError):
            raise
        if p.tunable:   # "tuned" as written (make_config reads it), or what it takes
            coerce(name, text.strip())
            return text.strip()
        kind = "an integer" if p.kind is int else "a number"
        raise InputError(name, f"expected {kind}, got {text!r}") from None
    return text


def config_from_flags(values: dict[str, Any]):
    """(Config, Profile) from the values of model_options flags; InputError on bad input."""
    profile = load_profile(values.pop("profile"), key="--profile")
    given = {k: parse_value(k, v) for k, v in values.items() if v is not None}
    config = make_config(given, profile.cores, sync_default=default_sync(profile))
    written = config.as_dict()   # each value as a flag gives it
    for name, gate in GATED.items():
        shown = written[name]
        if name in given and given[name] != shown:
            here = " ".join(f"{PARAM_BY_NAME[g].flag} {getattr(config, g).name}"
                            for g in gate.gates)
            recorded = f"at its default, {shown}" if PARAM_BY_NAME[name].unread is None \
                else f"as {shown}"
            click.echo(f"note: {PARAM_BY_NAME[name].flag} is not read under {here} (only where "
                       f"{gate.says()}); recorded {recorded}", err=True)
    return config, profile


WORKERS = "--workers"   # threads of the parallel kernel, in every command that runs it


def workers_option(extra: str = "") -> Callable:
    """--workers, bound to the `threads` argument; `extra` adds what it means beside."""
    return click.option(WORKERS, "threads", type=int, default=None,
                        help=f"Threads of the parallel kernel (default: all cores){extra}.")


def check_threads(flag: str, threads: int | None) -> int | None:
    """A thread count for the parallel kernel: at least 1, at most what Numba may use here."""
    if threads is None:
        return None
    import numba

    top = numba.config.NUMBA_NUM_THREADS
    if not 1 <= threads <= top:
        raise InputError(flag, f"must lie in [1, {top}] (the threads Numba may use; set "
                         f"NUMBA_NUM_THREADS for more), got {threads}")
    return threads


def split_list(flag: str, text: str, example: str = "1,2,4") -> list[str]:
    """A comma-separated flag value as its items, stripped; InputError on an empty item."""
    items = [x.strip() for x in text.split(",")]
    if any(not x for x in items):
        raise InputError(flag, f"expected comma-separated values such as {example}, got "
                         f"{text!r}")
    return items


def list_values(name: str, text: str) -> list[Any]:
    """A model flag given as a comma-separated list: each item as the parameter's type."""
    return [parse_value(name, x) for x in split_list(name, text)]


class CheckFailed(click.ClickException):
    """A check the user asked for did not hold (`calibrate --check`, `validate --strict`):
    exit code 1, with its message."""

    exit_code = 1
