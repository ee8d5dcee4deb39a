"""Lightning callbacks for evaluation and diagnostics (InDomainEval, BFCLEval, Tau2Eval,
RolloutTable, GradientDiagnostics) live here, at the top level as the design card asks.
They only read what the module logs and the batches it sees; the module never imports them.
"""

from callbacks.bfcl_eval import BFCLEval
from callbacks.heldout_table import HeldoutTable
from callbacks.reward_curves import RewardCurves
from callbacks.rollout_table import RolloutTable
from callbacks.simulator_stats import SimulatorStats

__all__ = ["BFCLEval", "HeldoutTable", "RewardCurves", "RolloutTable", "SimulatorStats"]
