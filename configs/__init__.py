"""Resource configs (their keys: pilot/resource_keys.py) and agent configs (agents.yaml),
as YAML."""
