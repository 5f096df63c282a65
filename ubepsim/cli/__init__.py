"""The `ubepsim` command: one root group (group.py), one thin module per command.

`main` runs click with standalone_mode=False so that every usage error and every InputError
(bad parameter, grid, profile or trace; configurations the machine's memory cannot hold) exits
with code 2 and one message, Ctrl-C with 130, a failed check (`validate --strict`,
`calibrate --check`) or a sweep that cannot go on (its Dask cluster lost, a part that cannot be
written) with 1, and anything else with 3. A bare `ubepsim` prints the help, as `ubepsim
--help` does, and exits with 0.
"""

from __future__ import annotations

import sys

import click

from ..errors import InputError, renamed
from .group import cli


def _register() -> None:
    """Each command's module adds its command to `cli` as it is imported. One that fails to
    import fails every command (exit 3, naming the error) rather than vanish from --help."""
    from . import calibrate, plot, query, run, sweep, tune, validate  # noqa: F401


def _with_flag(e: InputError) -> str:
    """The message, with the CLI flag beside a parameter name."""
    from ..model.params import PARAM_BY_NAME
    if e.key in PARAM_BY_NAME and not e.source:
        return f"{e.key} ({PARAM_BY_NAME[e.key].flag}): {str(e).split(': ', 1)[1]}"
    if e.key == "threads":   # the model's argument, which every command sets with --workers
        return f"{e.key} (--workers): {str(e).split(': ', 1)[1]}"
    return str(e)


# click 8.2+ reports a bare `ubepsim` (no_args_is_help) as this usage error, whose message is
# the whole help; click 8.1 printed the help itself and exited 0. Absent there: catch nothing.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv: list[str] | None = None) -> int:
    try:
        _register()
        cli.main(args=argv, prog_name="ubepsim", standalone_mode=False)
    except InputError as e:
        click.echo(f"error: {_with_flag(e)}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except _NO_ARGS_IS_HELP as e:  # asking for nothing is asking for help, as --help gets it
        click.echo(e.ctx.get_help(), color=e.ctx.color)
        return 0
    except click.UsageError as e:  # click's own checks: one line too, like an InputError
        where = f" (see `{e.ctx.command_path} --help`)" if e.ctx else ""
        old = renamed(e.option_name) if isinstance(e, click.NoSuchOption) else ""
        click.echo(f"error: {' '.join(e.format_message().split())}{old}{where}", err=True)
        return 2
    except click.ClickException as e:   # CheckFailed: a check asked for did not hold
        click.echo(f"error: {e.format_message()}", err=True)
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except Exception as e:  # noqa: BLE001 - the documented contract: anything else exits 3
        click.echo(f"internal error: {type(e).__name__}: {e}", err=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
