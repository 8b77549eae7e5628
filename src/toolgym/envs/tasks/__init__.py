"""toolgym.envs.tasks."""
