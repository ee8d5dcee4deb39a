"""Lightning callbacks for evaluation and diagnostics (InDomainEval, BFCLEval, Tau2Eval,
RolloutTable, GradientDiagnostics, RunFolder) live here, at the top level as the design card asks.
They only read what the module logs and the batches it sees; the module never imports them.
"""

from callbacks.bfcl_eval import BFCLEval
from callbacks.gradient_diagnostics import GradientDiagnostics
from callbacks.heldout_table import HeldoutTable
from callbacks.in_domain_eval import InDomainEval
from callbacks.periodic_eval import PeriodicEval
from callbacks.reward_curves import RewardCurves
from callbacks.rollout_table import RolloutTable
from callbacks.run_folder import RunFolder
from callbacks.simulator_stats import SimulatorStats
from callbacks.tau2_eval import Tau2Eval

__all__ = [
    "BFCLEval",
    "GradientDiagnostics",
    "HeldoutTable",
    "InDomainEval",
    "PeriodicEval",
    "RewardCurves",
    "RolloutTable",
    "RunFolder",
    "SimulatorStats",
    "Tau2Eval",
]
