"""What runs inside the emulated GPUs and beside them: the agent, its launcher, the serving coordinator,
cross and bulk traffic, their record files, the one way into a namespace."""
