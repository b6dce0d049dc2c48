"""Resource configs (local.yaml documents the keys) and agent configs (agents.yaml), as YAML."""
