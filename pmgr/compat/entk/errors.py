"""RADICAL-EnTK's exceptions, as this project's errors (`pilot.entk.EnTKError`, ...).

EnTKError          the base of them all (an rp.PilotError): a workflow that cannot go on (a
                   pipeline failed, the pilot ended, a post_exec raised); run() raises it with
                   the first cause as __cause__
EnTKValueError     a value that is not accepted: names the object, the field, the value and
                   what is accepted (a ValueError, as every bad input in this project)
EnTKTypeError      a value of the wrong type (a TypeError, and a ValueError too)
EnTKMissingError   a mandatory field left unset (an AttributeError, and a ValueError too)
"""

from __future__ import annotations

from pilot.errors import PilotError

NAME_RULE = "letters, digits, spaces and '.' (no other punctuation: '_' separates references)"


class EnTKError(PilotError):
    """What keeps an EnTK workflow from going on."""


class EnTKValueError(EnTKError, ValueError):
    """A field's value is not accepted; the message names the field and what is."""


class EnTKTypeError(EnTKError, TypeError, ValueError):
    """A field's value has the wrong type; the message names the field and the type."""


class EnTKMissingError(EnTKError, AttributeError, ValueError):
    """A mandatory field is not set; the message names it."""


def bad_value(owner: str, field: str, value, accepted: str) -> EnTKValueError:
    return EnTKValueError(f"{owner}: {field}={value!r:.200} must be {accepted}")


def bad_type(owner: str, field: str, value, accepted: str) -> EnTKTypeError:
    return EnTKTypeError(
        f"{owner}: {field}={value!r:.200} ({type(value).__name__}) must be {accepted}"
    )


def check_name(owner: str, field: str, value) -> str:
    """An EnTK name: a string of letters, digits, spaces and '.'."""
    if not isinstance(value, str):
        raise bad_type(owner, field, value, f"a string of {NAME_RULE}")
    if any(not (c.isalnum() or c in ". ") for c in value):
        raise bad_value(owner, field, value, NAME_RULE)
    return value
