"""torch's pipeline schedules as baselines (placeholder until the orders module lands)."""
