"""Running a test module's Triton-interpreter tests (``test_interp_*``) on CPU in a child.

Triton decides interpreter mode when its own library is imported, so a test module never
sets ``TRITON_INTERPRET`` for the pytest process (other modules would be affected): if the
interpreter is not already active in-process, the first interpreter test of a module runs
all of that module's ``interp`` tests once in a child pytest with ``TRITON_INTERPRET=1`` and
no visible GPU (``python -m pytest``, forked by :mod:`support.forkserver`, where triton is not
imported yet), and each test then reports its own outcome from there.

Use: ``_child_results, interp_test = interpreter_suite(__file__)`` at module level (the
fixture must keep that name), then decorate each ``test_interp_*`` with ``@interp_test``.
"""

import functools
import inspect
import os
import tempfile
import xml.etree.ElementTree as ET

import pytest

from .forkserver import run_module


def interpreter_active() -> bool:
    """The interpreter is on in this process (set before triton was imported)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    import triton
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(triton.language.zeros, InterpretedFunction)


def interpreter_suite(test_file: str):
    """(module-scoped fixture ``_child_results``, decorator ``interp_test``) for ``test_file``."""

    @pytest.fixture(scope="module")
    def _child_results():
        """Outcomes of the module's interpreter tests, run once in a child pytest."""
        with tempfile.TemporaryDirectory() as tmp:
            xml_path = os.path.join(tmp, "junit.xml")
            env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
            proc = run_module("pytest", test_file, "-k", "interp", "-q", "-p", "no:cacheprovider",
                              f"--junitxml={xml_path}", env=env, timeout=1200)
            if not os.path.exists(xml_path):
                raise RuntimeError(f"child pytest produced no report:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
            results = {}
            for case in ET.parse(xml_path).getroot().iter("testcase"):
                bad = case.find("failure")
                if bad is None:
                    bad = case.find("error")
                text = None if bad is None else (bad.get("message") or "") + "\n" + (bad.text or "")
                results[case.get("name")] = text
            return results

    def interp_test(fn):
        """Mark a CPU test that needs the interpreter: run it here, or report the child's outcome."""

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            request = kwargs.pop("request")
            if interpreter_active():
                return fn(*args, **kwargs)
            results = request.getfixturevalue("_child_results")
            name = request.node.name
            if name not in results:
                pytest.fail(f"{name} did not run in the interpreter child")
            if results[name] is not None:
                pytest.fail(f"in the interpreter child:\n{results[name][-6000:]}")

        sig = inspect.signature(fn)
        params = list(sig.parameters.values()) + [inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY)]
        wrapper.__signature__ = sig.replace(parameters=params)
        return wrapper

    return _child_results, interp_test
