"""The wire: what crosses a link between the pilot's processes, and how.

links.py     the protocol table: every message kind on every link, who sends it, who
             receives it, its body's check; each receiving process dispatches from it
protocol.py  framing (JSON frames, pack / unpack), timeouts, the one receive loop helper
messages.py  the body checks the table names;  checks.py: the checks they are built from
updates.py   unit state updates in columns (agent -> bootstrap -> client)
framed.py    JSON with its bytes beside it (a large argument crosses each hop once)
security.py  CURVE keys: who may talk to a pilot
liveness.py  heartbeats and silence clocks over links that fail
peer_version.py  what form of the messages a peer speaks: a client and its pilots speak one
"""
