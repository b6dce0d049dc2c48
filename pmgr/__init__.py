"""The client side: Session, PilotManager, UnitManager, the state store and the pilot link."""
