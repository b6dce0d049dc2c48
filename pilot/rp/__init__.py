"""RADICAL-Pilot's own names that the core needs (the client's face on them is
pmgr/compat/rp1/): RP 0.90's state names and constants (names.py), `rp.utils`, RP 1.x's
resource-config look-ups (utils.py), and what a function worker runs for RP 1.x's code-running
task modes and its default Raptor worker's methods (raptor_functions.py)."""
