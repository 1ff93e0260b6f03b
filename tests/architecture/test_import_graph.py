"""The import graph of every package of ours, the test harness and the benchmarks
included: no module reaches itself through others.

The import-linter contracts in ``pyproject.toml`` state the layers each package
keeps; this test states the rule they all serve, for the whole project at once,
and names the cycle when there is one.
"""

from __future__ import annotations

import grimp

PACKAGES = ("job_runtime", "cjob_checkpoint", "cjob_operator", "cjob_spec", "cjob_lifecycle", "cjob",
            "e2e", "bench")
"""The product's packages, and the harness and benchmarks beside them: a cycle there
(even through an import inside a function, or one only the type checker follows)
is as hard to read and to cut as one in the product."""


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
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
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def test_the_cycle_finder_names_a_cycle_it_is_shown() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(edges) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_ours_imports_itself_through_others() -> None:
    graph = grimp.build_graph(*PACKAGES)
    ours = {m for m in graph.modules if m.split(".")[0] in PACKAGES}
    edges = {m: {d for d in graph.find_modules_directly_imported_by(m) if d in ours}
             for m in ours}
    assert import_cycles(edges) == []
