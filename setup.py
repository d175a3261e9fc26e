"""Builds the extension module posenc._posenc with the project's CMake build (Debian 12
has no scikit-build-core): configure with POSENC_PYTHON_MODULE=ON for the running
interpreter, build the target _posenc, and place the module in the wheel. The
metadata is in pyproject.toml.

Environment: POSENC_CMAKE_ARGS adds arguments to the configure step (e.g.
"-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"); POSENC_BUILD_DIR names an existing configured
build tree of this checkout (for the same interpreter) to build _posenc in instead of a
fresh one, as the CI does."""

import os
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("POSENC_BUILD_DIR")
        if build:
            build = os.path.abspath(build)
        else:
            build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            os.makedirs(build, exist_ok=True)
            self.configure(build)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build, "--target", "_posenc", "-j", jobs])
        built = os.path.join(build, "python", "posenc",
                             os.path.basename(self.get_ext_filename(ext.name)))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self.copy_file(built, target)

    def configure(self, build):
        generator = ["-G", "Ninja"] if subprocess.run(
            ["ninja", "--version"], capture_output=True).returncode == 0 else []
        subprocess.check_call(
            ["cmake", "-S", ROOT, "-B", build, *generator, "-DCMAKE_BUILD_TYPE=Release",
             "-DPOSENC_PYTHON_MODULE=ON", "-DPOSENC_BUILD_TESTS=OFF",
             f"-DPython_EXECUTABLE={sys.executable}",
             *os.environ.get("POSENC_CMAKE_ARGS", "").split()])


# setuptools' own build tree, apart from the CMake build trees (build/, build-*/).
setup(ext_modules=[CMakeExtension("posenc._posenc")], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": "build-pip"}})
