"""The workload's lifecycle as pure functions: its state machine, and the controller's decide
step (snapshot of what the operator knows in, the actions to take out)."""
