"""What each recorded cell reads and binds, read from its code (IPython's ``In``).

This runs only when a checkpoint leaves something out or a rebuild is planned, so it adds
nothing to a cell's run time. ``In`` holds the code IPython ran, already turned into Python:
a magic is a ``get_ipython().run_line_magic(...)`` call, whose code argument is read too
where the magic runs it in the namespace (``%time``, ``%%capture``).

What a cell reads is what it loads before binding it: at its top level, in comprehensions,
lambdas and class bodies (they run as the cell does), and in decorators and defaults. A
function's body runs when it is called, so what it reads is kept apart
(:class:`FunctionCode`) and counts for the cells that call it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

CODE_MAGICS = {"time": 1, "prun": 1, "capture": 2}
"""Magics that run code in the namespace, and the argument that holds it (1: the line of a
line magic; 2: the body of a cell magic)."""
OPAQUE_MAGICS = frozenset({"run", "store"})
"""Magics that may bind any name (``%run`` a script, ``%store -r``)."""
OPAQUE_CALLS = frozenset({"exec", "eval", "globals", "vars", "locals"})
"""Builtins through which a cell may bind names it never spells."""


@dataclass(frozen=True)
class CallSite:
    """A call in a cell, as written: what an effect pattern is matched against."""

    name: str
    """Dotted: ``np.random.seed``, ``get_ipython().system``; ``?`` for any other expression
    (``?.write_text`` for ``Path(p).write_text``)."""
    args: tuple[str | None, ...] = ()
    """Positional arguments that are string constants (None: anything else)."""
    keywords: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True)
class Mutation:
    """A cell may change in place the object a name held before the cell."""

    name: str
    target: str
    """What it calls or assigns: ``model.fit`` (a call), ``model.w`` or ``d[]`` (an item
    or attribute assigned), ``x`` (``x += ...``)."""
    call: bool


@dataclass
class FunctionCode:
    """What a function (or a class's methods) does when called, not when defined."""

    reads: set[str] = field(default_factory=set)
    """Globals its body reads."""
    binds: set[str] = field(default_factory=set)
    """Globals it assigns (declared ``global``)."""
    calls: list[CallSite] = field(default_factory=list)
    mutations: list[Mutation] = field(default_factory=list)
    """In-place changes to globals."""


@dataclass
class CellCode:
    """What one cell reads and binds."""

    binds: set[str] = field(default_factory=set)
    """Names bound at top level: assignments, imports, ``def``/``class``, ``for`` and
    ``with`` targets, walrus, ``except ... as``, ``match`` captures."""
    deletes: set[str] = field(default_factory=set)
    reads: set[str] = field(default_factory=set)
    """Names it loads before binding them: its inputs."""
    called: set[str] = field(default_factory=set)
    """Names it calls, decorates with, or passes to a call (which may call them): where it
    runs the bodies of functions defined elsewhere."""
    functions: dict[str, FunctionCode] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)
    """Name bound by an import, and what it is: ``{"np": "numpy", "seed": "random.seed"}``."""
    calls: list[CallSite] = field(default_factory=list)
    mutations: list[Mutation] = field(default_factory=list)
    """In-place changes to what names held before the cell."""
    derived: dict[str, set[str]] = field(default_factory=dict)
    """For each name bound, the names bound earlier in the cell its value was made from."""
    opaque: bool = False
    """It may bind names it never spells: a star import, ``%run``, ``exec``."""


