"""The project's one compiled module; everything else is declared in pyproject.toml.

`pipelines.codec._otlp_scan` (pipelines/codec/otlp_scan.c) is the attribution job's fast
path through OTLP messages. It is optional: without a C compiler the package still installs and the
same messages are decoded by the Python path alone, only more slowly.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("pipelines.codec._otlp_scan", ["pipelines/codec/otlp_scan.c"],
                             extra_compile_args=["-O2", "-std=c11"], optional=True)])
