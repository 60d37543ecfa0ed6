"""Loggers and their handlers: a logger comes back as the restoring kernel's
``logging.getLogger(name)`` (loggers are process singletons), set up as it was.

Pickle's own reduction of a logger keeps only its name, so a restored logger had lost its
level and handlers. Here its level, handlers, filters, ``propagate`` and ``disabled`` go
with it and replace the restoring kernel's (the rest of that kernel's logging is left as
it is). A handler is rebuilt through its base class's constructor, which registers it with
``logging`` (flushed at exit) and gives it a new lock, and then gets the rest of its state:
a ``FileHandler`` reopens its file in append mode (the restored kernel adds to the log
rather than truncating it), a ``StreamHandler`` on ``sys.stderr`` writes to the restoring
kernel's (see :mod:`.std_streams`). The kernel application's own logger (ipykernel's) is
set up by every kernel as it starts, to its own streams: it keeps only its name.

All of that waits until the restore commits (see :func:`.live_objects.on_commit`): until
then a handler is a bare instance of its class, and the logger, taken from
``logging.getLogger`` (which makes one, unconfigured, if this kernel had none), keeps this
kernel's configuration. The handlers are set up first, then the loggers that hold them.
"""

from __future__ import annotations

import logging
import sys
from functools import partial
from typing import Any

from .live_objects import Reducer, on_commit

_UNCONFIGURED = {"level": logging.NOTSET, "propagate": True, "disabled": False, "handlers": [], "filters": []}


def _kernel_logger(logger: logging.Logger) -> bool:
    """Whether ``logger`` is the running (traitlets) application's: ipykernel's own."""
    if "traitlets.config" not in sys.modules:
        return False
    from traitlets.config import Application

    return bool(Application.initialized() and Application.instance().log is logger)


def _configure_on_commit(logger: logging.Logger, config: dict[str, Any]) -> None:
    on_commit(f"logger {logger.name!r}", partial(_configure, logger, config))


def _configure(logger: logging.Logger, config: dict[str, Any]) -> None:
    """Give ``logger`` its saved configuration, leaving out a handler whose own set-up failed
    (a bare handler raised on every later record), and then fail, so the report says so."""
    logger.setLevel(config["level"])
    logger.propagate = config["propagate"]
    logger.disabled = config["disabled"]
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    broken = [handler for handler in config["handlers"] if "lock" not in vars(handler)]
    for handler in config["handlers"]:
        if handler not in broken:
            logger.addHandler(handler)
    for log_filter in list(logger.filters):
        logger.removeFilter(log_filter)
    for log_filter in config["filters"]:
        logger.addFilter(log_filter)
    if broken:
        raise RuntimeError(f"its {', '.join(type(h).__name__ for h in broken)} could not be set up again, "
                           "so the logger runs without it")


def _reduce_logger(logger: logging.Logger) -> Any:
    name = None if isinstance(logger, logging.RootLogger) else logger.name
    if logging.getLogger(name) is not logger:
        return NotImplemented  # not the registered one: pickle refuses it, naming it
    config = {"level": logger.level, "propagate": logger.propagate, "disabled": logger.disabled,
              "handlers": list(logger.handlers), "filters": list(logger.filters)}
    if config == _UNCONFIGURED or _kernel_logger(logger):
        return logging.getLogger, (name,)
    return logging.getLogger, (name,), config, None, None, _configure_on_commit


def _new_handler(kind: type[logging.Handler]) -> logging.Handler:
    return kind.__new__(kind)


def _set_up_handler(handler: logging.Handler, args: tuple[Any, ...], state: dict[str, Any]) -> None:
    """Initialize ``handler`` through the constructor of the base it derives from, then give it its state."""
    if isinstance(handler, logging.FileHandler):
        filename, encoding, delay, errors = args
        logging.FileHandler.__init__(handler, filename, "a", encoding, delay, errors)
    elif isinstance(handler, logging.StreamHandler):
        logging.StreamHandler.__init__(handler, args[0])
    else:
        logging.Handler.__init__(handler, *args)
    state = dict(state)
    name = state.pop("_name", None)
    handler.__dict__.update(state)
    if name is not None:
        handler.set_name(name)  # registers it by name, as logging.config does


def _set_handler_state(handler: logging.Handler, saved: dict[str, Any]) -> None:
    on_commit(f"logging handler {type(handler).__name__}",
              partial(_set_up_handler, handler, saved["args"], saved["state"]))


def _reduce_handler(handler: logging.Handler) -> Any:
    state = dict(vars(handler))
    state.pop("lock", None)  # a new one comes with the constructor
    args: tuple[Any, ...]
    if isinstance(handler, logging.FileHandler):
        args = (handler.baseFilename, handler.encoding, handler.stream is None, handler.errors)
        del state["stream"], state["mode"]
    elif isinstance(handler, logging.StreamHandler):
        args = (state.pop("stream"),)
    else:
        args = (handler.level,)
    return _new_handler, (type(handler),), {"args": args, "state": state}, None, None, _set_handler_state


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    return {logging.Logger: _reduce_logger, logging.RootLogger: _reduce_logger, logging.Handler: _reduce_handler}
