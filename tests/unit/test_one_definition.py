"""No second definition of a range or a default (issue 34: the import contract's sibling): each lives with its
owner, and product code anywhere else (testbed/, controller/, pfc/, traffic/, fabrics/, common/) takes it from there.

What counts as a second definition, found in the syntax tree of every product module outside the owner
(docstrings are not definitions, comments are not in the tree):

* the PFC dynamic alpha's lower bound (owner ``pfc/policy.py``, ``MIN_DYNAMIC_ALPHA``): ``1 / 128`` or
  ``0.0078125``;
* the pause daemon's poll range (owner ``pfc/policy.py``, ``POLL_US_RANGE``): 50 and 5000 side by side, as
  elements of one tuple, list or set, arguments of one call (``Field(ge=50, le=5000)``) or one comparison
  (``50 <= poll_us <= 5000``);
* the message timeout (owner ``traffic/runtime/agent.py``, ``DEFAULT_TRANSFER_TIMEOUT_S``): 60 given to a
  message's timeout, i.e. a name ``timeout_s`` or one naming a transfer's or message's timeout
  (``transfer_timeout``, ``MESSAGE_TIMEOUT_S``, ...), as a parameter default, an assignment, a class field, a
  keyword argument, a ``.get(name, 60)`` default or the ``default=`` of a ``--transfer-timeout`` /
  ``--message-timeout`` flag;
* the state directory (owner ``common/paths.py``, ``DEFAULT_STATE_DIR``): the text ``/run/zcube-testbed`` in a
  string that is not a docstring (f-strings included).

Not checked: the alpha's upper bound (8.0 is too common a number to tell a copy by), a bound computed rather than
written (``2 ** -7``), 60 under another name (``timeout``, ``ready_timeout_s``: other waits), and the
documentation (docs/, README). ``test_a_planted_copy_is_caught`` plants one of each, so the rules can fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "controller", "traffic", "pfc", "fabrics", "common")

ALPHA, POLL, TIMEOUT, STATE_DIR = "PFC dynamic alpha bound", "poll_us range", "message timeout", "state directory"
OWNERS = {ALPHA: "pfc/policy.py", POLL: "pfc/policy.py", TIMEOUT: "traffic/runtime/agent.py",
          STATE_DIR: "common/paths.py"}
OWNED_AS = {ALPHA: "MIN_DYNAMIC_ALPHA", POLL: "POLL_US_RANGE", TIMEOUT: "DEFAULT_TRANSFER_TIMEOUT_S",
            STATE_DIR: "DEFAULT_STATE_DIR"}
STATE_DIR_TEXT = "/run/zcube-testbed"
TIMEOUT_NAME = re.compile(r"^(timeout_s|\w*(transfer|message)_?timeout\w*)$", re.IGNORECASE)
TIMEOUT_FLAG = re.compile(r"^--(transfer|message)-timeout$")


def _number(node) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                                   str):
                out.add(id(first.value))
    return out


def _name(target) -> str | None:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    return None


def _timeout_60(name: str | None, value) -> bool:
    return bool(name) and TIMEOUT_NAME.match(name) is not None and _number(value) == 60


def findings(source: str, where: str) -> list[tuple[str, int]]:
    """(rule, line) of every second definition in one module's source (``where``: its path from the root, so the
    owner's own definitions pass)."""
    tree = ast.parse(source, where)
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        # the alpha's bound
        if _number(node) == 0.0078125 or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                                          and _number(node.left) == 1 and _number(node.right) == 128):
            hits.append((ALPHA, line))
        # the poll range: 50 and 5000 side by side
        side = []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            side = node.elts
        elif isinstance(node, ast.Call):
            side = list(node.args) + [k.value for k in node.keywords]
        elif isinstance(node, ast.Compare):
            side = [node.left, *node.comparators]
        if {50, 5000} <= {_number(n) for n in side}:
            hits.append((POLL, line))
        # the message timeout
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            hits += [(TIMEOUT, line) for a, d in pairs if _timeout_60(a.arg, d)]
        elif isinstance(node, ast.AnnAssign) and _timeout_60(_name(node.target), node.value):
            hits.append((TIMEOUT, line))
        elif isinstance(node, ast.Assign) and any(_timeout_60(_name(t), node.value) for t in node.targets):
            hits.append((TIMEOUT, line))
        elif isinstance(node, ast.Call):
            hits += [(TIMEOUT, line) for k in node.keywords if _timeout_60(k.arg, k.value)]
            first = node.args[0] if node.args and isinstance(node.args[0], ast.Constant) else None
            text = first.value if first is not None and isinstance(first.value, str) else None
            if text and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and len(node.args) > 1 \
                    and _timeout_60(text, node.args[1]):
                hits.append((TIMEOUT, line))
            if text and TIMEOUT_FLAG.match(text) and any(k.arg == "default" and _number(k.value) == 60
                                                         for k in node.keywords):
                hits.append((TIMEOUT, line))
        elif isinstance(node, ast.Dict):
            hits += [(TIMEOUT, line) for k, v in zip(node.keys, node.values)
                     if isinstance(k, ast.Constant) and isinstance(k.value, str) and _timeout_60(k.value, v)]
        # the state directory
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and STATE_DIR_TEXT in node.value \
                and id(node) not in docs:
            hits.append((STATE_DIR, line))
    return [(rule, line) for rule, line in hits if OWNERS[rule] != where]


