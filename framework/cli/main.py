"""``draftsmith <command> key=value ...``: compose with Hydra, call one library function.

This module parses and dispatches only: a command's options are parsed by the key table
(:mod:`.keys`) and composed with its adapter (:mod:`.compose`); the command itself is
:data:`COMMANDS`' ``"module:function"`` in :mod:`.commands`, loaded when it runs (so
``--version``, ``help``, ``adapters``, ``schema`` and ``docs`` never import torch).

Exit codes: 0 ok; 1 ``inspect`` found an incomplete checkpoint (or ``docs check=true``
found stale docs); 2 bad input (one line per problem, no traceback).
"""

from __future__ import annotations

import difflib
import os
import sys

from ... import __version__
from ...registry import load
from ..errors import IncompleteCheckpoint, UserError
from ..io.publish import install_signal_handlers
from ..shown import shown
from .compose import compose
from .keys import COMMANDS as KEY_TABLE, command_help, usage

#: Command -> its ``run(opts, spec, path) -> exit code`` as ``"module:function"`` under
#: ``draftsmith.framework``, imported when the command runs (:func:`draftsmith.registry.load`):
#: the command line's own in :mod:`.commands`, ``docs`` in the docs stage (above the command line).
COMMANDS: dict[str, str] = {
    **{name: f"cli.commands.{name}:run" for name in
       ("synth", "inspect", "convert", "draft", "eval", "emit", "init", "schema", "adapters")},
    "docs": "docs.command:run",
}


def command(name: str):
    """The function that runs command ``name`` (imports its module and the stages it uses)."""
    return load(__package__.rpartition(".")[0], COMMANDS[name])


def set_threads(threads) -> None:
    """``threads=N``: torch intra-op threads (outputs are bit-identical for any N), at most
    the CPUs this process may run on (a huge pool crashes the OpenMP runtime)."""
    if threads is not None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if threads > cpus:
            raise UserError(f"threads={threads}: more than the {cpus} CPU(s) this process may use")
        import torch  # only a command that needs torch takes threads=

        torch.set_num_threads(threads)


def _help(argv: list[str]) -> int | None:
    """``help``, ``-h``, ``--help``, ``--version``, ``COMMAND --help``: print and return the
    exit code; None when ``argv`` asks for none of them."""
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    first = argv[0]
    if first == "--version":
        print(f"draftsmith {__version__}")
        return 0
    if first in ("-h", "--help", "help"):
        if len(argv) > 1 and first == "help" and argv[1] not in ("-h", "--help"):
            if argv[1] not in KEY_TABLE:
                return _unknown_command(argv[1])
            print(command_help(argv[1]))
        else:
            print(usage())
        return 0
    if first in KEY_TABLE and any(a in ("-h", "--help") for a in argv[1:]):
        print(command_help(first))
        return 0
    return None


def _unknown_command(command: str) -> int:
    close = difflib.get_close_matches(command, KEY_TABLE, n=1)
    print(f"error: unknown command {command!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
          + f"; commands: {', '.join(KEY_TABLE)} (`draftsmith help`)", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """The ``draftsmith`` entry point; output piped into a reader that stops early (``| head``)
    ends quietly instead of with a BrokenPipeError traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's exit flush must not raise again
        return 0


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    code = _help(argv)
    if code is not None:
        return code
    name, args = argv[0], argv[1:]
    if name not in COMMANDS:
        return _unknown_command(name)
    install_signal_handlers()  # SIGTERM/SIGHUP clean up like Ctrl-C
    for stream in (sys.stdout, sys.stderr):  # a lone surrogate that still reaches a print is escaped, not a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        opts, spec, path = compose(name, args)
        set_threads(opts.get("threads"))
        return command(name)(opts, spec, path) or 0
    except IncompleteCheckpoint as e:
        for p in e.problems:
            print(shown(p))
        return 1
    except UserError as e:
        for p in e.problems:  # one line per problem, always: names from files are escaped
            print(f"error: {shown(p)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"interrupted{f' ({e})' if str(e) else ''}", file=sys.stderr)
        return getattr(e, "exit_code", 130)
    except BrokenPipeError:  # the reader of our output stopped early: main() ends quietly
        raise
    except OSError as e:  # the environment refused: read-only or missing parent, disk full, ulimit -f
        where = e.filename or "draftsmith"
        print(f"error: {shown(where)}: {shown(e.strerror or e)}", file=sys.stderr)
        return 2
    except RecursionError:
        print("error: input nested too deeply", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
