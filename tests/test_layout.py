"""The package's layout rules (../shared/STYLE.md): one builder matches on the model family, and
modules and functions stay small enough to read."""

import ast
from pathlib import Path

import transduce

PACKAGE = Path(transduce.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _names(tree: ast.AST) -> set[str]:
    """Every identifier the code uses or imports (not the words of its docstrings)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names)
    return names


MODEL_CLASSES = {"Transformer": "models/transformer.py", "RnnEncoderDecoder": "models/rnn.py"}


def test_only_the_builder_names_a_model_class():
    offenders = []
    for path in MODULES:
        names = _names(ast.parse(path.read_text()))
        for name, home in MODEL_CLASSES.items():
            if name in names and _relative(path) not in {"models/__init__.py", home}:
                offenders.append(f"{_relative(path)}: {name}")
    assert offenders == []


def test_nothing_outside_the_config_and_the_builder_asks_for_the_family():
    allowed = {"config.py", "models/__init__.py"}
    offenders = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            compared = isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Attribute) and side.attr == "family"
                for side in [node.left, *node.comparators]
            )
            if compared and _relative(path) not in allowed:
                offenders.append(f"{_relative(path)}:{node.lineno}")
    assert offenders == []


def test_modules_and_functions_stay_small():
    long_modules = [_relative(p) for p in MODULES if len(p.read_text().splitlines()) > 400]
    long_functions = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and node.end_lineno - node.lineno + 1 > 60:
                long_functions.append(f"{_relative(path)}:{node.name}")
    assert long_modules == []
    assert long_functions == []
