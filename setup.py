"""Build of tracekit's native modules; everything else is in pyproject.toml.

Two small C modules (Python's C API only), both optional: without a C compiler the build skips
them and tracekit uses its pure-Python paths (same results, slower).

* ``tracekit.parsers._kineto_scan`` scans Kineto trace events (validate, count, filter, hand
  DuckDB Arrow batches);
* ``tracekit.parsers._xplane_wire`` reads XEvents and their stats (as JSON) from the serialized
  XSpace, line by line, without a protobuf wrapper per event or stat.

Both include ``tracekit/parsers/_json_text.h`` (a growable buffer and the one JSON string
writer); it is listed in ``depends`` so that editing it rebuilds both.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.parsers._kineto_scan",
            ["tracekit/parsers/_kineto_scan.c"],
            depends=["tracekit/parsers/_json_text.h"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(
            "tracekit.parsers._xplane_wire",
            ["tracekit/parsers/_xplane_wire.c"],
            depends=["tracekit/parsers/_json_text.h"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wno-missing-field-initializers"],
            optional=True,
        ),
    ]
)
