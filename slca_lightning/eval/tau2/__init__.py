"""τ²-bench: environment, simulated users, the agent loop, scoring, the evaluator
(:mod:`.evaluator`)."""
