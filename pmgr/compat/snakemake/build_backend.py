"""The project's build backend: setuptools' own, and an editable install that Snakemake sees.

Snakemake 9 finds executor plugins with `pkgutil.iter_modules()`, which lists the packages in
the folders of sys.path and asks no import hook.  `pip install .` puts
snakemake_executor_plugin_pilot in site-packages (setup.cfg maps it from this folder), where it
is found.  An editable install maps packages with an import hook (setuptools' default mode) or
puts the checkout on sys.path (editable_mode=compat), and the checkout holds no such package
at its top.  So the editable wheel gets one file more,
`__editable__.snakemake_executor_plugin_pilot.pth`, naming the folder plugin/ beside this
module, which holds nothing but snakemake_executor_plugin_pilot: Snakemake finds it, nothing
else is put on the path.  (This module is no part of the plugin: only the build imports it.)

pyproject.toml names this module (build-backend, backend-path); every hook but build_editable
is setuptools.build_meta's.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 (every PEP 517/660 hook, as setuptools has it)

PTH = "__editable__.snakemake_executor_plugin_pilot.pth"
PLUGIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugin")


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """setuptools' editable wheel, with the .pth that puts plugin/ on sys.path."""
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    _add_file(os.path.join(wheel_directory, name), PTH, f"{PLUGIN_DIR}\n".encode())
    return name


def _add_file(wheel: str, arcname: str, data: bytes) -> None:
    """Rewrite `wheel` with `arcname` added and listed in its RECORD (hash and size)."""
    with zipfile.ZipFile(wheel) as old:
        entries = [(info, old.read(info)) for info in old.infolist()]
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    line = f"{arcname},sha256={digest},{len(data)}\n".encode()
    tmp = wheel + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as new:
        new.writestr(arcname, data)
        for info, content in entries:
            if info.filename.endswith(".dist-info/RECORD"):
                content = line + content
            new.writestr(info, content)
    os.replace(tmp, wheel)
