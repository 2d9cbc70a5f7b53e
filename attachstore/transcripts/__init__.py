"""Transcripts: the inline images of agent hosts' session logs moved into the store and back, byte for byte
(docs/transcripts.md). Beside the service, like maintenance: it admits and reads through the `Store`; its
face is what the CLI uses."""

from .candidates import Candidate, candidates, session_for
from .formats import FORMATS, named
from .provider import limits_for
from .release import release
from .repair import Repairer, RepairOptions, undo
from .repairreport import RepairReport
from .reports import Report, RestoreReport, Tally
from .restore import Restorer, restore_file
from .strip import Options, Stripper

__all__ = [
    "FORMATS",
    "Candidate",
    "Options",
    "RepairOptions",
    "RepairReport",
    "Repairer",
    "Report",
    "RestoreReport",
    "Restorer",
    "Stripper",
    "Tally",
    "candidates",
    "limits_for",
    "named",
    "release",
    "restore_file",
    "session_for",
    "undo",
]
