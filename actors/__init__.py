"""The daemon's actors: one module per actor (feed, match, sender, orchestrator, jobs)."""
