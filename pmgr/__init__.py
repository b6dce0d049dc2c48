"""The client: Session, PilotManager and Pilot (pilot.py), UnitManager (routing.py,
unit_events.py), the pilot link, batch submission (batch/), the state store (store/),
recovery and the views of a session (observe/)."""
