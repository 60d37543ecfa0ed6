"""The REST API's OpenAPI description (``docs/developers/rest-api.yaml``) against the handlers.

Nothing here starts a server: the routes come from ``default_handlers``, the status codes
from the handlers' source, read with ``ast``:

* ``HTTPError(N, ...)`` and ``self.set_status(N)`` with a literal ``N``, in a handler's method
  or in what it calls (``self.helper(...)`` of its classes, functions of the handlers module,
  lambdas passed along), a parameter's value where ``N`` is one (``answer(status=204)``, the
  default ``status=200``);
* a code computed from the module's domain-error mapping (``_STATUS``: ``raise
  HTTPError(code, ...)`` in ``_http_errors``): every code of that mapping;
* 403, which every route answers through jupyter_server's authentication and authorizer.

A route regex's named group of literal alternatives (``(?P<action>checkpoint|suspend|...)``)
is one path per alternative (their query parameters differ); any other named group is a
``{name}`` path parameter.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from jupyter_server.utils import url_path_join

import jupyter_gpuckpt
from jupyter_gpuckpt.extension import app as extension_app
from jupyter_gpuckpt.extension import handlers

SPEC = Path(__file__).resolve().parents[2] / "docs" / "developers" / "rest-api.yaml"
METHODS = ("get", "post", "put", "patch", "delete")
AUTHORIZER = frozenset({403})
"""What every route answers through jupyter_server: not logged in, XSRF, or the authorizer's no."""
_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>(?P<body>[^()]*)\)")
_LITERALS = re.compile(r"[\w-]+(?:\|[\w-]+)*")


@cache
def spec() -> dict[str, Any]:
    loaded = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict), f"{SPEC} is not a YAML mapping"
    return loaded


def _expand(pattern: str) -> Iterator[str]:
    """The path templates of a route regex: literal alternatives expanded, other named groups
    as ``{name}``."""
    match = _GROUP.search(pattern)
    if match is None:
        assert re.fullmatch(r"[\w/{}.-]*", pattern), (
            f"route {pattern!r} has regex syntax outside a named group: teach this test to read it")
        yield pattern
        return
    head, tail = pattern[:match.start()], pattern[match.end():]
    body = match["body"]
    choices = body.split("|") if _LITERALS.fullmatch(body) else ["{" + match["name"] + "}"]
    for choice in choices:
        for rest in _expand(tail):
            yield head + choice + rest


def _mounted(route: str) -> str:
    """The route's path below the server's base URL (the spec's server URL), as jupyter_server's
    ``ExtensionApp._prepare_handlers`` mounts an extension's handlers."""
    return url_path_join("/", route)


def _own_classes(cls: type) -> list[type]:
    """The handler's class and its bases defined in the handlers module (not tornado's, whose
    ``RequestHandler`` has every method, answering 405)."""
    return [c for c in cls.__mro__ if c.__module__ == handlers.__name__]


def _methods(cls: type) -> list[str]:
    return [m for m in METHODS if any(m in vars(c) for c in _own_classes(cls))]


@cache
def operations() -> dict[tuple[str, str], type]:
    """``(path template, method)`` -> handler class, from ``default_handlers``."""
    ops: dict[tuple[str, str], type] = {}
    for route, cls in handlers.default_handlers:
        for template in _expand(route):
            for method in _methods(cls):
                ops[(_mounted(template), method)] = cls
    return ops


def _documented() -> set[tuple[str, str]]:
    return {(path, method) for path, item in (spec().get("paths") or {}).items()
            for method in item if method in METHODS}


def _show(pairs: set[tuple[str, str]]) -> str:
    return "\n".join(f"  {method.upper()} {path}" for path, method in sorted(pairs))


# -- status codes from the handlers' source ----------------------------------------------------


