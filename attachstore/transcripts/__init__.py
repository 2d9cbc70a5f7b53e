"""Transcripts: the inline images of agent hosts' session logs moved into the store and back, byte for byte
(docs/transcripts.md). Beside the service, like maintenance: it admits and reads through the `Store`.

`scanner` (with `policy` and `nested`) streams JSON text and hands over the strings a policy wants; `inline`
knows images and placeholders; `formats` the hosts' files; `strip` and `restore` the two directions,
`reports` what they say of each file; `files` the safe replacement of a file, `writers` who has it open;
`candidates` the files of a tree a run works on, and their sessions; `release` the end of a session. The
face is what the CLI uses."""

from .candidates import Candidate, candidates, session_for
from .formats import FORMATS, named
from .release import release
from .reports import Report, RestoreReport, Tally
from .restore import Restorer, restore_file
from .strip import Options, Stripper

__all__ = [
    "FORMATS",
    "Candidate",
    "Options",
    "Report",
    "RestoreReport",
    "Restorer",
    "Stripper",
    "Tally",
    "candidates",
    "named",
    "release",
    "restore_file",
    "session_for",
]
