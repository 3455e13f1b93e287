"""The source text of an optimizer's pure rule, read from its file without importing it.

The pages that show an optimizer (`components.rule_view`) print the maths that runs: the
class's `coefficients` / `update` and the module-level functions they call. Importing the class
for `inspect.getsource` would import TensorFlow into the server, so the file is parsed with
`ast` instead. TensorFlow-free; imports nothing of the lab but the catalog's plugin prefix.
"""

from __future__ import annotations

import ast
import importlib.util

from optimizers.catalog import PLUGIN_PREFIX


def pure_rule_sources(class_path: str) -> dict[str, str]:
    """Qualified name -> source text of the class's `coefficients` and `update` and of the
    module-level functions of the same module they call, directly or through each other (e.g.
    `adam_update` -> `adam_decrement`), read from the source file with `ast`: the module is NOT
    imported (no TensorFlow). The same texts as `inspect.getsource` gives for a class that
    defines both methods itself (every built-in and the example plugin; tested); an inherited
    method is not followed.

    Args:
        class_path: a `CatalogEntry.class_path` ("module:Class" or "plugin:/file.py:Class").

    Returns:
        {"Class.coefficients": text, "Class.update": text, "adam_update": text, ...}; empty
        when the file cannot be found or parsed.
    """
    if class_path.startswith(PLUGIN_PREFIX):
        file_name, _, class_name = class_path[len(PLUGIN_PREFIX):].rpartition(":")
    else:
        module_name, _, class_name = class_path.partition(":")
        try:
            spec = importlib.util.find_spec(module_name)  # imports the parent package only
        except (ImportError, ValueError):
            return {}
        # None: `open` below raises TypeError, which means "no source" like a missing file.
        file_name = spec.origin if spec is not None else None  # type: ignore[assignment]
    try:
        with open(file_name, encoding="utf-8") as handle:
            text = handle.read()
        tree = ast.parse(text)
    except (OSError, TypeError, SyntaxError, ValueError):
        return {}
    lines = text.splitlines(keepends=True)

    def source(node: ast.stmt) -> str:  # as inspect.getsource: decorators and indentation kept
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return "".join(lines[first - 1:node.end_lineno])

    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    classes = [node for node in tree.body
               if isinstance(node, ast.ClassDef) and node.name == class_name]
    out: dict[str, str] = {}
    if not classes:
        return out
    methods = {node.name: node for node in classes[0].body if isinstance(node, ast.FunctionDef)}
    for method_name in ("coefficients", "update"):
        method = methods.get(method_name)
        if method is None:
            continue
        out[f"{class_name}.{method_name}"] = source(method)
        pending = [method]
        while pending:  # transitively: `adam_update` calls `adam_decrement`, which does the maths
            for called in _global_names(pending.pop(0)):  # in first-use order, as co_names
                if called in functions and called not in out:
                    out[called] = source(functions[called])
                    pending.append(functions[called])
    return out


def _global_names(function: ast.FunctionDef) -> list[str]:
    """Names `function` reads that it does not assign (its globals), in order of first use."""
    local = {a.arg for a in function.args.args + function.args.kwonlyargs}
    seen: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                local.add(node.id)
            elif node.id not in local and node.id not in seen:
                seen.append(node.id)
    return seen


__all__ = ["pure_rule_sources"]
