"""The control plane: supervisors and their run loop, the task runner, leader election, the overlord's store."""
