"""Training (s5): the loop, one update, the schedule, the loss, validation, checkpoints, logs."""
