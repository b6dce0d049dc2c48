"""Resource configs (their keys: pilot/config/resource_keys.py) and agent configs (agents.yaml),
as YAML."""
