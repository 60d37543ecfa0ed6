"""What re-running a cell does beyond binding names, told from the calls in its code.

The patterns are the one list of such effects: ``fnmatch`` patterns over a call's dotted
name once import aliases are resolved (``np.random.seed`` is ``numpy.random.seed``), and
``*.name`` for a method on anything. Reading code cannot be complete (a library's function
may write a file), so this names the usual suspects; the rebuild puts the random number
generators back by itself, whatever the cells drew.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from .history import CallSite, Mutation

KINDS = {
    "rng": "reseeds or draws from the random number generators",
    "files": "writes or removes files",
    "network": "sends requests or opens connections",
    "processes": "runs processes or shell commands",
    "in_place": "may change a restored variable in place",
}
"""Each kind of effect, as the plan words it."""

PATTERNS: dict[str, tuple[str, ...]] = {
    "rng": (
        "random.*", "numpy.random.*", "cupy.random.*", "tensorflow.random.*",
        "torch.manual_seed", "torch.seed", "torch.random.*", "torch.cuda.manual_seed*", "torch.cuda.seed*",
        "torch.rand", "torch.rand_like", "torch.randn", "torch.randn_like", "torch.randint", "torch.randint_like",
        "torch.randperm", "torch.normal", "torch.bernoulli", "torch.multinomial", "torch.poisson",
        "transformers.set_seed", "*.seed_everything",
    ),
    "files": (
        "os.remove", "os.unlink", "os.rename", "os.renames", "os.replace", "os.rmdir", "os.removedirs",
        "os.mkdir", "os.makedirs", "os.truncate", "os.chmod", "os.chown", "os.symlink", "os.link",
        "shutil.copy*", "shutil.move", "shutil.rmtree", "shutil.make_archive", "shutil.unpack_archive",
        "shutil.chown", "torch.save", "numpy.save*", "pickle.dump", "json.dump", "joblib.dump", "dill.dump",
        "*.to_csv", "*.to_parquet", "*.to_excel", "*.to_pickle", "*.to_hdf", "*.to_feather", "*.to_netcdf",
        "*.to_zarr", "*.tofile", "*.savefig", "*.save", "*.save_pretrained", "*.save_model", "*.save_weights",
        "*.write_text", "*.write_bytes", "*.touch", "*.unlink", "*.rmdir", "*.mkdir", "*.write", "*.writelines",
    ),
    "network": (
        "requests.*", "urllib.request.*", "urllib3.*", "httpx.*", "aiohttp.*", "http.client.*", "socket.*",
        "smtplib.*", "ftplib.*", "websocket.*", "websockets.*", "paramiko.*", "boto3.*", "grpc.*",
        "webbrowser.*", "huggingface_hub.*", "datasets.load_dataset", "*.from_pretrained", "*.to_sql",
    ),
    "processes": (
        "subprocess.*", "os.system", "os.popen", "os.exec*", "os.spawn*", "os.fork*", "os.kill", "os.killpg",
        "os.startfile", "get_ipython().system", "get_ipython().getoutput",
    ),
}
"""Calls that have each kind of effect."""

OPEN_CALLS = (("open", 1), ("io.open", 1), ("codecs.open", 1), ("gzip.open", 1), ("bz2.open", 1),
              ("lzma.open", 1), ("*.open", 0))
"""Calls that open a file, and where their mode is: they write where it has ``w``, ``a``,
``x`` or ``+``, or is not a constant (``Path.open`` takes it first)."""

MAGICS = {
    "processes": frozenset({"system", "sx", "sc", "bash", "sh", "script", "pip", "conda", "mamba", "uv",
                            "run", "perl", "ruby", "python", "python2", "python3", "pypy", "cmd",
                            "powershell"}),
    "files": frozenset({"writefile", "save", "store", "logstart"}),
}
"""Magics (``%name``, ``%%name``) that have each kind of effect."""

READ_ONLY_METHODS = frozenset({
    "copy", "clone", "detach", "cpu", "numpy", "tolist", "item", "keys", "values", "items", "get", "count",
    "index", "head", "tail", "describe", "info", "sum", "mean", "std", "var", "min", "max", "any", "all",
    "size", "dim", "numel", "state_dict", "parameters", "named_parameters", "buffers", "named_buffers",
    "children", "modules", "named_modules", "reshape", "view", "astype", "to_dict", "to_numpy", "format",
    "startswith", "endswith", "split", "join", "strip", "lower", "upper", "encode", "decode", "groupby",
    "iterrows", "isna", "isnull", "predict", "predict_proba", "transform", "score", "get_params",
})
"""Methods that do not change their object: calling them on a restored variable is no effect."""


def resolve(name: str, aliases: dict[str, str]) -> str:
    """A call's dotted name with its first part's import alias resolved."""
    head, dot, rest = name.partition(".")
    called = "()" if head.endswith("()") else ""  # Path('p').write_text
    head = head.removesuffix(called)
    return f"{aliases.get(head, head)}{called}{dot}{rest}"


def call_effects(call: CallSite, aliases: dict[str, str]) -> list[tuple[str, str]]:
    """The effects of one call, as ``(kind, what)``: ``("rng", "numpy.random.seed")``."""
    name = resolve(call.name, aliases)
    found = [(kind, name) for kind, patterns in PATTERNS.items()
             if any(fnmatchcase(name, pattern) for pattern in patterns)]
    if name in ("get_ipython().run_line_magic", "get_ipython().run_cell_magic") and call.args and call.args[0]:
        magic = call.args[0]
        found += [(kind, f"%{magic}") for kind, magics in MAGICS.items() if magic in magics]
    position = next((p for pattern, p in OPEN_CALLS if fnmatchcase(name, pattern)), None)
    if position is not None and _writes(call, position):
        found.append(("files", f"{name}(..., mode)"))
    return found


def _writes(call: CallSite, position: int) -> bool:
    keywords = dict(call.keywords)
    if "mode" in keywords:
        mode = keywords["mode"]
    elif len(call.args) > position:
        mode = call.args[position]
    else:
        return False  # opened for reading
    return mode is None or any(c in mode for c in "wax+")


def in_place(mutation: Mutation, restored: set[str], aliases: dict[str, str]) -> str | None:
    """What a change in place to a restored variable is, or None if it is not one (a module's
    function, a read-only method, a call with an effect of its own)."""
    if mutation.name not in restored or mutation.name in aliases:
        return None
    if mutation.call:
        method = mutation.target.rpartition(".")[2]
        if method in READ_ONLY_METHODS or call_effects(CallSite(mutation.target), aliases):
            return None
        return f"{mutation.target}(...)"
    return f"{mutation.target} = ..." if mutation.target != mutation.name else f"{mutation.name} += ..."
