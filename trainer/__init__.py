"""The training-job worker and the recipe that trains one expert on a frozen trunk."""
