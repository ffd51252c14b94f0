"""template.yaml as plain Python data, for the checks that read it (iam_check.py,
template_check.py). They import this module with `sys.dont_write_bytecode = True` set
first: CI does not set PYTHONDONTWRITEBYTECODE, and an untracked infra/__pycache__ would
fail its clean-tree check."""
from pathlib import Path

from cfnlint.decode import cfn_yaml

ROOT = Path(__file__).resolve().parent.parent


def plain(value):
    """cfn-lint's nodes as plain dicts, lists and strings."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return str(value) if isinstance(value, str) else value


def load():
    """template.yaml, parsed as cfn-lint parses it (intrinsic functions as one-key dicts)."""
    return plain(cfn_yaml.load(str(ROOT / "template.yaml")))
