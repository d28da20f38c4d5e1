"""Training: loop, mesh + sharding rules, Orbax checkpoints, optimizer + schedules, metric writers."""
