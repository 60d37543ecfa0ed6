"""Renaming apart the top-level names a snippet of code binds, so that many snippets can run
in one namespace and each keeps its own variables.

Every name the statements bind at module level (assignments, ``for`` and ``with`` targets,
``def`` and ``class``, imports, ``except ... as``) gets a suffix wherever it refers to that
binding, nested functions and classes included; a function's own locals and parameters,
attribute names, keyword arguments and the names a ``*`` import brings in are left alone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _bound_here(body: Iterable[ast.AST]) -> set[str]:
    """The names ``body`` binds in its own scope (nested scopes are not entered, only what
    they evaluate in this one: decorators, defaults, bases)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.split(".")[0]) for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            outside: list[ast.AST] = [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
            if not isinstance(node, ast.Lambda):
                outside += node.decorator_list
            for child in outside:
                visit(child)
        elif isinstance(node, ast.ClassDef):
            for child in (*node.decorator_list, *node.bases, *node.keywords):
                visit(child)
        elif isinstance(node, _SCOPES):
            visit(node.generators[0].iter)  # type: ignore[union-attr]
        else:
            for child in ast.iter_child_nodes(node):
                visit(child)

    for node in body:
        visit(node)
    return names


def _parameters(args: ast.arguments) -> set[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
    return {a.arg for a in every}


class _Renamer(ast.NodeTransformer):
    """Renames the module-level names in ``mapping`` wherever they refer to the module's
    binding: in a nested scope, unless that scope (or an enclosing function) binds the name."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping
        self.scopes: list[tuple[str, set[str]]] = []
        """Enclosing scopes, innermost last: ("function" or "class", names bound there)."""

    def _module_name(self, name: str) -> bool:
        if name not in self.mapping:
            return False
        for i, (kind, local) in enumerate(reversed(self.scopes)):
            if kind == "class" and i > 0:
                continue  # a class's names are not seen from the functions inside it
            if name in local:
                return False
        return True

    def _renamed(self, name: str) -> str:
        return self.mapping[name] if self._module_name(name) else name

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self._renamed(node.id)
        return node

    def visit_Global(self, node: ast.Global) -> ast.Global:
        node.names = [self.mapping.get(n, n) for n in node.names]
        return node

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.ExceptHandler:
        if node.name:
            node.name = self._renamed(node.name)
        self.generic_visit(node)
        return node

    def visit_Import(self, node: ast.Import) -> ast.AST | list[ast.AST]:
        out: list[ast.AST] = []
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            if not self._module_name(bound):
                out.append(ast.Import(names=[alias]))
            elif alias.asname or "." not in alias.name:
                out.append(ast.Import(names=[ast.alias(alias.name, self.mapping[bound])]))
            else:
                # ``import a.b`` binds ``a``, as ``__import__("a.b")`` returns it
                call = ast.Call(ast.Name("__import__", ast.Load()), [ast.Constant(alias.name)], [])
                out.append(ast.Assign([ast.Name(self.mapping[bound], ast.Store())], call))
        return out

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.ImportFrom:
        node.names = [
            ast.alias(a.name, self.mapping[a.asname or a.name])
            if a.name != "*" and self._module_name(a.asname or a.name) else a
            for a in node.names
        ]
        return node

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> ast.AST:
        # defaults, annotations and decorators are evaluated where the function is defined
        args = node.args
        args.defaults = [self.visit(d) for d in args.defaults]
        args.kw_defaults = [d if d is None else self.visit(d) for d in args.kw_defaults]
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)):
            if arg.annotation is not None:
                arg.annotation = self.visit(arg.annotation)
        body = node.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else [node.body]
        if not isinstance(node, ast.Lambda):
            node.decorator_list = [self.visit(d) for d in node.decorator_list]
            if node.returns is not None:
                node.returns = self.visit(node.returns)
            node.name = self._renamed(node.name)
        declared = {n for stmt in body for sub in ast.walk(stmt) if isinstance(sub, ast.Global) for n in sub.names}
        self.scopes.append(("function", (_bound_here(body) | _parameters(node.args)) - declared))
        if isinstance(node, ast.Lambda):
            node.body = self.visit(node.body)
        else:
            node.body = [self.visit(stmt) for stmt in node.body]
        self.scopes.pop()
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.bases = [self.visit(b) for b in node.bases]
        node.keywords = [self.visit(k) for k in node.keywords]
        node.name = self._renamed(node.name)
        self.scopes.append(("class", _bound_here(node.body)))
        node.body = [self.visit(stmt) for stmt in node.body]
        self.scopes.pop()
        return node

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> ast.AST:
        first = node.generators[0]
        first.iter = self.visit(first.iter)  # evaluated in the enclosing scope
        targets = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        self.scopes.append(("function", targets))
        for i, generator in enumerate(node.generators):
            generator.target = self.visit(generator.target)
            if i:
                generator.iter = self.visit(generator.iter)
            generator.ifs = [self.visit(c) for c in generator.ifs]
        for field in ("elt", "key", "value"):
            if hasattr(node, field):
                setattr(node, field, self.visit(getattr(node, field)))
        self.scopes.pop()
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension


def rename_apart(statements: Iterable[str], suffix: str) -> tuple[list[str], dict[str, str]]:
    """``statements`` with every name they bind at module level renamed to ``name + suffix``.

    Parameters
    ----------
    statements
        Python source, one or more statements each; the names are collected over all of
        them, so a later statement's binding is renamed in earlier ones too.
    suffix
        Appended to each name, e.g. ``"__k17"``.

    Returns
    -------
    The renamed statements, in order, and the mapping from old names to new.
    """
    trees = [ast.parse(s) for s in statements]
    mapping = {name: name + suffix for name in sorted(set().union(*(_bound_here(t.body) for t in trees)))}
    renamer = _Renamer(mapping)
    return [ast.unparse(ast.fix_missing_locations(renamer.visit(t))) for t in trees], mapping
