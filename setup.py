"""Build hooks beside pyproject.toml: the sandbox launcher, a small C program, next to the C extension.

pyproject.toml declares the one extension module (the sparse weight-delta kernel). The bwrap
sandboxes' root launcher (`src/inhabit/sandbox/_launcher.c`) is a program, not a module, which
pyproject.toml cannot declare: `build_ext` here builds it too, with the same compiler, into the
package (`inhabit/sandbox/_launcher`). Optional like the kernel: where it does not build, the
install goes on and sandboxes start through the shell launcher.

    .venv/bin/python setup.py build_ext --inplace     # rebuild both in a checkout
"""

from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.build_ext import build_ext

LAUNCHER_SOURCE = "src/inhabit/sandbox/_launcher.c"
LAUNCHER = "inhabit.sandbox._launcher"


class BuildExt(build_ext):
    """build_ext, then the launcher program (statically linked where the C library allows: a
    static program starts without the dynamic loader, which is most of a tiny program's exec)."""

    def run(self) -> None:
        super().run()
        try:
            self._build_launcher()
        except Exception as e:  # optional, as the kernel is (`optional = true` in pyproject.toml)
            self.warn(f"the sandbox launcher was not built ({e}): sandboxes start through /bin/sh")

    def _build_launcher(self) -> None:
        if self.compiler is None or isinstance(self.compiler, str):
            from setuptools._distutils.ccompiler import new_compiler
            from setuptools._distutils.sysconfig import customize_compiler

            self.compiler = new_compiler(compiler=self.compiler, force=self.force)
            customize_compiler(self.compiler)
        # Where build_ext puts a module of that name (the package dir with --inplace / editable).
        out_dir = os.path.dirname(self.get_ext_fullpath(LAUNCHER))
        objects = self.compiler.compile([LAUNCHER_SOURCE], output_dir=self.build_temp, extra_postargs=["-O2"])
        name = LAUNCHER.rsplit(".", 1)[1]
        try:
            self.compiler.link_executable(objects, name, output_dir=out_dir, extra_postargs=["-static"])
        except Exception:
            self.compiler.link_executable(objects, name, output_dir=out_dir)


setup(cmdclass={"build_ext": BuildExt})
