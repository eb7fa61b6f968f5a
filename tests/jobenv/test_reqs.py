"""trainer.requirements / requirements_file: what is taken, what is refused up front (file:line, field,
fix), and the normalised list the image tag and the local prefix are keyed by."""
import textwrap

import pytest

from chaosbench.cluster.jobenv import Refused, requirements
from chaosbench.cluster.jobenv.reqs import merged, normalise, parse_file
from chaosbench.scenario.loader import ScenarioError, load_scenario


@pytest.mark.parametrize("given, want", [
    ("OmegaConf >= 2.3", "omegaconf>=2.3"),
    ("Foo_Bar.baz[Extra] == 1.0 ; python_version >= '3.8'", 'foo-bar-baz[extra]==1.0; python_version >= "3.8"'),
    ("pyyaml", "pyyaml"),
])
def test_specifiers_are_normalised_as_pip_compares_them(given, want):
    assert normalise(given) == want


@pytest.mark.parametrize("given, says", [
    ("-e ./mypkg", "editable install"),
    ("--index-url https://example.invalid/simple", "host's pip configuration"),
    ("--extra-index-url=https://example.invalid/simple", "host's pip configuration"),
    ("-f ./wheels", "host's pip configuration"),
    ("--hash=sha256:00", "hashes are not checked"),
    ("-c constraints.txt", "constraints files are not read"),
    ("--pre", "only requirement specifiers by name"),
    ("git+https://example.invalid/x.git", "cannot be fetched into the offline wheelhouse"),
    ("pkg @ https://example.invalid/pkg-1.0-py3-none-any.whl", "cannot be fetched into the offline wheelhouse"),
    ("./dist/pkg-1.0-py3-none-any.whl", "cannot be fetched into the offline wheelhouse"),
    ("not a requirement", "is not a requirement specifier"),
])
def test_what_cannot_be_installed_offline_is_refused_with_the_fix(given, says):
    with pytest.raises(Refused, match=says):
        normalise(given)


def test_a_file_is_read_as_pip_reads_it(tmp_path):
    (tmp_path / "base.txt").write_text("numpy<3  # shared\n")
    (tmp_path / "req.txt").write_text(textwrap.dedent("""\
        # the job's packages
        -r base.txt

        OmegaConf \\
            >=2.3
        pyyaml\t# inline comment
        """))
    assert parse_file(tmp_path / "req.txt") == ["numpy<3", "omegaconf>=2.3", "pyyaml"]


def test_a_refusal_in_a_file_names_its_line(tmp_path):
    (tmp_path / "req.txt").write_text("omegaconf\n\n--index-url https://example.invalid\n")
    with pytest.raises(Refused) as exc:
        parse_file(tmp_path / "req.txt")
    assert exc.value.line == 3


def test_an_include_of_itself_is_refused(tmp_path):
    (tmp_path / "req.txt").write_text("-r req.txt\n")
    with pytest.raises(Refused, match="includes itself"):
        parse_file(tmp_path / "req.txt")


def test_the_merged_list_does_not_depend_on_order_or_spelling(tmp_path):
    assert merged(["PyYAML", "omegaconf>=2.3"], ["omegaconf >= 2.3"]) == merged(["omegaconf>=2.3", "pyyaml"])


class Trainer:
    def __init__(self, requirements=(), requirements_file=None):
        self.requirements, self.requirements_file = list(requirements), requirements_file


def test_requirements_merge_the_list_the_file_and_a_launchers_pins(tmp_path):
    (tmp_path / "req.txt").write_text("omegaconf>=2.3\n")
    got = requirements(Trainer(["PyYAML"], "req.txt"), tmp_path, extra=["nvidia_resiliency_ext==0.4.1"])
    assert got == ["nvidia-resiliency-ext==0.4.1", "omegaconf>=2.3", "pyyaml"]


SCENARIO = """\
name: deps
trainer:
  workdir: .
  script: train.py
  {field}
expect: {{reaches_step: 5}}
"""


def load(tmp_path, field, files=None):
    (tmp_path / "train.py").write_text("")
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    (tmp_path / "s.yaml").write_text(SCENARIO.format(field=field))
    return load_scenario(tmp_path / "s.yaml")


def test_the_loader_refuses_a_bad_list_entry_with_file_line_and_field(tmp_path):
    with pytest.raises(ScenarioError) as exc:
        load(tmp_path, 'requirements: ["omegaconf", "-e ./x"]')
    msg = str(exc.value)
    assert "s.yaml:5: trainer.requirements" in msg and "editable install" in msg, msg


def test_the_loader_refuses_a_missing_file_with_where_it_looked(tmp_path):
    with pytest.raises(ScenarioError) as exc:
        load(tmp_path, "requirements_file: nope.txt")
    msg = str(exc.value)
    assert "s.yaml:5: trainer.requirements_file: 'nope.txt' not found" in msg and str(tmp_path) in msg, msg


def test_the_loader_refuses_a_bad_line_of_the_file_with_both_places(tmp_path):
    with pytest.raises(ScenarioError) as exc:
        load(tmp_path, "requirements_file: req.txt", {"req.txt": "omegaconf\ngit+https://example.invalid/x\n"})
    msg = str(exc.value)
    assert "s.yaml:5: trainer.requirements_file:" in msg and "req.txt:2:" in msg and "wheelhouse" in msg, msg


def test_the_reference_trainer_may_declare_requirements_too(tmp_path):
    (tmp_path / "s.yaml").write_text("name: ref\ntrainer:\n  requirements: [omegaconf]\nexpect: {reaches_step: 5}\n")
    assert load_scenario(tmp_path / "s.yaml").trainer.requirements == ["omegaconf"]