class _Source:
    """The handlers module's syntax tree, and what each function can answer."""

    def __init__(self) -> None:
        tree = ast.parse(inspect.getsource(handlers))
        self.functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.mappings: dict[str, frozenset[int]] = {}
        """Module-level collections of status codes (the domain-error mapping)."""
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and isinstance(value, (ast.List, ast.Tuple, ast.Dict, ast.Set)):
                codes = frozenset(n.value for n in ast.walk(value) if isinstance(n, ast.Constant)
                                  and type(n.value) is int and 100 <= n.value <= 599)
                if codes:
                    self.mappings[target.id] = codes

    def method(self, classes: list[type], name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for cls in classes:
            for node in self.classes[cls.__name__].body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    return node
        return None

    def codes(self, classes: list[type], method: str) -> frozenset[int]:
        fn = self.method(classes, method)
        assert fn is not None, f"{classes[0].__name__}.{method} is not in {handlers.__name__}'s source"
        return frozenset(self._codes(fn, classes, {}, set()))

    def _codes(self, fn: ast.AST, classes: list[type], bound: dict[str, frozenset[int]],
               seen: set[Any]) -> set[int]:
        key = (id(fn), tuple(sorted(bound.items())))
        if key in seen:
            return set()
        seen.add(key)
        found: set[int] = set()
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            on_self = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
            if name == "HTTPError":
                status = node.args[0] if node.args else next(
                    (k.value for k in node.keywords if k.arg == "status_code"), None)
                found |= self._values(status, bound, fn, node)
            elif on_self and name == "set_status":
                found |= self._values(node.args[0] if node.args else None, bound, fn, node)
            elif on_self and name is not None and (helper := self.method(classes, name)) is not None:
                found |= self._codes(helper, classes, self._bind(helper, node, bound, skip_self=True), seen)
            elif isinstance(func, ast.Name) and func.id in self.functions:
                helper = self.functions[func.id]
                found |= self._codes(helper, classes, self._bind(helper, node, bound, skip_self=False), seen)
        return found

    def _values(self, expr: ast.expr | None, bound: dict[str, frozenset[int]], fn: ast.AST,
                call: ast.Call) -> frozenset[int]:
        """The codes ``expr`` can be: a literal, a parameter's values, or else every code of
        the mappings the function reads."""
        if isinstance(expr, ast.Constant) and type(expr.value) is int:
            return frozenset({expr.value})
        if isinstance(expr, ast.Name) and expr.id in bound:
            return bound[expr.id]
        read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in self.mappings}
        assert read, (f"line {call.lineno} of {handlers.__name__}: cannot tell which status "
                      f"{ast.unparse(call)} answers; teach this test to read it")
        return frozenset().union(*(self.mappings[name] for name in read))

    def _bind(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call,
              bound: dict[str, frozenset[int]], skip_self: bool) -> dict[str, frozenset[int]]:
        """The status codes the call gives the function's parameters (literal ints, or the
        caller's own such parameters), and their int defaults where it gives none."""
        positional = fn.args.posonlyargs + fn.args.args
        params = [a.arg for a in positional][1 if skip_self else 0:]
        defaults = dict(zip([a.arg for a in positional][len(positional) - len(fn.args.defaults):],
                            fn.args.defaults, strict=True))
        defaults.update({a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d})
        given: dict[str, ast.expr] = dict(zip(params, call.args, strict=False))
        given.update({k.arg: k.value for k in call.keywords if k.arg})
        values: dict[str, frozenset[int]] = {}
        for param in [*params, *(a.arg for a in fn.args.kwonlyargs)]:
            expr = given.get(param, defaults.get(param))
            if isinstance(expr, ast.Constant) and type(expr.value) is int:
                values[param] = frozenset({expr.value})
            elif isinstance(expr, ast.Name) and expr.id in bound:
                values[param] = bound[expr.id]
        return values


@cache
def source() -> _Source:
    return _Source()


def derived_codes(cls: type, method: str) -> frozenset[int]:
    return source().codes(_own_classes(cls), method) | AUTHORIZER


def _documented_codes(path: str, method: str) -> set[int]:
    responses = spec()["paths"][path][method].get("responses") or {}
    return {int(code) for code in responses if str(code).isdigit()}


# -- the tests ----------------------------------------------------------------------------------


def test_the_handlers_are_mounted_as_they_are() -> None:
    """The app adds ``default_handlers`` as they are (jupyter_server puts the base URL in
    front): no prefix of its own that the paths here would miss."""
    source_text = inspect.getsource(extension_app.GPUCheckpointApp.initialize_handlers)
    assert "default_handlers" in source_text and "url_path_join" not in source_text, (
        "GPUCheckpointApp.initialize_handlers changed how it mounts the routes: update _mounted()")
    assert "url_path_join" not in inspect.getsource(handlers), (
        "handlers.py now joins a prefix onto its routes: update _mounted()")
    servers = spec().get("servers") or [{}]
    assert servers[0].get("url") == "/", "the spec's server URL must be the server's base URL, '/'"