def _product_modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_each_owner_defines_what_it_owns():
    """The owners hold the definitions the rules protect (a rule over a moved definition would guard nothing)."""
    for rule, owner in OWNERS.items():
        text = (ROOT / owner).read_text()
        assert re.search(rf"^{OWNED_AS[rule]}\b.*=", text, re.M), f"{owner} no longer defines {OWNED_AS[rule]}"


def test_no_range_or_default_is_defined_twice():
    seen = [f"{path.relative_to(ROOT)}:{line}: a second definition of the {rule} (its owner: "
            f"{OWNERS[rule]} {OWNED_AS[rule]}; import it)"
            for path in _product_modules() for rule, line in findings(path.read_text(), str(path.relative_to(ROOT)))]
    assert not seen, "\n".join(seen)


@pytest.mark.parametrize("rule,planted", [
    (ALPHA, "LOW = 1 / 128\n"),
    (ALPHA, "def f(alpha=0.0078125):\n    return alpha\n"),
    (POLL, "RANGE = (50, 5000)\n"),
    (POLL, "poll_us: int = Field(500, ge=50, le=5000)\n"),
    (POLL, "ok = 50 <= x <= 5000\n"),
    (TIMEOUT, "def send(timeout_s: float = 60):\n    pass\n"),
    (TIMEOUT, "class C:\n    timeout_s: float = 60.0\n"),
    (TIMEOUT, "MESSAGE_TIMEOUT_S = 60\n"),
    (TIMEOUT, "run(transfer_timeout=60)\n"),
    (TIMEOUT, "t = cfg.get('transfer_timeout_s', 60)\n"),
    (TIMEOUT, "p.add_argument('--transfer-timeout', type=float, default=60)\n"),
    (TIMEOUT, "cfg = {'transfer_timeout_s': 60}\n"),
    (STATE_DIR, "STATE = '/run/zcube-testbed'\n"),
    (STATE_DIR, "path = f\"/run/zcube-testbed/{name}\"\n"),
])
def test_a_planted_copy_is_caught(rule, planted):
    assert [r for r, _ in findings(planted, "testbed/elsewhere.py")] == [rule]
    assert findings(planted, OWNERS[rule]) == []  # the owner may


@pytest.mark.parametrize("innocent", [
    '"""The state lives in /run/zcube-testbed."""\n',  # a docstring names it
    "proc.communicate(timeout=60)\n",  # another wait
    "t = cfg.get('ready_timeout_s', 60)\n",
    "x = (50, 500)\n",
    "alpha = 1 / 256\n",
    "from common.paths import DEFAULT_STATE_DIR\nSTATE = DEFAULT_STATE_DIR\n",
])
def test_other_numbers_and_mentions_are_not_definitions(innocent):
    assert findings(innocent, "testbed/elsewhere.py") == []
