"""No two modules of gpuwise import each other, directly or through others.

The layers and the forbidden imports are import-linter's contracts (`make lint`); a cycle inside
one layer is not something they see, so it is looked for here on the same import graph.
"""

from __future__ import annotations

import grimp


def _cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root, targets in imports.items():
        if root in index:
            continue
        work = [(root, iter(sorted(targets)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_gpuwise_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph("gpuwise")
    # A package's own __init__ importing its modules is how packages work, not a cycle between them.
    modules = {m for m in graph.modules if m.startswith("gpuwise.")}
    imports = {
        m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules and not m.startswith(i + ".")}
        for m in modules
    }
    assert _cycles(imports) == []
