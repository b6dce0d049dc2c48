"""The agent: one process per partition that places units on the partition's slots and runs them."""
