"""Training recipes (setup -> train -> save), kept apart from the reusable modules of trainer/."""
