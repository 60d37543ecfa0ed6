"""The service's process: settings as traitlets, the tornado app, and its start.

The hub starts it (``python -m jupyter_gpuckpt.hub``) with ``$JUPYTERHUB_SERVICE_URL``
(where to listen), ``$JUPYTERHUB_SERVICE_PREFIX``, ``$JUPYTERHUB_API_URL`` and
``$JUPYTERHUB_API_TOKEN`` in its environment; settings come from the command line
(``--proxy-url=...``) or a ``jupyter_gpuckpt_hub_config.py`` in the working directory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth
from tornado import web
from traitlets import Float, Int, TraitError, Unicode, default, validate
from traitlets.config import Application

from .collect import KernelCollector
from .handlers import routes
from .hub_api import HubAPI
from .manager import HubKernelsManager


def duration(seconds: float | None) -> str:
    """``1 h 05 min``, ``42 s``; empty for None (the page's cells)."""
    if seconds is None:
        return ""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


class GPUCheckpointHubApp(Application):
    """Every user's GPU kernels for the hub's admins (and each user's own, for them)."""

    name = "jupyter-gpuckpt-hub"
    description = "The jupyter-gpuckpt JupyterHub service (README: Behind JupyterHub)."
    config_file_name = Unicode("jupyter_gpuckpt_hub_config", config=True, help="Config file to load (.py).")
    aliases = {"proxy-url": "GPUCheckpointHubApp.proxy_url", "log-level": "Application.log_level",
               "config": "GPUCheckpointHubApp.config_file_name"}

    service_url = Unicode(config=True, help="Where to listen. Default: $JUPYTERHUB_SERVICE_URL, set by the hub.")
    service_prefix = Unicode(config=True, help="The service's path on the hub's proxy, ending in /. Default: "
                                               "$JUPYTERHUB_SERVICE_PREFIX, set by the hub.")
    proxy_url = Unicode(config=True, help="The hub's public address as this service reaches it (the proxy): "
                                          "user servers are read there. Default: $JUPYTERHUB_GPUCKPT_PROXY_URL, "
                                          "else the origin of $JUPYTERHUB_PUBLIC_HUB_URL, else http://127.0.0.1:8000.")
    request_timeout = Float(10.0, config=True, help="Seconds a read of the hub or of one user server may take.")
    operation_timeout = Float(600.0, config=True, help="Seconds a suspend or resume may take (the service waits "
                                                       "for its result); 0: no limit.")
    concurrency = Int(16, config=True, help="User servers read at once.")

    @default("service_url")
    def _default_service_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    @default("service_prefix")
    def _default_service_prefix(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpuckpt/")

    @default("proxy_url")
    def _default_proxy_url(self) -> str:
        if os.environ.get("JUPYTERHUB_GPUCKPT_PROXY_URL"):
            return os.environ["JUPYTERHUB_GPUCKPT_PROXY_URL"]
        public = urlparse(os.environ.get("JUPYTERHUB_PUBLIC_HUB_URL", ""))
        return f"{public.scheme}://{public.netloc}" if public.netloc else "http://127.0.0.1:8000"

    @validate("proxy_url", "service_url")
    def _check_url(self, proposal: dict[str, Any]) -> str:
        url = urlparse(proposal["value"])
        if url.scheme not in ("http", "https") or not url.netloc:
            raise TraitError(f"{proposal['trait'].name} must be an http(s) URL, not {proposal['value']!r}")
        return str(proposal["value"])

    @validate("service_prefix")
    def _check_prefix(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"])
        return value if value.endswith("/") else f"{value}/"

    @validate("concurrency")
    def _check_concurrency(self, proposal: dict[str, Any]) -> int:
        if proposal["value"] < 1:
            raise TraitError("concurrency must be at least 1")
        return int(proposal["value"])

    def initialize(self, argv: Any = None) -> None:
        super().initialize(argv)
        if Path(f"{self.config_file_name}.py").exists():
            self.load_config_file(self.config_file_name, path=[os.getcwd()])

    def web_app(self) -> web.Application:
        """The tornado app: routes, templates, the hub's OAuth and the manager."""
        hub_auth = HubOAuth(parent=self, cache_max_age=60)  # $JUPYTERHUB_API_TOKEN, _URL ...
        collector = KernelCollector(self.proxy_url, hub_auth.api_token, self.request_timeout,
                                    self.operation_timeout or 1e9, self.concurrency)
        manager = HubKernelsManager(HubAPI(hub_auth.api_url, hub_auth.api_token, self.request_timeout), collector)
        return web.Application(
            routes(self.service_prefix), hub_auth=hub_auth, gpuckpt_manager=manager,
            service_prefix=self.service_prefix, template_path=str(Path(__file__).parent / "templates"),
            ui_methods={"duration": lambda _handler, seconds: duration(seconds)},
            # OAuth state cookies only: a restarted service has its users log in again (at once,
            # through the hub, without a password)
            cookie_secret=secrets.token_bytes(32), xsrf_cookies=True, login_url=hub_auth.login_url)

    @default("log_level")
    def _default_log_level(self) -> int:
        return logging.INFO

    async def _serve(self) -> None:
        url = urlparse(self.service_url)
        server = self.web_app().listen(url.port or 80, url.hostname or "")
        self.log.info("jupyter-gpuckpt hub service at %s%s, reading user servers at %s",
                      self.service_url.rstrip("/"), self.service_prefix, self.proxy_url)
        stopping = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):  # the hub ends its managed services so
            asyncio.get_running_loop().add_signal_handler(signum, stopping.set)
        await stopping.wait()
        self.log.info("jupyter-gpuckpt hub service stopping")
        server.stop()

    def start(self) -> None:
        asyncio.run(self._serve())


def main() -> None:
    GPUCheckpointHubApp.launch_instance()
