"""Resource and agent configurations (YAML data; see configs/README.md)."""
