"""mypy with its ratchet enforced: `make lint` runs this instead of plain `mypy`.

pyproject.toml lists the modules still allowed type errors (`ignore_errors = true`). This runs
mypy once over the whole project with that list switched off and fails when
- a module that is not listed has an error (new code type-checks from its first commit), or
- a listed module that exists has none (it was fixed: take it off the list, so it stays fixed).
Errors of listed modules are counted, not printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _table(name: str, values: dict[str, Any], array: bool = False) -> str:
    head = f"[[{name}]]" if array else f"[{name}]"
    return "\n".join([head, *(f"{key} = {_toml_value(value)}" for key, value in values.items())])


def split_config(pyproject: dict[str, Any]) -> tuple[str, set[str]]:
    """The mypy configuration without the ratchet's override, as TOML, and the listed modules."""
    tool = pyproject["tool"]
    mypy = dict(tool["mypy"])
    overrides = mypy.pop("overrides", [])
    kept = [override for override in overrides if not override.get("ignore_errors")]
    listed = {
        module for override in overrides if override.get("ignore_errors") for module in override["module"]
    }
    tables = [_table("tool.mypy", mypy)]
    tables += [_table("tool.mypy.overrides", override, array=True) for override in kept]
    tables.append(_table("tool.django-stubs", tool["django-stubs"]))
    return "\n\n".join(tables) + "\n", listed


def module_of(path: str) -> str:
    module = path.removesuffix(".py").replace("/", ".")
    return module.removesuffix(".__init__")


def exists(module: str) -> bool:
    """A listed module may not exist yet in this tree (someone's work in progress): not fixed."""
    path = ROOT / module.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def main() -> int:
    config, listed = split_config(tomllib.loads((ROOT / "pyproject.toml").read_text()))
    with tempfile.TemporaryDirectory() as folder:
        config_file = Path(folder) / "mypy.toml"
        config_file.write_text(config)
        command = [sys.executable, "-m", "mypy", "--config-file", str(config_file), *sys.argv[1:]]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode not in (0, 1):  # 2: mypy itself failed
        sys.stderr.write(result.stdout + result.stderr)
        return result.returncode
    with_errors: set[str] = set()
    new_errors = []
    for line in result.stdout.splitlines():
        path, _sep, rest = line.partition(":")
        if not path.endswith(".py") or " error: " not in rest:
            continue
        module = module_of(path)
        with_errors.add(module)
        if module not in listed:
            new_errors.append(line)
    fixed = sorted(module for module in listed - with_errors if exists(module))
    for line in new_errors:
        print(line)
    if fixed:
        print("These modules have no type error any more: take them off the list in pyproject.toml:")
        print("  " + ", ".join(f'"{module}"' for module in fixed))
    excused = len(listed & with_errors)
    print(f"mypy: {len(new_errors)} new errors; {excused} listed modules still excused; {len(fixed)} fixed")
    return 1 if new_errors or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