def test_every_route_and_method_is_documented_and_nothing_else() -> None:
    derived = set(operations())
    documented = _documented()
    missing, extra = derived - documented, documented - derived
    problems = []
    if missing:
        problems.append(f"{SPEC.name} lacks these operations of default_handlers:\n{_show(missing)}")
    if extra:
        problems.append(f"{SPEC.name} documents operations no handler serves:\n{_show(extra)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("path", "method"), sorted(operations()), ids=lambda v: v.upper() if v in METHODS else v)
def test_every_status_the_handler_answers_is_documented(path: str, method: str) -> None:
    cls = operations()[(path, method)]
    if (path, method) not in _documented():
        pytest.fail(f"{method.upper()} {path} ({cls.__name__}) is not in {SPEC.name}")
    derived = derived_codes(cls, method)
    documented = _documented_codes(path, method)
    missing, extra = derived - documented, documented - derived
    problems = []
    if missing:
        problems.append(f"{SPEC.name}: {method.upper()} {path} lacks the responses {sorted(missing)} "
                        f"that {cls.__name__}.{method} can answer")
    if extra:
        problems.append(f"{SPEC.name}: {method.upper()} {path} documents {sorted(extra)}, which "
                        f"{cls.__name__}.{method} never answers (it answers {sorted(derived)})")
    assert not problems, "\n".join(problems)


def test_the_derivation_reads_the_codes_it_should() -> None:
    """The reading of the source, on codes known by heart: a check of the test itself."""
    assert source().mappings["_STATUS"] == {404, 409, 500, 503}
    assert derived_codes(handlers.CheckpointHandler, "delete") == {204, 400, 403, 404, 409, 500, 503}
    assert derived_codes(handlers.KernelActionHandler, "post") == {200, 202, 400, 403, 404, 409, 500, 503}
    assert derived_codes(handlers.KernelsHandler, "get") == {200, 403, 404, 409, 500, 503}


def _resolve(ref: str) -> Any:
    """What a local ``$ref`` points at, or None if it does not resolve."""
    if not ref.startswith("#/"):
        return None
    node: Any = spec()
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not (isinstance(node, dict) and part in node):
            return None
        node = node[part]
    return node


def _deref(node: Any) -> Any:
    """The node, its ``$ref`` followed ({} where it does not resolve: reported on its own)."""
    while isinstance(node, dict) and "$ref" in node:
        node = _resolve(node["$ref"]) or {}
    return node


def _refs(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield where, value
            else:
                yield from _refs(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _refs(value, f"{where}/{i}")


def test_the_spec_looks_like_openapi_3() -> None:
    doc = spec()
    assert re.fullmatch(r"3\.0\.\d+", str(doc.get("openapi"))), f"openapi is {doc.get('openapi')!r}, not 3.0.x"
    info = doc.get("info") or {}
    assert info.get("title"), "info.title is missing"
    assert info.get("version") == jupyter_gpuckpt.__version__, (
        f"info.version is {info.get('version')!r}, the package is {jupyter_gpuckpt.__version__}")
    problems = [f"{where}: $ref {ref!r} does not resolve in {SPEC.name}"
                for where, ref in _refs(doc) if _resolve(ref) is None]
    for path, item in doc["paths"].items():
        declared_at_path = [_deref(p) for p in (item.get("parameters") or [])]
        for method in (m for m in item if m in METHODS):
            op = item[method]
            params = declared_at_path + [_deref(p) for p in (op.get("parameters") or [])]
            in_path = {p["name"] for p in params if p.get("in") == "path"}
            in_template = set(re.findall(r"\{(\w+)\}", path))
            if in_template - in_path:
                problems.append(f"{method.upper()} {path}: path parameters {sorted(in_template - in_path)} "
                                "are not declared")
            if in_path - in_template:
                problems.append(f"{method.upper()} {path}: declares path parameters {sorted(in_path - in_template)} "
                                "the path does not have")
            problems += [f"{method.upper()} {path}: path parameter {p['name']} must be required"
                         for p in params if p.get("in") == "path" and p.get("required") is not True]
            problems += [f"{method.upper()} {path}: parameter {p.get('name')} lacks name, in or schema"
                         for p in params if not (p.get("name") and p.get("in") and "schema" in p)]
            responses = op.get("responses") or {}
            if not responses:
                problems.append(f"{method.upper()} {path}: no responses")
            for code, response in responses.items():
                if not re.fullmatch(r"[1-5]\d\d|default", str(code)):
                    problems.append(f"{method.upper()} {path}: response {code!r} is no status code")
                if not (_deref(response) or {}).get("description"):
                    problems.append(f"{method.upper()} {path}: response {code} has no description")
    assert not problems, "\n".join(problems)


def _query_arguments(cls: type) -> set[str]:
    """The query arguments a handler reads (``self.get_argument("name", ...)``)."""
    names = set()
    for c in _own_classes(cls):
        for node in ast.walk(source().classes[c.__name__]):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("get_argument", "get_query_argument") and node.args
                    and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    return names


def test_every_query_argument_a_handler_reads_is_documented() -> None:
    problems = []
    for cls in sorted(set(operations().values()), key=lambda c: c.__name__):
        ops = [(p, m) for (p, m), c in operations().items() if c is cls and (p, m) in _documented()]
        declared: set[str] = set()
        for path, method in ops:
            item = spec()["paths"][path]
            for p in [*(item.get("parameters") or []), *(item[method].get("parameters") or [])]:
                p = _deref(p)
                if p.get("in") == "query":
                    declared.add(p["name"])
        missing = _query_arguments(cls) - declared
        if missing and ops:
            problems.append(f"{cls.__name__} reads the query arguments {sorted(missing)}, which none of "
                            f"its operations in {SPEC.name} declares")
    assert not problems, "\n".join(problems)
