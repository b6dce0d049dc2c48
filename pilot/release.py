"""The package's release, in one place: setup.cfg reads it (attr), the face says it (rp.version,
`pilot --version`) and peers tell each other what they run (pilot/wire/peer_version.py)."""

RELEASE = "0.1.0"
