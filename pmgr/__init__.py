"""The client, in layers (docs/architecture.md): batch/ and store/ at the bottom, core/ (Session,
PilotManager, UnitManager, the pilot link) on them, observe/ (what a user sees of a session)
above, and compat/ (the faces: RADICAL-Pilot 1.x, EnTK, concurrent.futures, Parsl) on top."""
