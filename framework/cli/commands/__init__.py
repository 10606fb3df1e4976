"""The ``draftsmith`` commands, one module each, each with ``run(opts, spec, path) -> exit code``.

:data:`draftsmith.framework.cli.main.COMMANDS` names them (``"module:function"``); a command's
module, and the stages it imports, load only when that command runs.
"""
