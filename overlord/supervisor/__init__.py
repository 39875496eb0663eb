"""The control plane: persistent supervisors, their run loop, the task runner and the overlord's metadata store."""
