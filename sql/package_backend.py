"""The package's build backend: setuptools', after writing ``plpy_anon/declared_methods.json`` from
``sql/functions`` (the release methods the client, CLI and server know), so that ``pip install .``
or a wheel built from a clone carries every method without a ``make`` first.

An sdist already holds the written file and no ``sql/functions``: then nothing is written."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import build_meta
from setuptools.build_meta import *

SQL = Path(__file__).resolve().parent


def _write_declared_methods() -> None:
    if not (SQL / "functions").is_dir():
        return
    spec = importlib.util.spec_from_file_location("plpy_anon_sql_build", SQL / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    build.write_declared_methods()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _write_declared_methods()
    return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _write_declared_methods()
    return build_meta.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    _write_declared_methods()
    return build_meta.build_sdist(sdist_directory, config_settings)
