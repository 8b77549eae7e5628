"""Offline analyses of saved rollouts (no training): e.g. how well a teacher's signal ranks rewards."""
