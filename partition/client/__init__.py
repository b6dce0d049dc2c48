"""The bootstrap's end of the pilot link, to the client: the link and its dispatch (link.py),
the address the client answers on (probe.py), what it keeps for the client until the
client's store has it (outbox.py), and data staging in chunks (data_port.py)."""
