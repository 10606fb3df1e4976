"""Stand-in of ``tensorrt_llm.logger.logger``.

Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/logger.py, ``logger`` (info/warning/info_once/debug).
Records every message in ``RECORDS`` so the suite can read what TensorRT-LLM would log.
"""

RECORDS: list = []


class _Logger:
    def _log(self, level, msg, *args, **kwargs):
        RECORDS.append((level, (msg % args) if args else str(msg)))

    def info(self, msg, *a, **k):
        self._log("info", msg, *a)

    def info_once(self, msg, *a, key=None, **k):
        self._log("info", msg, *a)

    def warning(self, msg, *a, **k):
        self._log("warning", msg, *a)

    def debug(self, msg, *a, **k):
        self._log("debug", msg, *a)

    def error(self, msg, *a, **k):
        self._log("error", msg, *a)


logger = _Logger()
