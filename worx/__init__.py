"""Shared primitives for every TrainingWorx stage: record serde, safe ids, atomic files."""
