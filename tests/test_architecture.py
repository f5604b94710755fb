"""The package's layers: imports flow one way, and commands that load no weights never load llama.cpp."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "localspec"

# Higher layers may import lower ones, never the reverse; packages of one rank do not import each other.
LAYER_RANK = {"cli": 5, "app": 4, "engine": 3, "models": 3, "config": 2, "runtime": 1, "": 0}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _import_nodes(path: Path) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """The import statements of `path`, at any depth (parsed once for all the tests here)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return tuple(node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def _imports(path: Path) -> set[str]:
    """Absolute names of the localspec modules `path` imports (at any depth in the file)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in _import_nodes(path):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("localspec"):
                found.add(name)
                for alias in node.names:  # `from . import x` names a module
                    if (PACKAGE.parent / f"{name}.{alias.name}".replace(".", "/")).with_suffix(".py").exists():
                        found.add(f"{name}.{alias.name}")
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("localspec"))
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYER_RANK) else ""


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py") if path.name != "__main__.py"}


@pytest.mark.slow
def test_imports_flow_from_commands_down_to_the_runtime() -> None:
    wrong = []
    for module, path in MODULES.items():
        layer = _layer(module)
        for imported in _imports(path):
            other = _layer(imported)
            if other != layer and LAYER_RANK[other] >= LAYER_RANK[layer]:
                wrong.append(f"{module} ({layer or 'base'}) imports {imported} ({other or 'base'})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow  # (over a third of a second: every module imported)
def test_no_import_cycles() -> None:
    graph = {module: {name for name in _imports(path) if name in MODULES and name != module} for module, path in MODULES.items()}
    state: dict[str, int] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for nxt in graph[module]:
            assert state.get(nxt) != 1, " -> ".join([*trail, module, nxt])
            if nxt not in state:
                visit(nxt, [*trail, module])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [])


@pytest.mark.slow  # (over a third of a second: every module imported)
def test_only_the_runtime_imports_llama_cpp() -> None:
    def imports_llama_cpp(path: Path) -> bool:
        return any("llama_cpp" in ast.dump(node) for node in _import_nodes(path))

    assert [module for module, path in MODULES.items() if imports_llama_cpp(path)] == ["localspec.runtime.library"]


COMMANDS_WITHOUT_WEIGHTS = """
import sys
from localspec.cli import main

def invoke(*args):
    try:
        main(list(args), standalone_mode=False)
    except SystemExit:
        pass

target, models = sys.argv[1], sys.argv[2]
invoke("--help")
invoke("run", "--help")
invoke("profile", "list")
invoke("profile", "show", "demo")
invoke("profile", "path", "demo")
invoke("profile", "add", "mine", "--target", target)
invoke("profile", "set", "mine", "sampling.temperature=0.2")
invoke("profile", "default", "mine")
invoke("profile", "remove", "mine")
invoke("models", "scan", models)
print("llama_cpp" in sys.modules)
"""


@pytest.mark.slow
def test_commands_that_load_no_weights_never_load_llama_cpp(tiny_pair: tuple[Path, Path]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", COMMANDS_WITHOUT_WEIGHTS, str(tiny_pair[0]), str(tiny_pair[0].parent)],
        capture_output=True, text=True, env=dict(os.environ), timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "saved" in result.stderr and "removed" in result.stderr  # the commands really ran
    assert result.stdout.strip().splitlines()[-1] == "False"
