"""The jupyter_server extension: its settings and wiring, REST routes, kernel websockets,
lifecycle events and metrics."""
