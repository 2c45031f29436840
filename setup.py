"""Build of tracekit's one native module; everything else is in pyproject.toml.

``tracekit.parsers._kineto_scan`` (C, Python's C API only) scans Kineto trace events about
10x faster than the pure-Python path. It is optional: without a C compiler the build skips it
and tracekit reads Kineto traces with the pure-Python path (same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.parsers._kineto_scan",
            ["tracekit/parsers/_kineto_scan.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-missing-field-initializers"],
            optional=True,
        )
    ]
)
