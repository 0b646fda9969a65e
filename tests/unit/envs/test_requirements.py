"""What a project declares for its tests, read the way it declares it."""

from __future__ import annotations

import pytest

from inhabit.envs.requirements import project_requirements
from inhabit.errors import EnvError


def _texts(reqs):
    return [(r.text, r.source) for r in reqs]


def test_pyproject_dependencies_test_extra_group_and_requirements_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "My_Lib"\ndependencies = ["attrs>=22"]\n'
        '[project.optional-dependencies]\ntests = ["my-lib[speedups]", "hypothesis"]\ndev = ["black"]\n'
        '[dependency-groups]\ntest = ["pytest-mock", {include-group = "base"}]\nbase = ["sortedcontainers"]\n'
    )
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "test.txt").write_text("-r common.txt\n-e .\nfreezegun==1.5  # pinned\n")
    (tmp_path / "requirements" / "common.txt").write_text("# shared\nsix\n")
    assert _texts(project_requirements(tmp_path)) == [
        ("attrs>=22", "pyproject.toml [project] dependencies"),
        ("hypothesis", "pyproject.toml extra 'tests'"),  # the project itself (my-lib[...]) is left out
        ("pytest-mock", "pyproject.toml dependency group 'test'"),
        ("sortedcontainers", "pyproject.toml dependency group 'test'"),
        ("six", "requirements/common.txt"),
        ("freezegun==1.5", "requirements/test.txt"),
    ]
    # Named by the user instead: only those.
    named = project_requirements(tmp_path, extras=["dev"], groups=[], requirement_files=[])
    assert _texts(named) == [
        ("attrs>=22", "pyproject.toml [project] dependencies"),
        ("black", "pyproject.toml extra 'dev'"),
    ]


def test_dev_extra_is_the_fallback_and_tox_deps_the_last_resort(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.optional-dependencies]\ndev = ["mock"]\n'
    )
    assert _texts(project_requirements(tmp_path)) == [("mock", "pyproject.toml extra 'dev'")]
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "tox.ini").write_text(
        "[tox]\nenvlist = py3\n[testenv]\ndeps =\n    pytest\n    py38: old\n    -rreq.txt\n    toml\n"
    )
    (tmp_path / "req.txt").write_text("freezegun\n")
    assert [r.text for r in project_requirements(tmp_path)] == ["pytest", "freezegun", "toml"]


def test_a_name_the_project_does_not_declare_is_one_clear_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.optional-dependencies]\ntests = []\n'
    )
    with pytest.raises(EnvError, match=r"declares no extra 'testing' \(it has: tests\)"):
        project_requirements(tmp_path, extras=["testing"])
    with pytest.raises(EnvError, match=r"requirements file nope\.txt does not exist"):
        project_requirements(tmp_path, requirement_files=["nope.txt"])


def test_setup_cfg_install_requires_and_test_extra(tmp_path):
    (tmp_path / "setup.cfg").write_text(
        "[metadata]\nname = old_lib\n[options]\ninstall_requires =\n    six>=1.10\n"
        "[options.extras_require]\ntesting =\n    mock  # old style\n    old-lib[speedups]\n"
    )
    assert _texts(project_requirements(tmp_path)) == [
        ("six>=1.10", "setup.cfg install_requires"),
        ("mock", "setup.cfg extra 'testing'"),
    ]
