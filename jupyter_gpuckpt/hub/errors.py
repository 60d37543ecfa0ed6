"""The hub service's domain errors. ``handlers.py`` alone turns them into HTTP status codes.

Each message is the one line an admin reads: what was refused or failed, and why.
"""


class HubServiceError(Exception):
    """Something the service was asked for was refused or failed."""


class UnknownUser(HubServiceError):
    """No such user, or one the asking user may not see (the same answer for both, so that
    a user cannot probe for others' names)."""


class Forbidden(HubServiceError):
    """The asking user may see that user's kernels but not suspend or resume them."""


class KernelNotFound(HubServiceError):
    """The user's server has no kernel with that id."""


class WrongState(HubServiceError):
    """The user's server refused the operation in the kernel's present state."""


class ServerUnavailable(HubServiceError):
    """A user server (or the hub's API) could not be reached, or answered an error."""
