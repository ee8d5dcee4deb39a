"""BFCL (Berkeley Function-Calling Leaderboard): data, the official checker's scoring,
multi-turn runs, the evaluator (:mod:`.evaluator`)."""
