"""Partitions: their descriptions, sizing (absolute, shares, FILL, all GPUs) and the partition
manager that enacts start/stop commands inside a running pilot."""