def analyse(code: str) -> CellCode:
    """What a cell reads and binds; nothing if it does not parse (it never ran)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return CellCode()
    reader = _CellReader()
    reader.block(tree.body)
    return reader.cell


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return f"{node.func.id}()"
    return "?"


def _root(node: ast.expr) -> str | None:
    """The name an attribute or item chain starts from (``model`` in ``model.layer[0].w``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _stored(node: ast.Attribute | ast.Subscript) -> Mutation | None:
    """An item or attribute assigned or deleted (``model.w = ...``, ``del d[k]``), as a change
    to the object its chain starts from."""
    root = _root(node.value)
    if isinstance(node.ctx, ast.Load) or root is None:
        return None
    where = f".{node.attr}" if isinstance(node, ast.Attribute) else "[...]"
    return Mutation(root, f"{_dotted(node.value)}{where}", call=False)


def _text(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _call_site(node: ast.Call) -> CallSite:
    return CallSite(_dotted(node.func), tuple(_text(a) for a in node.args),
                    tuple((k.arg or "**", _text(k.value)) for k in node.keywords))


def _params(args: ast.arguments) -> set[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in every if a is not None}


def _def_time(args: ast.arguments) -> list[ast.expr]:
    """What a ``def`` or ``lambda`` evaluates where it is defined: defaults and annotations."""
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    annotations = [a.annotation for a in every if a is not None and a.annotation is not None]
    return [*args.defaults, *(d for d in args.kw_defaults if d is not None), *annotations]


class _Names(ast.NodeVisitor):
    """The names an expression or simple statement loads, stores and deletes, in one scope:
    comprehensions and lambdas add what they read from outside, and what a walrus in them binds."""

    def __init__(self) -> None:
        self.loads: set[str] = set()
        self.stores: set[str] = set()
        self.deletes: set[str] = set()
        self.calls: list[CallSite] = []
        self.called: set[str] = set()
        self.mutations: list[Mutation] = []
        self.embedded: list[str] = []
        """Code run by magics (``%time x = f()``), read as part of the cell."""
        self.opaque = False

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.loads.add(node.id)
        elif isinstance(node.ctx, ast.Store):
            self.stores.add(node.id)
        else:
            self.deletes.add(node.id)

    def _changed(self, node: ast.Attribute | ast.Subscript) -> None:
        mutation = _stored(node)
        if mutation is not None:
            self.mutations.append(mutation)
        self.generic_visit(node)

    visit_Attribute = visit_Subscript = _changed

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):  # x += ... reads x, and may change a list in place
            self.loads.add(node.target.id)
            self.mutations.append(Mutation(node.target.id, node.target.id, call=False))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        site = _call_site(node)
        name, args = site.name, site.args
        self.calls.append(site)
        self.called |= {n.id for n in [node.func, *node.args, *(k.value for k in node.keywords)]
                        if isinstance(n, ast.Name)}
        if isinstance(node.func, ast.Attribute):
            root = _root(node.func.value)
            if root is not None:
                self.mutations.append(Mutation(root, name, call=True))
        if name in OPAQUE_CALLS:
            self.opaque = True
        if name in ("get_ipython().run_line_magic", "get_ipython().run_cell_magic") and args and args[0]:
            self._magic(args[0], args)
        self.generic_visit(node)

    def _magic(self, magic: str, args: tuple[str | None, ...]) -> None:
        if magic in OPAQUE_MAGICS:
            self.opaque = True
        where = CODE_MAGICS.get(magic)
        code = args[where] if where is not None and len(args) > where else None
        if code is not None:
            self.embedded.append(code)
        if magic == "capture" and len(args) > 1 and args[1]:  # %%capture [--no-stderr] out binds out
            self.stores |= {word for word in args[1].split() if word.isidentifier()}

    def _scope(self, local: set[str], inner: _Names) -> None:
        """Take what a nested scope reads from outside it (``local`` are its own names)."""
        self.loads |= inner.loads - local
        self.stores |= inner.stores - local  # a walrus in a comprehension binds outside it
        self.calls += inner.calls
        self.called |= inner.called - local
        self.mutations += [m for m in inner.mutations if m.name not in local]
        self.embedded += inner.embedded
        self.opaque = self.opaque or inner.opaque

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in _def_time(node.args):
            self.visit(expr)
        inner = _Names()
        inner.visit(node.body)
        self._scope(_params(node.args), inner)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        self.visit(node.generators[0].iter)  # the first iterable is evaluated outside
        inner = _Names()
        local: set[str] = set()
        for i, generator in enumerate(node.generators):
            targets = _Names()
            targets.visit(generator.target)
            local |= targets.stores
            inner.loads |= targets.loads
            if i:
                inner.visit(generator.iter)
            for condition in generator.ifs:
                inner.visit(condition)
        for element in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
            inner.visit(element)
        self._scope(local, inner)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> FunctionCode:
    """What a function's body reads and binds of the globals, when called."""
    body = _Names()
    declared: set[str] = set()
    local = _params(node.args)
    for child in ast.walk(node):
        if isinstance(child, ast.Global):
            declared |= set(child.names)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child is not node:
            local.add(child.name)
        elif isinstance(child, ast.arg):
            local.add(child.arg)
        elif isinstance(child, ast.alias):
            local.add((child.asname or child.name).split(".")[0])
    for statement in node.body:
        for child in ast.walk(statement):
            if isinstance(child, ast.Name):
                body.visit_Name(child)
            elif isinstance(child, ast.Call):
                body.calls.append(_call_site(child))
                if isinstance(child.func, ast.Attribute) and (root := _root(child.func.value)) is not None:
                    body.mutations.append(Mutation(root, _dotted(child.func), call=True))
            elif isinstance(child, (ast.Attribute, ast.Subscript)) and (mutation := _stored(child)) is not None:
                body.mutations.append(mutation)
    local |= (body.stores | body.deletes) - declared
    return FunctionCode(reads=body.loads - local, binds=(body.stores | body.deletes) & declared,
                        calls=body.calls, mutations=[m for m in body.mutations if m.name not in local])


class _CellReader:
    """Walks a cell's statements in the order they run, so that a name is an input only if
    it is read before the cell binds it."""

    def __init__(self) -> None:
        self.cell = CellCode()
        self.bound: set[str] = set()

    def block(self, body: list[ast.stmt]) -> None:
        for statement in body:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.names([*node.decorator_list, *_def_time(node.args),
                        *([node.returns] if node.returns is not None else [])])
            self.cell.called |= {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
            self.cell.functions[node.name] = _function(node)
            self.bind({node.name}, set())
        elif isinstance(node, ast.ClassDef):
            self.names([*node.decorator_list, *node.bases, *(k.value for k in node.keywords)])
            self.cell.functions[node.name] = self.class_body(node.body)
            self.bind({node.name}, set())
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports(node)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.names([node.iter], targets=[node.target])
            self.block([*node.body, *node.orelse])
        elif isinstance(node, (ast.While, ast.If)):
            self.names([node.test])
            self.block([*node.body, *node.orelse])
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.names([item.context_expr], targets=[item.optional_vars] if item.optional_vars else [])
            self.block(node.body)
        elif isinstance(node, (ast.Try, ast.TryStar)):
            self.block(node.body)
            for handler in node.handlers:
                self.names([handler.type] if handler.type else [])
                if handler.name:
                    self.bind({handler.name}, set())
                self.block(handler.body)
            self.block([*node.orelse, *node.finalbody])
        elif isinstance(node, ast.Match):
            self.names([node.subject])
            for case in node.cases:
                self.names([case.pattern])
                self.names([case.guard] if case.guard else [])
                self.block(case.body)
        elif not isinstance(node, (ast.Global, ast.Nonlocal)):
            self.names([node])

    def names(self, nodes: list[ast.AST], targets: list[ast.expr] | None = None) -> None:
        """Read ``nodes``, then bind ``targets``, as one step of the cell."""
        found = _Names()
        for node in nodes:
            if isinstance(node, ast.pattern):
                self.pattern(node, found)
            else:
                found.visit(node)
        for target in targets or []:
            found.visit(target)
        self.cell.reads |= found.loads - self.bound
        self.cell.called |= found.called
        self.cell.calls += found.calls
        self.cell.mutations += [m for m in found.mutations if m.name not in self.bound]
        self.cell.deletes |= found.deletes
        self.cell.opaque = self.cell.opaque or found.opaque
        self.bind(found.stores, found.loads & self.bound)
        for code in found.embedded:
            self.embedded(code)

    def pattern(self, node: ast.pattern, found: _Names) -> None:
        for child in ast.walk(node):
            if isinstance(child, (ast.MatchAs, ast.MatchStar)) and child.name:
                found.stores.add(child.name)
            elif isinstance(child, ast.MatchMapping) and child.rest:
                found.stores.add(child.rest)
            elif isinstance(child, ast.MatchValue):
                found.visit(child.value)
            elif isinstance(child, ast.MatchClass):
                found.visit(child.cls)

    def bind(self, names: set[str], sources: set[str]) -> None:
        made_from = set(sources)
        for source in sources:
            made_from |= self.cell.derived.get(source, set())
        for name in names:
            self.cell.derived[name] = made_from - {name}
        self.cell.binds |= names
        self.bound |= names

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.cell.opaque = True  # binds what the module exports: conservatively, anything
                continue
            if isinstance(node, ast.ImportFrom):
                bound, what = alias.asname or alias.name, f"{node.module}.{alias.name}" if node.module else alias.name
            else:
                bound = alias.asname or alias.name.split(".")[0]
                what = alias.name if alias.asname else bound
            if not (isinstance(node, ast.ImportFrom) and node.level):
                self.cell.imports[bound] = what
            self.bind({bound}, set())

    def class_body(self, body: list[ast.stmt]) -> FunctionCode:
        """A class body runs now, in a scope of its own: what it reads from outside is an
        input of the cell; its methods run later, as the class's :class:`FunctionCode`."""
        methods = FunctionCode()
        local: set[str] = set()
        for statement in body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                method = _function(statement)
                methods.reads |= method.reads
                methods.binds |= method.binds
                methods.calls += method.calls
                methods.mutations += method.mutations
                found = _Names()
                for expr in [*statement.decorator_list, *_def_time(statement.args)]:
                    found.visit(expr)
                local.add(statement.name)
            else:
                found = _Names()
                found.visit(statement)
            self.cell.reads |= found.loads - local - self.bound
            self.cell.called |= found.called
            self.cell.calls += found.calls
            local |= found.stores
        return methods  # a method's body does not see the class's names: what it reads is global

    def embedded(self, code: str) -> None:
        """Code a magic runs in the namespace, read as if it were the cell's (it may use IPython syntax)."""
        from IPython.core.inputtransformer2 import TransformerManager

        try:
            tree = ast.parse(TransformerManager().transform_cell(code))  # type: ignore[no-untyped-call]
        except (SyntaxError, ValueError):
            return
        self.block(tree.body)
