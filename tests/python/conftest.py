"""pytest setup for the Python module's tests: the shared references of tests/lib
(reference_rope.py, reference_attention.py, ...) on the path, and the package under test
from the build tree (PYTHONPATH=<build>/python, set by ctest)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
