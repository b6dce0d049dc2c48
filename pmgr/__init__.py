"""The client: Session, PilotManager, UnitManager, the pilot link, batch submission (batch/),
the state store (store/) and recovery."""
