"""Methods from outside persalign (issue #30): module:Class paths and entry points, checked against the
interface, every mistake one line naming what is missing."""

import pytest

from persalign.core.errors import ConfigError
from persalign.core.registry import METHODS
from tests.bad_input_helpers import cli_error
from tests.test_runner import TINY


@pytest.mark.parametrize("name, message", [
    ("no_such_pkg.rewards:Thing", "reward method 'no_such_pkg.rewards:Thing': cannot load no_such_pkg.rewards:Thing "
                                  "(ModuleNotFoundError: No module named 'no_such_pkg')"),
    ("tests.plugin_cases:Missing", "cannot load tests.plugin_cases:Missing (AttributeError: module "
                                   "'tests.plugin_cases' has no attribute 'Missing')"),
    ("tests.plugin_cases:NotAMethod", "from tests.plugin_cases:NotAMethod is not a reward method: it lacks "
                                      "['display', 'personalized', 'deployments', 'Settings', 'fit', 'adapt', "
                                      "'save', 'load']"),
    ("tests.plugin_cases:not_a_class", "is not a reward method: it lacks ['name', 'display'"),
    ("tests.plugin_cases:", "a plugin path is module:Attribute"),
])
def test_a_plugin_path_that_is_not_a_method_is_named_with_what_is_missing(tmp_path, capsys, name, message):
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"),
                              f"methods=[{{name: '{name}'}}]"] + TINY)
    assert message in line and "methods[0]" in line, line
    assert not (tmp_path / "run").exists()  # refused before the run directory is made


def test_a_plugin_class_is_found_by_path_and_cached_under_it():
    from tests.plugin_cases import FailingMethod

    assert METHODS.get("tests.plugin_cases:FailingMethod") is FailingMethod
    assert "tests.plugin_cases:FailingMethod" in METHODS
    assert "tests.plugin_cases:Nothing" not in METHODS
    with pytest.raises(ConfigError, match="unknown reward method 'nothing'.*or a plugin given as module:Attribute"):
        METHODS.get("nothing")


def test_every_installed_entry_point_is_checked_like_a_path(monkeypatch):
    from persalign.core.registry import Registry

    class Point:
        name, value, group = "broken", "tests.plugin_cases:NotAMethod", "persalign.methods"

        def load(self):
            from tests.plugin_cases import NotAMethod
            return NotAMethod

    registry = Registry("reward method", "persalign.rewards", "persalign.methods", required=("fit", "adapt"))
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [Point()] if group == registry.group else [])
    assert "broken" in registry.names()  # listed without loading: a broken plugin blocks only its own use
    with pytest.raises(ConfigError, match=r"reward method 'broken' from entry point 'tests.plugin_cases:NotAMethod' "
                                          r"\(persalign.methods\) is not a reward method: it lacks \['fit', 'adapt'\]"):
        registry.get("broken")


def test_the_example_plugin_is_installed_by_the_test_setup():
    """make install puts examples/plugin into the environment, so the conformance suite (which runs every
    registered method) and examples/plugin/tests run it with persalign's own."""
    assert "user_offset" in METHODS.names()


def test_data_summary_refuses_a_method_setting_the_run_would_refuse(capsys):
    line = cli_error(capsys, ["data", "summary", "demo-baselines", "methods=[{name: pal, prototype: 3}]"] + TINY)
    assert "methods[0]: unknown setting(s) ['prototype']" in line and "prototypes" in line
