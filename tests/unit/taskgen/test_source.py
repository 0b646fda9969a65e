"""Which files of a project a build plants bugs in: the library's code, not its tests' oracle.

The project is laid out like python-slugify 9.2.0: a package, its tests, and a top-level `tools/`
folder whose reference implementation the release tests compare the package against. A bug planted
there is a bug in the tests' expected values, which an agent told "fix the project's code, not the
tests" should not have to look for.
"""

from __future__ import annotations

from pathlib import Path

from inhabit.taskgen.source import code_files
from task_fixtures import write_tree

FILES = {
    "slugify/__init__.py": "from .slugify import slugify\n",
    "slugify/slugify.py": "def slugify(text):\n    return text.lower().replace(' ', '-')\n",
    "slugify/__main__.py": "def main():\n    return 0\n",
    # a package's own `tools` module folder is library code
    "slugify/tools/__init__.py": "",
    "slugify/tools/text.py": "def strip(text):\n    return text.strip()\n",
    "tools/legacy_reference.py": "def slugify(text):\n    return text.lower().replace(' ', '-')\n",
    "tools/check_algorithms.py": "def check(a, b):\n    return a == b\n",
    "scripts/release.py": "def bump(v):\n    return v + 1\n",
    "tests/__init__.py": "",
    "tests/test_release.py": (
        "from slugify import slugify\nfrom tools import legacy_reference\n\n\n"
        "def test_same():\n    assert slugify('A b') == legacy_reference.slugify('A b')\n"
    ),
    "setup.py": "from setuptools import setup\n\nsetup()\n",
}


def test_top_level_tooling_is_not_code_but_a_package_of_that_name_is(tmp_path: Path):
    write_tree(tmp_path, FILES)
    assert code_files(tmp_path) == [
        "slugify/__init__.py",
        "slugify/__main__.py",
        "slugify/slugify.py",
        "slugify/tools/__init__.py",
        "slugify/tools/text.py",
    ]
