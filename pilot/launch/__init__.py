"""Launch methods: how the pilot starts its agents (and, across nodes, its node daemons)."""
