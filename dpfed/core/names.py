"""Names that cross a trust boundary: party names and job ids (issue 24).

One rule for both, checked at every place a name arrives (the coordinator's ``Register`` and
``SubmitJob``, the party's offers, tasks and job ends, :class:`dpfed.algorithms.contract.JobSpec`):
1-64 characters of ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit.
They become file names and log fields, so a NUL, a newline (which would forge a line in a log), any
other control character, a path separator or an over-long name is refused. The whole string must
match (``fullmatch``: a trailing newline does not slip past a ``$``). Free text from the other side (a refusal
reason, an error's details) is not refused but shown through :func:`printable`: cut, control characters escaped.
"""
from __future__ import annotations

import re

__all__ = ["MAX_NAME_LENGTH", "NAME_RULE", "valid_name", "check_job_id", "printable"]

MAX_NAME_LENGTH = 64
NAME_RULE = f"1-{MAX_NAME_LENGTH} letters, digits, '.', '_', '-' (starting with a letter or digit)"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0," + str(MAX_NAME_LENGTH - 1) + "}", re.ASCII)


def valid_name(name: object) -> bool:
    """True when ``name`` is a string that follows :data:`NAME_RULE`."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def check_job_id(job_id: object) -> str:
    """``job_id`` itself, or ValueError naming the rule (the bad id shown escaped, never raw)."""
    if not valid_name(job_id):
        shown = repr(job_id)[:80]
        raise ValueError(f"invalid job id {shown}: a job id is {NAME_RULE}")
    return str(job_id)


def printable(text: str, limit: int) -> str:
    """``text`` from across a trust boundary as it may be logged, kept or shown: at most ``limit`` characters
    ("..." after), every non-printable one escaped (a newline cannot forge a log line, an escape sequence cannot
    reach a terminal)."""
    cut = text[:limit]
    out = cut if cut.isprintable() else "".join(c if c.isprintable() else c.encode("unicode_escape").decode()
                                                for c in cut)
    return out + ("..." if len(text) > limit else "")
