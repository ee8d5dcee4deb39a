"""Token log-probabilities without a float32 ``[B, T, V]``: from logits or hidden states one
chunk of rows at a time (:mod:`.chunked`), and of a causal LM on a batch, plain, with a
shared prompt prefix run once, or per rollout group (:mod:`.causal_lm`)."""
