"""astropy.wcs's WCSLIB parameter structs that astropy itself does not pickle: ``Celprm``
(celestial transformation) and ``Prjprm`` (projection).

Each comes back as a new struct with the members a user gives (WCSLIB's "given" members),
set up again with ``set()`` if it had been, which recomputes every member WCSLIB derives
(the Euler angles, the projection's constants): the same struct, member for member. A
``Celprm``'s projection is its own member, rebuilt with it.
"""

from __future__ import annotations

from typing import Any

from .live_objects import Reducer

_CELPRM_GIVEN = ("offset", "phi0", "theta0", "ref")
_PRJPRM_GIVEN = ("code", "r0", "pv", "phi0", "theta0", "bounds")


def _given(struct: Any, names: tuple[str, ...]) -> dict[str, Any]:
    # ``_flag`` is WCSLIB's own: non-zero once ``set()`` has run
    return {**{name: getattr(struct, name) for name in names}, "set": struct._flag != 0}


def _fill(struct: Any, names: tuple[str, ...], state: dict[str, Any]) -> None:
    for name in names:
        setattr(struct, name, state[name])


def _prjprm(state: dict[str, Any], into: Any = None) -> Any:
    from astropy.wcs import Prjprm

    prj = Prjprm() if into is None else into
    _fill(prj, _PRJPRM_GIVEN, state)
    if state["set"]:
        prj.set()
    return prj


def _celprm(state: dict[str, Any], projection: dict[str, Any]) -> Any:
    from astropy.wcs import Celprm

    cel = Celprm()
    _fill(cel, _CELPRM_GIVEN, state)
    _prjprm(projection, into=cel.prj)
    if state["set"]:
        cel.set()
    return cel


def _reduce_celprm(cel: Any) -> Any:
    return _celprm, (_given(cel, _CELPRM_GIVEN), _given(cel.prj, _PRJPRM_GIVEN))


def _reduce_prjprm(prj: Any) -> Any:
    return _prjprm, (_given(prj, _PRJPRM_GIVEN),)


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    from astropy.wcs import Celprm, Prjprm

    return {Celprm: _reduce_celprm, Prjprm: _reduce_prjprm}
